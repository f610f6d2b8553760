"""HTML: one self-contained page to paste into a ticket or an incident channel.

Inline CSS and SVG only: no script, no stylesheet or font to fetch (a Content-Security-Policy
meta tag forbids any), readable with JavaScript off (collapsible parts are <details>). Every
piece of log text is escaped, and comes from the same redacted data as the JSON report.

`analyze`: the verdict, the swim-lane picture of the crash (lanes.py), the root traceback, the
symptoms it explains, liveness, the runbook steps, version advice and the reproducer. `scan`:
failures per rule as a bar chart, the rule table, one row per log linking to its own section.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import TextIO

from vcrash import __version__
from vcrash.classify.rules import doc_versions
from vcrash.redact import Redactor
from vcrash.report.findings import Batch, LogResult, relative_path
from vcrash.report.lanes import LEGEND, build_picture, legend_svg, picture_svg
from vcrash.report.model import Report

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
MAX_LOG_ROWS = 2000
MAX_LOG_SECTIONS = 50
MAX_BARS = 30

CSS = """
:root{--bg:#fff;--fg:#1b1f24;--muted:#5b636e;--line:#d8dde3;--panel:#f6f8fa;--err:#c62828;--warn:#a15c00;
--note:#1f5fa8;--ok:#2e7d32;--sym:#d9730d;--lane:#fbfcfd;--lane2:#f1f4f7;--rootlane:#fdecea;--band:#f5b7b1}
@media (prefers-color-scheme:dark){:root{--bg:#0f1216;--fg:#e6e9ed;--muted:#9aa4af;--line:#2c333b;
--panel:#171b21;--err:#ff6b6b;--warn:#f0b35a;--note:#7fb0ff;--ok:#7bd88f;--sym:#ffa657;--lane:#141920;
--lane2:#181e26;--rootlane:#3a1d1d;--band:#6b2a2a}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif}
main{max-width:1120px;margin:0 auto;padding:16px}
h1{font-size:1.35rem;margin:0 0 4px;overflow-wrap:anywhere}
.rule-id{font:600 .8em ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;color:var(--muted)}h2{font-size:1.1rem;margin:24px 0 8px}
code,pre{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:10px;overflow-x:auto;margin:6px 0}
code{overflow-wrap:anywhere}
a{color:var(--note)}
.facts{color:var(--muted);margin:0 0 12px;overflow-wrap:anywhere}
.verdict{border:1px solid var(--line);border-left:5px solid var(--err);border-radius:6px;padding:10px 14px;
background:var(--panel)}
.verdict.warning{border-left-color:var(--warn)}.verdict.note{border-left-color:var(--note)}
.verdict.healthy{border-left-color:var(--ok)}
.verdict p{margin:4px 0}.verdict dl{margin:6px 0 0;display:grid;grid-template-columns:max-content 1fr;gap:2px 12px}
.verdict dt{font-weight:600}.verdict dd{margin:0;overflow-wrap:anywhere}
.chip{display:inline-block;white-space:nowrap;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;color:#fff;
background:var(--muted)}
.chip.error,.chip.crashed,.chip.hung{background:var(--err)}.chip.warning,.chip.damaged,.chip.unreadable,
.chip.slow{background:var(--warn)}.chip.note{background:var(--note)}.chip.healthy{background:var(--ok)}
figure{margin:8px 0}
.scroll{overflow-x:auto;border:1px solid var(--line);border-radius:6px}
svg.lanes{display:block;width:100%;min-width:720px;height:auto;font:12px system-ui,sans-serif}
.lane-bg{fill:var(--lane)}.lane-bg.odd{fill:var(--lane2)}.root-lane .lane-bg{fill:var(--rootlane)}
.lane-name{fill:var(--fg);font-weight:600}.lane-detail{fill:var(--muted);font-size:11px}
.root-lane .lane-name{fill:var(--err)}
.axis line{stroke:var(--line);stroke-width:1}.axis text{fill:var(--muted);font-size:11px}
.axis-unit{font-style:italic}
.restart line{stroke:var(--note);stroke-dasharray:5 4;stroke-width:1.5}.restart text{fill:var(--note);font-size:11px}
.deadline-band{fill:var(--band);opacity:.45}.deadline line{stroke:var(--err);stroke-width:2}
.deadline text{fill:var(--err);font-size:11px;font-weight:600}
.link{fill:none;stroke:var(--sym);stroke-width:1.5;stroke-dasharray:4 3}.arrowhead{fill:var(--sym)}
.mark{stroke:var(--bg);stroke-width:1}
.mark-root{fill:var(--err)}.mark-root .root-ring{fill:none;stroke:var(--err);stroke-width:2}
.mark-symptom{fill:var(--sym)}.mark-crash{fill:var(--err);opacity:.75}.mark-traceback{fill:var(--muted)}
.mark-event{fill:var(--warn)}.mark-progress{fill:var(--ok);stroke:none}
.mark-stall{fill:none;stroke:var(--warn);stroke-width:2.5}
.mark-server-start,.mark-engine-init,.mark-ready,.mark-shutdown,.mark-http-500{fill:var(--bg);stroke:var(--note);
stroke-width:2}
.mark-label{fill:var(--ok);font-size:11px;stroke:none}
.root-label{fill:var(--err);font-weight:700;font-size:12px}
svg.lanes a:focus .mark,svg.lanes a:hover .mark{stroke:var(--fg);stroke-width:2}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0 0;padding:0;list-style:none;color:var(--muted);
font-size:13px}.legend li{display:flex;align-items:center;gap:4px}
.swatch .mark{stroke-width:1}
.note{color:var(--muted);font-size:13px;margin:4px 0}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:4px 8px;
border-bottom:1px solid var(--line);vertical-align:top}th{font-weight:600}td{overflow-wrap:anywhere}
.table-wrap{overflow-x:auto}
tr.outside td{color:var(--muted)}tr:target td{background:var(--rootlane)}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
ol,ul{padding-left:22px}li{margin:2px 0;overflow-wrap:anywhere}
svg.bars{display:block;width:100%;max-width:1000px;min-width:520px;height:auto;font:12px system-ui,sans-serif}
.bar{fill:var(--muted)}.bar.error{fill:var(--err)}.bar.warning{fill:var(--warn)}.bar.note{fill:var(--note)}
.bars text{fill:var(--fg)}.bars .count{fill:var(--muted)}
section.log{border-top:1px solid var(--line);margin-top:18px}
footer{color:var(--muted);font-size:12px;margin:28px 0 8px}
@media (max-width:600px){main{padding:10px}body{font-size:14px}h1{font-size:1.1rem}.verdict dl{grid-template-columns:1fr}
.verdict dt{margin-top:4px}}
"""


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        *body,
        "</main>",
        "</body>",
        "</html>",
    ]) + "\n"


def _chip(text: str, cls: str | None = None) -> str:
    return f'<span class="chip {escape(cls or text)}">{escape(text)}</span>'


def _code(text) -> str:
    return f"<code>{escape(str(text))}</code>"


def _stream_label(stream_id: str, path: str | None = None) -> str:
    if path and stream_id.startswith(path + ":"):
        stream_id = stream_id[len(path) + 1:]
    elif stream_id.count(":") >= 2:
        stream_id = stream_id.split(":", stream_id.count(":") - 2)[-1]
    return "untagged" if stream_id.startswith("-:") else stream_id.rstrip(":")


def _link(ref: str) -> str:
    """A rule reference: a link only for web addresses (a user rule could name `javascript:`)."""
    if ref.startswith(("https://", "http://")):
        return f'<a href="{escape(ref)}" rel="noopener noreferrer">{escape(ref)}</a>'
    return escape(ref)


# --------------------------------------------------------------------------- one finding


def _verdict(f: dict, path: str, liveness: dict | None, anchor: str = "verdict") -> list[str]:
    """The card at the top: what died, where, on what evidence, and what to do about versions."""
    sev = f["severity"]
    kind = "root cause" if f["kind"] == "root" else f["kind"]
    out = [f'<section class="verdict {escape(sev)}" id="{anchor}">',
           f"<p>{_chip(sev)} {_chip(kind, 'kind')} confidence {escape(f['confidence'])}"
           + (f" · {f['occurrences']} occurrences" if f.get("occurrences", 1) > 1 else "") + "</p>"]
    if f.get("summary"):
        out.append(f"<p>{escape(f['summary'])}</p>")
    where = f"{relative_path(path)}:{f['line']}"
    facts = [("Where", f"{_code(where)} in {_code(_stream_label(f['stream'], path))}"
              + (f" at {escape(f['time'])}" if f.get("time") else ""))]
    if f.get("evidence"):
        facts.append(("Evidence", _code(f["evidence"])))
    if f.get("version_advice"):
        facts.append(("Version", escape(f["version_advice"])))
    if liveness:
        verdict = liveness.get("verdict") or "unknown"
        reason = f" — {escape(liveness['reason'])}" if liveness.get("reason") else ""
        facts.append(("Liveness", f"{_chip(verdict.upper(), verdict)}{reason}"))
        if liveness.get("advice"):
            facts.append(("What to do", escape(liveness["advice"])))
    for note in f.get("notes") or []:
        facts.append(("Note", escape(note)))
    if f.get("corrupted"):
        facts.append(("Note", "the traceback is damaged (truncated or interleaved): read it with care"))
    if f.get("fingerprint"):
        facts.append(("Fingerprint", _code(f["fingerprint"])))
    out.append("<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    out.append("</section>")
    return out


def _traceback(text: str | None, anchor: str) -> list[str]:
    if not text:
        return []
    lines = text.count("\n") + 1
    return [f'<details id="{anchor}" open><summary>Root traceback ({lines} lines)</summary>',
            f"<pre>{escape(text)}</pre></details>"]


def _symptoms(explains: list[dict], path: str, anchor: str) -> list[str]:
    if not explains:
        return []
    out = [f'<h2 id="{anchor}">Symptoms it explains</h2>', "<ul>"]
    for s in explains:
        count = f" ×{s['occurrences']}" if s.get("occurrences", 1) > 1 else ""
        where = (f"{relative_path(s['input'])}:{s['line']}" if s.get("input") and s["input"] != path
                 else f"line {s['line']}")
        evidence = f": {_code(s['evidence'])}" if s.get("evidence") else ""
        out.append(f"<li>{_code(s['rule'])}{count} at {escape(where)} in "
                   f"{_code(_stream_label(s['stream'], s.get('input') or path))}{evidence}</li>")
    out.append("</ul>")
    return out


def _liveness(live: dict | None, anchor: str) -> list[str]:
    """The timeout family: the deadline, the last progress, what the log lacked."""
    if not live:
        return []
    rows = []
    if live.get("timeout_s"):
        source = "stated in the message" if live.get("timeout_source") == "message" else "the default; the log does not state it"
        env = f" ({_code(live['timeout_env'])})" if live.get("timeout_env") else ""
        rows.append(("Deadline", f"{live['timeout_s']:.0f}s{env}, {source}"))
    if live.get("stalled"):
        rows.append(("Waited on", _code(_stream_label(live["stalled"]))))
    last = live.get("last_progress")
    if last:
        gap = last.get("seconds_before_timeout")
        gap_text = f", {gap:.0f}s before the timeout" if isinstance(gap, (int, float)) else ""
        rows.append(("Last progress", f"line {last['line']}{gap_text}: {_code(last['text'])}"))
    late = live.get("progress_after_deadline")
    if late:
        after = late.get("seconds_after")
        after_text = f", {after:.0f}s after the deadline" if isinstance(after, (int, float)) else ""
        rows.append(("After the deadline", f"line {late['line']}{after_text}: {_code(late['text'])}"))
    if live.get("recommended_deadline_s"):
        basis = f" — {escape(live['basis'])}" if live.get("basis") else ""
        rows.append(("Recommended deadline", f"{live['recommended_deadline_s']:.0f}s{basis}"))
    elif live.get("basis"):
        rows.append(("Recommended deadline", escape(live["basis"])))
    for gap in live.get("missing") or []:
        rows.append(("Missing", escape(gap)))
    out = [f'<h2 id="{anchor}">Liveness: {escape(live.get("verdict") or "unknown")}</h2>',
           "<div class=\"table-wrap\"><table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
           + "</table></div>"]
    evidence = live.get("evidence") or []
    if evidence:
        out.append(f"<details><summary>Signals ({len(evidence)})</summary><ul>")
        out += [f"<li>line {e['line']} {escape(e['kind'])}: {_code(e['text'])}</li>" for e in evidence]
        out.append("</ul></details>")
    return out


def _runbook(rule_id: str, doc: dict, reproducer: str | None, prefix: str = "") -> list[str]:
    out = []
    steps = doc.get("resolution") or []
    if steps:
        out += [f'<h2 id="{prefix}fix">How to fix it</h2>', "<ol>"] + [f"<li>{escape(s)}</li>" for s in steps] + ["</ol>"]
    versions = [f"{label}: {escape(text)}" for label, text in doc_versions(doc)]
    if versions:
        out += [f'<h2 id="{prefix}versions">Version advice</h2>', "<ul>"] + [f"<li>{v}</li>" for v in versions] + ["</ul>"]
    if reproducer:
        out += [f'<h2 id="{prefix}reproduce">Reproduce</h2>', f"<pre><code>{escape(reproducer)}</code></pre>"]
    refs = doc.get("references") or []
    if refs:
        out += ["<details><summary>References</summary><ul>"] + [f"<li>{_link(r)}</li>" for r in refs] + \
            ["</ul></details>"]
    out.append(f'<p class="note">Runbook: {_code("vcrash explain " + rule_id)}</p>')
    return out


def _other_findings(findings: list[dict], path: str, prefix: str = "") -> list[str]:
    if not findings:
        return []
    out = [f'<h2 id="{prefix}other-findings">Other findings</h2>', '<div class="table-wrap"><table>',
           "<tr><th>#</th><th>rule</th><th>kind</th><th>severity</th><th>where</th><th>evidence</th></tr>"]
    for f in findings:
        out.append(f"<tr><td>{f['rank']}</td><td>{_code(f['rule'])}</td><td>{escape(f['kind'])}</td>"
                   f"<td>{_chip(f['severity'])}</td><td>line {f['line']} {_code(_stream_label(f['stream'], path))}</td>"
                   f"<td>{_code(_clip(f.get('evidence') or '', 200))}</td></tr>")
    out.append("</table></div>")
    return out


def _clip(text: str, limit: int) -> str:
    text = text.replace("\r", "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- analyze


def render_html(report: Report, out: TextIO, redactor: Redactor) -> None:
    out.write(analyze_page(report, redactor))


def analyze_page(report: Report, redactor: Redactor) -> str:
    from vcrash.report.terminal import traceback_text

    # Everything quoted below comes from the redacted form. Lazy: the swim lanes keep only the
    # streams they draw, and no traceback dict is made (100 K of them cost 130 MB here).
    data = report.to_dict(redactor, lazy=True)
    stream_count = len(report.streams)
    inputs = data["inputs"]
    diags = data["diagnoses"]
    primary = diags[0] if diags else None
    body = []
    if primary is None:
        body.append("<h1>vcrash: no crash found</h1>")
    else:
        body.append(f'<h1>{escape(primary["title"])} <span class="rule-id">{escape(primary["rule"])}</span></h1>')
    body.append('<p class="facts">' + "<br>".join(escape(_input_facts(i)) for i in inputs) + "</p>")
    if primary is None:
        body.append('<section class="verdict healthy" id="verdict"><p>No traceback or evidence line matched a '
                    "failure class.</p></section>")
    else:
        body += _verdict(primary, primary["input"], primary.get("liveness"))
    body += _timeline_section(data)
    if primary is not None:
        diag = report.diagnoses[0]
        tb = traceback_text(diag.traceback, redactor) if diag.traceback is not None else None
        body += _traceback(tb, "root-traceback")
        explains = [dict(e, evidence=_clip(redactor.text(s.evidence) or "", 300))
                    for e, s in zip(primary["explains"], diag.explains)]
        body += _symptoms(explains, primary["input"], "symptoms")
        body += _liveness(primary.get("liveness"), "liveness")
        body += _runbook(primary["rule"], diag.rule.doc, primary.get("reproducer"))
        body += _other_findings(diags[1:], primary["input"])
    body += _footer(data["rule_pack_version"], _accounting(data, stream_count), data.get("warnings") or [])
    title = f"vcrash: {primary['rule']}" if primary else "vcrash: no crash found"
    return _page(title, body)


def _input_facts(inp: dict) -> str:
    bits = [f"{inp['lines']} lines"]
    if inp.get("vllm_version"):
        bits.append(f"vLLM {inp['vllm_version']}")
    if inp.get("warning"):
        bits.append(f"damaged: {inp['warning']}")
    if inp.get("error"):
        bits = [f"unreadable: {inp['error']}"]
    return f"{relative_path(inp['path'])} ({', '.join(bits)})"


def _accounting(data: dict, stream_count: int) -> str:
    acc = data["accounting"]
    return (f"{acc['rebuilt']} tracebacks rebuilt, {acc['duplicates']} duplicate copies collapsed, "
            f"{acc['corrupted']} damaged; {stream_count} process streams")


def _timeline_section(data: dict) -> list[str]:
    pic = build_picture(data)
    if not pic.marks:
        return []
    out = ['<section id="timeline"><h2>Crash timeline</h2>', "<figure>",
           f'<div class="scroll">{picture_svg(pic)}</div>', "<figcaption>"]
    out.append('<ul class="legend">' + "".join(f"<li>{legend_svg(k)}{escape(t)}</li>" for k, t in LEGEND)
               + "</ul>")
    notes = []
    if pic.axis == "line":
        notes.append("No timestamps on every mark: positions are log lines.")
    if pic.zoomed:
        notes.append("Zoomed to the crash window.")
    if pic.left_out:
        notes.append("Left out: " + "; ".join(pic.left_out) + " (all are in the table below).")
    if pic.deadline and pic.axis == "time":
        notes.append("The shaded band is the deadline the process had before the timeout fired.")
    out += [f'<p class="note">{escape(n)}</p>' for n in notes]
    out.append("</figcaption></figure>")
    several = len(data["inputs"]) > 1
    out.append(f"<details><summary>Every mark ({len(pic.marks)})</summary>")
    out.append('<div class="table-wrap"><table><tr>' + ("<th>file</th>" if several else "")
               + "<th>line</th><th>time</th><th>process</th><th>kind</th><th>what</th></tr>")
    for m in pic.marks:
        cls = ' class="outside"' if not m.shown else ""
        file_cell = f"<td>{escape(relative_path(m.input))}</td>" if several else ""
        kind = m.kind + (" (restart)" if m.restart else "") + (" (last progress)" if m.last_progress else "")
        what = (f"{_code(m.rule)} " if m.rule else "") + escape(_clip(m.text, 300))
        out.append(f'<tr id="{m.key}"{cls}>{file_cell}<td>{m.line}</td><td>{escape(m.time or "")}</td>'
                   f"<td>{escape(_stream_label(m.stream, m.input))}</td><td>{escape(kind)}</td><td>{what}</td></tr>")
    out.append("</table></div></details></section>")
    return out


def _footer(pack_version: str, facts: str, warnings: list[str]) -> list[str]:
    out = ["<footer>", f"<p>{escape(facts)}</p>"] if facts else ["<footer>"]
    out += [f"<p>warning: {escape(w)}</p>" for w in warnings]
    out += [f"<p>vcrash {escape(__version__)}, rule pack {escape(pack_version)}</p>", "</footer>"]
    return out


# --------------------------------------------------------------------------- scan


def render_html_batch(batch: Batch, out: TextIO) -> None:
    out.write(scan_page(batch))


def scan_page(batch: Batch) -> str:
    results = batch.results
    status = Counter(r.status for r in results)
    counts = ", ".join(f"{status[s]} {s}" for s in ("crashed", "explained", "damaged", "healthy", "unreadable")
                       if status[s])
    body = [f"<h1>vcrash scan: {len(results)} log{'s' if len(results) != 1 else ''}</h1>",
            f'<p class="facts">{escape(counts or "nothing read")}'
            + (f"; {len(batch.skipped)} entries skipped" if batch.skipped else "") + "</p>"]
    per_rule = _per_rule(results)
    if per_rule:
        body += ['<section id="rules"><h2>Failures per rule</h2>', "<figure>",
                 f'<div class="scroll">{_bars_svg(per_rule[:MAX_BARS])}</div>']
        if len(per_rule) > MAX_BARS:
            body.append(f'<figcaption class="note">{len(per_rule) - MAX_BARS} more rules in the table.</figcaption>')
        body.append("</figure>")
        body.append('<div class="table-wrap"><table><tr><th>rule</th><th>severity</th><th>kind</th><th>findings</th>'
                    "<th>logs</th><th>first seen</th><th>last seen</th></tr>")
        for r in per_rule:
            body.append(f"<tr><td>{_code(r['rule'])}</td><td>{_chip(r['severity'])}</td><td>{escape(r['kind'])}</td>"
                        f"<td>{r['count']}</td><td>{r['logs']}</td><td>{escape(r['first'] or '')}</td>"
                        f"<td>{escape(r['last'] or '')}</td></tr>")
        body.append("</table></div></section>")
    detailed = [i for i, r in enumerate(results) if r.status != "healthy" or r.findings][:MAX_LOG_SECTIONS]
    body += _log_rows(results, set(detailed))
    for i in detailed:
        body += _log_section(results[i], i, batch)
    left = sum(1 for r in results if r.status != "healthy" or r.findings) - len(detailed)
    if left > 0:
        body.append(f'<p class="note">Sections for {left} more logs: '
                    f"{_code('vcrash analyze LOG --format html')}.</p>")
    body += _footer(batch.rule_pack_version, "", [])
    return _page(f"vcrash scan: {len(results)} logs", body)


def _per_rule(results: list[LogResult]) -> list[dict]:
    """Findings per rule (most first), the logs they are in, first and last seen (log time)."""
    rules: dict[str, dict] = {}
    for r in results:
        for f in r.findings:
            entry = rules.setdefault(f["rule"], {"rule": f["rule"], "severity": f["severity"], "kind": f["kind"],
                                                 "count": 0, "paths": set(), "times": []})
            entry["count"] += 1
            entry["paths"].add(r.path)
            if f.get("time"):
                entry["times"].append(f["time"])
    out = []
    for e in rules.values():
        out.append({"rule": e["rule"], "severity": e["severity"], "kind": e["kind"], "count": e["count"],
                    "logs": len(e["paths"]), "first": min(e["times"], default=None),
                    "last": max(e["times"], default=None)})
    out.sort(key=lambda e: (-e["count"], e["rule"]))
    return out


def _bars_svg(rows: list[dict]) -> str:
    width, label_w, bar_h, gap = 1000, 320, 18, 8
    top = 6
    height = top + len(rows) * (bar_h + gap)
    most = max(r["count"] for r in rows) or 1
    room = width - label_w - 150
    out = [f'<svg class="bars" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
           f'aria-labelledby="bars-title"><title id="bars-title">Findings per rule across the logs</title>']
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        w = max(2, round(r["count"] / most * room, 1))
        logs = f"in {r['logs']} log{'s' if r['logs'] != 1 else ''}"
        out.append(f'<g class="bar-row"><title>{escape(r["rule"])}: {r["count"]} findings {logs}</title>'
                   f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end">{escape(_clip(r["rule"], 42))}</text>'
                   f'<rect class="bar {escape(r["severity"])}" x="{label_w}" y="{y}" width="{w}" height="{bar_h}" rx="2"/>'
                   f'<text class="count" x="{label_w + w + 6}" y="{y + 13}">{r["count"]} · {logs}</text></g>')
    out.append("</svg>")
    return "".join(out)


def _log_rows(results: list[LogResult], detailed: set[int]) -> list[str]:
    out = ['<section id="logs"><h2>Logs</h2>', '<div class="table-wrap"><table>',
           "<tr><th>log</th><th>status</th><th>rule</th><th>line</th><th>evidence</th></tr>"]
    for i, r in enumerate(results[:MAX_LOG_ROWS]):
        p = r.primary or {}
        name = escape(relative_path(r.path))
        cell = f'<a href="#log-{i + 1}">{name}</a>' if i in detailed else name
        what = p.get("evidence") or r.explained_text() or r.error or r.warning or ""
        out.append(f"<tr><td>{cell}</td><td>{_chip(r.status)}</td><td>{_code(p['rule']) if p else ''}</td>"
                   f"<td>{p.get('line') or ''}</td><td>{escape(_clip(what, 200))}</td></tr>")
    out.append("</table></div>")
    if len(results) > MAX_LOG_ROWS:
        out.append(f'<p class="note">{len(results) - MAX_LOG_ROWS} more logs: {_code("--format csv")}.</p>')
    out.append("</section>")
    return out


def _log_section(r: LogResult, index: int, batch: Batch) -> list[str]:
    anchor = f"log-{index + 1}"
    out = [f'<section class="log" id="{anchor}">',
           f"<h2>{_code(relative_path(r.path))} {_chip(r.status)}</h2>",
           f'<p class="facts">{r.lines} lines' + (f", vLLM {escape(r.vllm_version)}" if r.vllm_version else "")
           + "</p>"]
    if r.error:
        out.append(f"<p>{escape(r.error)}</p>")
    if r.warning:
        out.append(f"<p>damaged: {escape(r.warning)}</p>")
    p = r.primary
    if p is not None:
        rule = batch.rule(p["rule"])
        doc = rule.doc if rule is not None else {}
        out.append(f"<h3>{escape(p['rule'])} — {escape(p['title'])}</h3>")
        live = None
        if p.get("liveness"):
            live = {"verdict": p["liveness"], "reason": p.get("liveness_reason"), "advice": p.get("liveness_advice")}
        out += _verdict(dict(p, summary=doc.get("summary", "")), r.path, live, f"{anchor}-verdict")
        out += _traceback(r.traceback, f"{anchor}-traceback")
        out += _symptoms(p["explains"], r.path, f"{anchor}-symptoms")
        out += _runbook(p["rule"], doc, rule.reproducer if rule is not None else None, f"{anchor}-")
        out += _other_findings(r.findings[1:], r.path, f"{anchor}-")
    out.append("</section>")
    return out

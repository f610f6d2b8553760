"""Markdown: a ticket-ready document (GitHub issue, Jira, the GitHub step summary).

For one log: what happened, the root traceback in a ```pytb fence, the symptoms it explains,
other findings, the timeline, the fix steps, version advice and the reproducer command. For many
logs (analyze over several inputs, or scan): a summary by rule and by log, then the same section
for the first crashed logs.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TextIO

from vcrash.classify.rules import doc_versions
from vcrash.redact import Redactor
from vcrash.report.findings import Batch, LogResult, batch_from_report, relative_path
from vcrash.report.model import Report

MAX_LOG_ROWS = 100
MAX_DETAILED_LOGS = 10
MAX_TIMELINE_ROWS = 25


def _cell(text) -> str:
    """A table cell: one line, pipes escaped."""
    if text is None:
        return ""
    text = str(text).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= 160 else text[:159] + "…"


def _code(text: str) -> str:
    """Inline code that survives backticks in the text."""
    text = text.replace("\n", " ")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _fence(text: str, lang: str = "") -> list[str]:
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [f"{ticks}{lang}", text.rstrip("\n"), ticks]


def _log_facts(res: LogResult) -> str:
    bits = [f"{res.lines} lines"]
    if res.vllm_version:
        bits.append(f"vLLM {res.vllm_version}")
    if res.warning:
        bits.append(f"damaged: {res.warning}")
    if res.error:
        bits = [f"unreadable: {res.error}"]
    return f"{_code(relative_path(res.path))} ({', '.join(bits)})"


def log_section(res: LogResult, batch: Batch, level: int = 1) -> list[str]:
    """The ticket for one log; `level` is the heading level of its title."""
    h = "#" * level
    hh = "#" * (level + 1)
    p = res.primary
    if res.status == "unreadable":
        return [f"{h} vcrash: {_code(relative_path(res.path))} could not be read", "", res.error or "", ""]
    if p is None and res.warning:
        return [f"{h} vcrash: {_code(relative_path(res.path))} is damaged", "", f"**Log:** {_log_facts(res)}", "",
                "No crash found in the part before the damage; the rest of the log could not be read.", ""]
    if p is None:
        return [f"{h} vcrash: no crash found", "", f"**Log:** {_log_facts(res)}", "",
                "No traceback or evidence line matched a failure class.", ""]
    rule = batch.rule(p["rule"])
    doc = rule.doc if rule is not None else {}
    head = "vcrash" if level == 1 else _code(relative_path(res.path))
    out = [f"{h} {head}: {p['rule']} — {p['title']}", "", f"**Log:** {_log_facts(res)}", ""]
    out += [f"{hh} What happened", ""]
    if doc.get("summary"):
        out += [doc["summary"], ""]
    where = f"{relative_path(res.path)}:{p['line']}"
    facts = [f"- **Where:** {_code(where)} in {_code(p['stream'].removeprefix(res.path + ':'))}" + (f" at {p['time']}" if p.get("time") else ""),
             f"- **Kind:** {p['kind']} · severity {p['severity']} · confidence {p['confidence']}",
             f"- **Evidence:** {_code(p['evidence'])}" if p["evidence"] else None]
    if p["occurrences"] > 1:
        facts.append(f"- **Occurrences:** {p['occurrences']}")
    if p.get("liveness"):
        reason = f" — {p['liveness_reason']}" if p.get("liveness_reason") else ""
        facts.append(f"- **Liveness:** {p['liveness']}{reason}")
        if p.get("liveness_advice"):
            facts.append(f"- **What to do:** {p['liveness_advice']}")
    for note in p.get("notes") or []:
        facts.append(f"- **Note:** {note}")
    if p["corrupted"]:
        facts.append("- **Note:** the traceback is damaged (truncated or interleaved); read it with care.")
    facts.append(f"- **Fingerprint:** {_code(p['fingerprint'])}")
    out += [x for x in facts if x] + [""]
    if res.traceback:
        out += [f"{hh} Root traceback", ""] + _fence(res.traceback, "pytb") + [""]
    if p["explains"]:
        out += [f"{hh} Symptoms it explains", ""]
        for s in p["explains"]:
            count = f" ×{s['occurrences']}" if s["occurrences"] > 1 else ""
            where = f"{s['input']}:{s['line']}" if s.get("input") and s["input"] != res.path else f"line {s['line']}"
            out.append(f"- {_code(s['rule'])}{count} at {where}: {_code(s['evidence'])}")
        out.append("")
    others = res.findings[1:]
    if others:
        out += [f"{hh} Other findings", "", "| # | rule | kind | severity | line | evidence |",
                "|---|---|---|---|---|---|"]
        for f in others:
            out.append(f"| {f['rank']} | {_cell(f['rule'])} | {f['kind']} | {f['severity']} | {f['line']} | "
                       f"{_cell(f['evidence'])} |")
        out.append("")
    if len(res.timeline) > 1:
        out += [f"{hh} Timeline", "", "| line | time | process | what |", "|---|---|---|---|"]
        for item in res.timeline[:MAX_TIMELINE_ROWS]:
            stream = item["stream"].split(":", 1)[-1]
            what = item["text"]
            if item.get("context") and item["kind"] == "traceback":
                from vcrash.report.terminal import clip

                what = f"{clip(item['context'], 60)} → {what}"
            out.append(f"| {item['line']} | {item.get('time') or ''} | {_cell(stream)} | {_cell(what)} |")
        if len(res.timeline) > MAX_TIMELINE_ROWS:
            out.append(f"\n… {len(res.timeline) - MAX_TIMELINE_ROWS} more in `--format json`.")
        out.append("")
    steps = doc.get("resolution") or []
    if steps:
        out += [f"{hh} How to fix it", ""] + [f"{i}. {s}" for i, s in enumerate(steps, 1)] + [""]
    versions = []
    if p.get("version_advice"):
        versions.append(f"- {p['version_advice']}")
    versions += [f"- {label}: {text}" for label, text in doc_versions(doc)]
    if versions:
        out += [f"{hh} Version advice", ""] + versions + [""]
    if rule is not None and rule.reproducer:
        out += [f"{hh} Reproduce", ""] + _fence(rule.reproducer, "sh") + [""]
    out += [f"Runbook: {_code('vcrash explain ' + p['rule'])}", ""]
    return out


def markdown_document(batch: Batch) -> str:
    results = batch.results
    if len(results) == 1:
        lines = log_section(results[0], batch, level=1)
    else:
        lines = _summary(batch)
    lines.append(f"<sub>vcrash {batch.tool_version}, rule pack {batch.rule_pack_version}</sub>")
    return "\n".join(lines).rstrip() + "\n"


def _summary(batch: Batch) -> list[str]:
    results = batch.results
    status = Counter(r.status for r in results)
    damaged = f"{status['damaged']} damaged, " if status["damaged"] else ""
    explained = f"{status['explained']} explained by another log, " if status["explained"] else ""
    out = [f"# vcrash: {len(results)} logs — {status['crashed']} crashed, {explained}{status['healthy']} healthy, "
           f"{damaged}{status['unreadable']} unreadable", ""]
    per_rule: dict[str, list] = {}
    for r in results:
        for f in r.findings:
            per_rule.setdefault(f["rule"], []).append((r, f))
    if per_rule:
        out += ["## Findings by rule", "", "| rule | severity | kind | findings | logs | example |",
                "|---|---|---|---|---|---|"]
        for rid, items in sorted(per_rule.items(), key=lambda kv: (-len({id(r) for r, _ in kv[1]}), kv[0])):
            r0, f0 = items[0]
            logs = len({id(r) for r, _ in items})
            out.append(f"| {_cell(rid)} | {f0['severity']} | {f0['kind']} | {len(items)} | {logs} | "
                       f"{_cell(relative_path(r0.path))}:{f0['line']} |")
        out.append("")
    listed = [r for r in results if r.status != "healthy" or r.findings]
    if listed:
        out += ["## Logs", "", "| log | status | rule | line | evidence |", "|---|---|---|---|---|"]
        for r in listed[:MAX_LOG_ROWS]:
            p = r.primary or {}
            out.append(f"| {_cell(relative_path(r.path))} | {r.status} | {_cell(p.get('rule'))} | "
                       f"{p.get('line') or ''} | {_cell(p.get('evidence') or r.explained_text() or r.error or r.warning)} |")
        if len(listed) > MAX_LOG_ROWS:
            out.append(f"\n… {len(listed) - MAX_LOG_ROWS} more logs in `--format csv`.")
        out.append("")
    healthy = sum(1 for r in results if r.status == "healthy" and not r.findings)
    if healthy:
        out += [f"{healthy} log(s) with no finding.", ""]
    crashed = [r for r in results if r.status == "crashed"]
    for r in crashed[:MAX_DETAILED_LOGS]:
        out += log_section(r, batch, level=2)
    if len(crashed) > MAX_DETAILED_LOGS:
        out += [f"… details for {len(crashed) - MAX_DETAILED_LOGS} more crashed logs: "
                "`vcrash analyze LOG --format markdown`.", ""]
    return out


def render_markdown_batch(batch: Batch, out: TextIO) -> None:
    out.write(markdown_document(batch))


def render_markdown(report: Report, out: TextIO, redactor: Redactor) -> None:
    render_markdown_batch(batch_from_report(report, redactor), out)

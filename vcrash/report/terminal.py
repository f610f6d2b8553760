"""The on-call engineer's report: rich on a terminal, the same layout as plain text elsewhere."""

from __future__ import annotations

import os
from typing import TextIO

from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from vcrash.classify.diagnose import Diagnosis
from vcrash.rebuild.model import Traceback
from vcrash.redact import Redactor
from vcrash.report.model import Report, explaining_roots

SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "note": "bold blue"}
MAX_FRAMES_SHOWN = 12


def render_terminal(report: Report, out: TextIO, redactor: Redactor, color: bool, width: int | None = None) -> None:
    # NO_COLOR (no-color.org) wins over a terminal; rich only reads it when no_color is left unset.
    no_color = not color or os.environ.get("NO_COLOR", "") != ""
    console = Console(file=out, force_terminal=color, no_color=no_color, width=width or (None if color else 100),
                      highlight=False, emoji=False)
    # Several inputs: findings first, then one line per input (a folder of 135 logs must not
    # bury its finding under 135 headers).
    several = len(report.inputs) > 1
    if not several:
        _header(console, report)
    if not report.diagnoses:
        console.print(Text("No crash found: no traceback or evidence line matched a failure class.", style="green"))
        _unfatal_tracebacks(console, report, redactor)
        if several:
            _input_lines(console, report)
        _footer(console, report)
        return
    primary = report.diagnoses[0]
    _diagnosis(console, primary, redactor, primary=True)
    others = report.diagnoses[1:]
    if others:
        console.print()
        console.print(Text("Other findings", style="bold"))
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("#", "rule", "kind", "where", "evidence"):
            table.add_column(col, overflow="fold")
        for d in others:
            table.add_row(Text(str(d.rank)), Text(d.rule.id), Text(d.rule.kind), Text(_where(d)),
                          Text(clip(redactor.text(d.evidence), 120)))
        console.print(table)
    _timeline(console, report, redactor)
    if several:
        _input_lines(console, report)
    _footer(console, report)


def _input_facts(inp) -> str:
    bits = [f"{inp.lines} lines"]
    if inp.vllm_version:
        bits.append(f"vLLM {inp.vllm_version}")
    if inp.compression:
        bits.append(inp.compression)
    if inp.error:
        bits = [f"unreadable: {inp.error}"]
    return f"{inp.path}  ({', '.join(bits)})"


def _header(console: Console, report: Report) -> None:
    for inp in report.inputs:
        console.print(Text(_input_facts(inp), style="dim"))
    console.print()


def _input_lines(console: Console, report: Report) -> None:
    """One line per input: its facts and what was found in it."""
    console.print()
    console.print(Text("Inputs", style="bold"))
    for index, inp in enumerate(report.inputs):
        found = [d for d in report.diagnoses if d.input_index == index]
        bits = []
        if found:
            bits.append(plural(len(found), "finding") + f" (first: {found[0].rule.id})")
        for by in explaining_roots(report.diagnoses, index):
            symptoms = ", ".join(dict.fromkeys(s["rule"] for s in by["symptoms"]))
            bits.append(f"{symptoms} explained by {by['rule']} at {by['input']}:{by['line']}")
        if not bits and not inp.error:
            bits.append("no crash found")
        console.print(Text(f"  {_input_facts(inp)}" + (f": {'; '.join(bits)}" if bits else ""), style="dim"))


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def clip(text: str | None, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary with "…" so a cut never reads as whole."""
    text = text or ""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:  # a word boundary not too far back; else cut inside a long token
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _stream_label(stream_id: str) -> str:
    label = stream_id[len(stream_id.rsplit(":", 2)[0]) + 1:] if stream_id.count(":") >= 2 else stream_id
    return "untagged" if label.startswith("-:") else label.rstrip(":")


def _where(d: Diagnosis) -> str:
    stream = _stream_label(d.stream_id)
    return f"{d.input}:{d.line} [{stream}]"


def _location(path: str, line: int, room: int) -> str:
    """`path:line` in at most `room` columns: a long path loses its head, never its line number,
    so the wrap never falls inside it."""
    loc = f"{path}:{line}"
    if len(loc) <= room:
        return loc
    keep = max(room - len(f":{line}") - 1, 8)
    return "…" + path[-keep:] + f":{line}"


def _panel_title(d: Diagnosis, room: int) -> tuple[Text, str | None]:
    """The panel's title in `room` columns; a rule title that does not fit moves into the body
    (returned second) rather than being cut by the border."""
    rule = d.rule
    title = Text()
    title.append(f"{rule.severity.upper()} ", style=SEVERITY_STYLE.get(rule.severity, "bold"))
    title.append(f"{rule.id}", style="bold")
    if len(title.plain) + len(f" — {rule.title}") <= room:
        title.append(f" — {rule.title}")
        return title, None
    if len(title.plain) > room:
        title = Text(clip(title.plain, room), style="bold")
    return title, rule.title


def _diagnosis(console: Console, d: Diagnosis, redactor: Redactor, primary: bool) -> None:
    rule = d.rule
    inner = console.width - 4  # panel borders and padding
    title, moved = _panel_title(d, console.width - 6)  # "╭─ " … " ─╮"
    body: list = []
    if moved:
        body.append(Text(moved, style="bold"))
    body.append(Text(f"{rule.kind} cause, confidence {d.confidence}" if rule.kind == "root"
                     else f"{rule.kind}, confidence {d.confidence}", style="dim"))
    if rule.doc.get("summary"):
        body.append(Text(rule.doc["summary"]))
    where = Text("Where: ", style="bold")
    where.append(_location(d.input, d.line, inner - len("Where: ")))
    where.append(f" [{_stream_label(d.stream_id)}]")
    if d.time:
        where.append(f" at {d.time}")
    if d.occurrences > 1:
        where.append(f"  ({d.occurrences} occurrences)")
    body.append(where)
    ev = Text("Evidence: ", style="bold")
    ev.append(redactor.text(d.evidence) or "")
    body.append(ev)
    if d.corrupted and d.traceback is not None:
        body.append(Text(f"Traceback damaged: {d.traceback.corrupted_reason}", style="yellow"))
    if d.version_advice:
        body.append(Text(f"Version: {d.version_advice}", style="cyan"))
    for note in d.notes:
        body.append(Text(f"Note: {note}", style="yellow"))
    if d.liveness:
        lv = d.liveness
        line = Text("Liveness: ", style="bold")
        line.append(lv.get("verdict", "unknown").upper(), style="bold magenta")
        if lv.get("reason"):
            line.append(f" — {lv['reason']}")
        body.append(line)
        if lv.get("timeout_s"):
            source = "stated in the message" if lv.get("timeout_source") == "message" else "default; the log does not state it"
            env = f" ({lv['timeout_env']})" if lv.get("timeout_env") else ""
            body.append(Text(f"  deadline: {lv['timeout_s']:.0f}s{env}, {source}"))
        if lv.get("advice"):
            body.append(Text(f"  what to do: {lv['advice']}"))
        last = lv.get("last_progress")
        if last:
            gap = last.get("seconds_before_timeout")
            gap_text = f", {gap:.0f}s before the timeout" if isinstance(gap, (int, float)) else ""
            body.append(Text(f"  last progress: line {last['line']}{gap_text}: {clip(redactor.text(last['text']), 140)}"))
        late = lv.get("progress_after_deadline")
        if late:
            after = late.get("seconds_after")
            after_text = f", {after:.0f}s after the deadline" if isinstance(after, (int, float)) else ""
            body.append(Text(f"  after the deadline: line {late['line']}{after_text}: "
                             f"{clip(redactor.text(late['text']), 140)}"))
        for gap in lv.get("missing") or []:
            body.append(Text(f"  missing: {gap}", style="yellow"))
    console.print(Panel(Group(*body), title=title, title_align="left", border_style="red" if primary else "dim"))
    if d.traceback is not None:
        console.print(Text("Root traceback", style="bold"))
        console.print(_traceback_view(d.traceback, redactor, console.is_terminal), soft_wrap=not console.is_terminal)
    if d.explains:
        console.print(Text("Symptoms it explains", style="bold"))
        for s in d.explains:
            count = f" ×{s.occurrences}" if s.occurrences > 1 else ""
            console.print(Text(f"  • {s.rule.id}{count} — {_where(s)}: {clip(redactor.text(s.evidence), 110)}"),
                          soft_wrap=not console.is_terminal)
    steps = rule.doc.get("resolution") or []
    if steps:
        console.print(Text("Fix", style="bold"))
        for i, step in enumerate(steps, 1):
            console.print(Text(f"  {i}. {step}"), soft_wrap=not console.is_terminal)
    if rule.reproducer:
        console.print(Text("Reproduce: ", style="bold") + Text(rule.reproducer))
    console.print(Text("Runbook: ", style="bold") + Text(f"vcrash explain {rule.id}"))


def traceback_text(tb: Traceback, redactor: Redactor, max_frames: int = MAX_FRAMES_SHOWN) -> str:
    """A canonical rendering of the rebuilt traceback (prefixes and headers removed)."""
    out: list[str] = []
    for i, exc in enumerate(tb.exceptions):
        if exc.relation == "cause":
            out += ["", "The above exception was the direct cause of the following exception:", ""]
        elif exc.relation == "context":
            out += ["", "During handling of the above exception, another exception occurred:", ""]
        elif exc.relation == "group":
            out += [f"-- member {exc.group_path} --"]
        if exc.frames:
            out.append("Traceback (most recent call last):")
            frames = exc.frames
            if len(frames) > max_frames + 2:
                skipped = len(frames) - max_frames
                frames = frames[:2] + frames[-(max_frames - 2):]
                out_frames = [_frame_lines(f, redactor) for f in frames[:2]] + [[f"  ... {skipped} frames not shown ..."]] \
                    + [_frame_lines(f, redactor) for f in frames[2:]]
            else:
                out_frames = [_frame_lines(f, redactor) for f in frames]
            for chunk in out_frames:
                out += chunk
            if exc.repeated_frames:
                out.append(f"  [Previous line repeated {exc.repeated_frames} more times]")
        msg = redactor.text(exc.message) or ""
        out.append(f"{exc.type}: {msg}" if msg else exc.type)
        for nf in exc.native_frames[:6]:
            out.append(f"  {redactor.text(nf)}")
    # Paths and functions are the program's; source lines get the secret patterns only.
    return "\n".join(out)


def _frame_lines(f, redactor: Redactor) -> list[str]:
    loc = f'  File "{f.file}", line {f.line}' + (f", in {f.function}" if f.function else "")
    return [loc] + ([f"    {redactor.code(f.code)}"] if f.code else [])


def _traceback_view(tb: Traceback, redactor: Redactor, color: bool):
    text = traceback_text(tb, redactor)
    if not color:
        return Text(text)
    in_app = [i + 1 for i, line in enumerate(text.splitlines()) if "/vllm/" in line and line.lstrip().startswith("File")]
    return Syntax(text, "pytb", theme="ansi_dark", word_wrap=True, highlight_lines=set(in_app))


def _timeline(console: Console, report: Report, redactor: Redactor) -> None:
    if len(report.timeline) < 2:
        return
    console.print()
    console.print(Text("Timeline", style="bold"))
    several = len(report.inputs) > 1
    names = _short_names([inp.path for inp in report.inputs])
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for col in (("file",) if several else ()) + ("line", "time", "process", "what"):
        table.add_column(col, overflow="fold")
    for item in report.timeline[:25]:
        stream = _stream_label(item["stream"])
        what = item["text"]
        if item.get("context") and item["kind"] == "traceback":
            what = f"{clip(redactor.text(item['context']), 60)} → {what}"  # redact before cutting
        if item["kind"] not in ("traceback", "event"):
            what = f"[{item['kind']}] {what}"
        if item.get("duplicates"):
            what += f"  (+{plural(item['duplicates'], 'duplicate copy', 'duplicate copies')})"
        cells = [Text(str(item["line"])), Text(item.get("time") or ""), Text(stream),
                 Text(clip(redactor.text(what), 140))]
        table.add_row(*([Text(names.get(item.get("input"), item.get("input") or ""))] if several else []), *cells)
    console.print(table)
    if len(report.timeline) > 25:
        console.print(Text(f"  … {len(report.timeline) - 25} more in --format json", style="dim"))


def _short_names(paths: list[str]) -> dict[str, str]:
    """Inputs named without the folder they all share (`analyze logs/`): the file column stays narrow."""
    parents = {os.path.dirname(p) for p in paths}
    try:
        common = os.path.commonpath(list(parents)) if len(paths) > 1 and all(parents) else ""
    except ValueError:  # absolute and relative paths mixed
        common = ""
    return {p: os.path.relpath(p, common) if common else p for p in paths}


def _unfatal_tracebacks(console: Console, report: Report, redactor: Redactor) -> None:
    """A log with tracebacks but no finding: say what they were, so that "no crash" is not read
    as "nothing went wrong" (a request's handled 500 is still a user's failed request)."""
    tracebacks = report.tracebacks
    first = next((tb for tb in tracebacks if tb.exceptions and tb.exceptions[-1].type != "<truncated>"), None)
    if first is None:
        return
    exc = first.exceptions[-1]
    console.print(Text(
        f"{plural(len(tracebacks), 'traceback')} found, none fatal (a request's handled failure, or a stack "
        f"logged as a warning); the first, at line {first.end_line}: "
        f"{clip(redactor.text(f'{exc.type}: {exc.message_head}' if exc.message_head else exc.type), 160)}",
        style="yellow"))


def _footer(console: Console, report: Report) -> None:
    acc = report.accounting
    console.print()
    console.print(Text(
        f"{plural(acc['rebuilt'], 'traceback')} rebuilt, "
        f"{plural(acc['duplicates'], 'duplicate copy', 'duplicate copies')} collapsed, "
        f"{acc['corrupted']} damaged; {plural(len(report.streams), 'process stream')}", style="dim"))
    for w in report.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))

"""Follow mode: tail growing logs, diagnose crashes as they happen.

`follow(sources, pack)` reads each source from its start and then keeps reading what is
appended, like `tail -F`: a file that is replaced (new inode: log rotation) or shrinks
(truncation) is reopened from its start, as a new input named `PATH#2`, `PATH#3`, ….
`-` reads stdin until it ends. Lines go through the same per-input pipeline as `analyze`
(`InputAnalysis`); a traceback whose stream has been quiet for `idle_s` seconds is closed
(a dying process writes nothing after it), so the diagnosis shows up without waiting for
more output. New diagnoses are shown as they happen on stderr: a live rich view on a
terminal, one plain line each otherwise; a symptom waits a grace window for the root that
explains it, and one shown before its root arrived gets a correction line. Ctrl-C (or SIGTERM)
ends the watch and returns the final report; `until_first` returns as soon as a root diagnosis
is shown (a CI watchdog), on stdin too while the pipe stays open.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

from vcrash.analyze import (FULL_PREFIX_LINES, InputAnalysis, Options, analyze_source,
                            build_report, needles_for, raw_only_needles)
from vcrash.classify.match import Matcher
from vcrash.classify.rules import RulePack
from vcrash.read import MAX_LINE_BYTES, InputError, Source, decode, detect_compression, iter_lines
from vcrash.report.model import InputSummary, Report

POLL_S = 0.2
IDLE_S = 2.0  # an open traceback whose stream has been quiet this long is complete
GRACE_AFTER_IDLE_S = 1.0  # a symptom waits this long past the idle flush for the root that explains it
READ_SIZE = 1 << 20


@dataclass
class _Input:
    """One followed file generation (a rotated or truncated file starts a new one)."""

    state: InputAnalysis
    summary: InputSummary
    lineno: int = 0
    offset: int = 0
    carry: bytes = b""
    examined: int = 0  # lines the catch-up read in full (the rest are counted only)
    open_since: dict = field(default_factory=dict)  # stream id -> (last_seen count, first seen idle at)

    def feed_bytes(self, data: bytes) -> int:
        """Feed every complete line in data; returns how many lines were fed."""
        buf = self.carry + data if self.carry else data
        start = 0
        fed = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            self._line(buf[start:nl])
            fed += 1
            start = nl + 1
        self.carry = buf[start:]
        if len(self.carry) > MAX_LINE_BYTES:  # a runaway line: cut it, as the batch reader does
            self._line(self.carry[:MAX_LINE_BYTES], cut=True)
            self.carry = b""
            fed += 1
        return fed

    def _line(self, raw: bytes, cut: bool = False, unterminated: bool = False) -> None:
        self.lineno += 1
        self.examined += 1
        text = decode(raw[:MAX_LINE_BYTES])
        if len(raw) > MAX_LINE_BYTES or (cut and not unterminated):
            text += " …[line cut]"
        self.state.feed(self.lineno, self.offset, text)
        self.offset += len(raw) + (0 if cut else 1)
        self.summary.lines = self.lineno
        self.summary.bytes = self.offset

    def flush_quiet(self, now: float, idle_s: float) -> None:
        """Close open tracebacks of streams that wrote nothing for idle_s seconds."""
        rebuilder = self.state.rebuilder
        current = rebuilder.open_streams()
        stale = []
        for sid, seen in current.items():
            last = self.open_since.get(sid)
            if last is None or last[0] != seen:
                self.open_since[sid] = (seen, now)
            elif now - last[1] >= idle_s:
                stale.append(sid)
        for sid in list(self.open_since):
            if sid not in current:
                del self.open_since[sid]
        if stale:
            rebuilder.flush_streams(stale)
            for sid in stale:
                self.open_since.pop(sid, None)

    def finish(self) -> None:
        if self.carry:
            self._line(self.carry, cut=True, unterminated=True)  # the last line has no newline
            self.carry = b""
        self.state.finish()
        obs = self.state.observer
        self.summary.examined_lines = self.examined
        self.summary.vllm_versions = obs.versions
        self.summary.vllm_version = obs.versions[0] if obs.versions else None


class _Tail:
    """Reads one source incrementally; a new generation on rotation or truncation."""

    def __init__(self, source: Source, start_input: Callable[[str], _Input]):
        self.source = source
        self.start_input = start_input
        self.generation = 0
        self.fh = None
        self.ino = None
        self.pos = 0
        self.eof = False  # stdin ended
        self.current: _Input | None = None
        self._open()

    def _name(self) -> str:
        return self.source.display if self.generation <= 1 else f"{self.source.display}#{self.generation}"

    def _open(self) -> None:
        self.generation += 1
        if self.current is not None:
            self.current.finish()
        self.current = self.start_input(self._name())
        if self.source.is_stdin:
            self.fh = sys.stdin.buffer
            return
        try:
            self.fh = open(self.source.path, "rb")
        except OSError as exc:
            if self.generation == 1:
                raise InputError(f"cannot read {self.source.display}: {exc.strerror or exc}") from None
            self.fh = None
            return
        st = os.fstat(self.fh.fileno())
        self.ino = st.st_ino
        self.pos = 0
        if detect_compression(self.fh.read(6)):
            self._read_compressed()
            return
        self.fh.seek(0)
        if st.st_size:
            self._catch_up(st.st_size)

    def _read_compressed(self) -> None:
        """A compressed log is not growing: read it once, as `analyze` would, and stop there."""
        self.fh.close()
        self.fh = None
        self.eof = True
        inp = self.current
        state, summary = analyze_source(self.source, inp.state.index, inp.state.matcher, Options())
        inp.state = state
        inp.summary.lines, inp.summary.bytes = summary.lines, summary.bytes
        inp.summary.compression, inp.summary.warning = summary.compression, summary.warning
        inp.summary.error = summary.error
        inp.lineno, inp.examined = summary.lines, summary.examined_lines

    def _catch_up(self, size: int) -> None:
        """A big file already there is read like `analyze` reads it (the fast path), up to its
        last complete line; then following goes on line by line from there."""
        tail = min(size, 1 << 16)
        self.fh.seek(size - tail)
        last_nl = self.fh.read(tail).rfind(b"\n")
        if last_nl < 0:
            self.fh.seek(0)
            return
        limit = size - tail + last_nl + 1
        self.fh.seek(0)
        inp = self.current
        state = inp.state

        def chunks():
            left = limit
            while left > 0:
                data = self.fh.read(min(left, 1 << 20))
                if not data:
                    return
                left -= len(data)
                yield data

        stats: dict = {}
        for raw in iter_lines(chunks(), needles=needles_for(state.matcher), hot=state.rebuilder.hot,
                              full_prefix_lines=FULL_PREFIX_LINES, stats=stats, focus=state.focus,
                              skipper=state.rebuilder, raw_only=raw_only_needles(state.matcher)):
            state.feed(raw.lineno, raw.offset, raw.text, raw.context)
        inp.lineno = stats.get("lines", 0)
        inp.offset = inp.summary.bytes = stats.get("bytes", 0)
        inp.summary.lines = inp.lineno
        inp.examined = stats.get("examined", 0)
        self.pos = inp.offset
        self.fh.seek(self.pos)

    def poll(self) -> bool:
        """Read what is new; True when something was read."""
        if self.source.is_stdin:
            return self._poll_stdin()
        if self.eof:
            return False  # compressed: read once
        got = False
        if self.fh is not None:
            got = self._drain()
        try:
            st = os.stat(self.source.path)
        except OSError:
            return got  # rotated away and not recreated yet
        if self.fh is None or st.st_ino != self.ino:
            if self.fh is not None:
                got = self._drain() or got  # the rest of the old file first
                self.fh.close()
            self._open()
            return (self._drain() if self.fh is not None else False) or got
        if st.st_size < self.pos:  # truncated in place (copytruncate)
            self.fh.close()
            self._open()
            got = self._drain() or got
        return got

    def _drain(self) -> bool:
        got = False
        while True:
            data = self.fh.read(READ_SIZE)
            if not data:
                return got
            got = True
            self.pos += len(data)
            self.current.feed_bytes(data)

    def _poll_stdin(self) -> bool:
        if self.eof:
            return False
        fd = self.fh.fileno()
        got = False
        while True:
            try:
                ready, _, _ = select.select([fd], [], [], 0)
            except (OSError, ValueError):
                ready = [fd]
            if not ready:
                return got
            data = os.read(fd, READ_SIZE)
            if not data:
                self.eof = True
                return got
            got = True
            self.current.feed_bytes(data)

    def close(self) -> None:
        if self.current is not None:
            self.current.finish()
        if self.fh is not None and not self.source.is_stdin:
            self.fh.close()


class _Notifier:
    """Shows new diagnoses as they happen: a live rich view on a terminal, plain lines otherwise.

    A symptom (or a symptom promoted to a root because nothing explained it yet) is held for
    `grace_s` seconds before it is shown: its root is often closed later, by the idle flush of a
    process that writes nothing after its traceback. One shown and explained afterwards gets a
    correction naming its root."""

    def __init__(self, stream: TextIO, redact: bool, live: bool | None = None, grace_s: float = 0.0):
        from vcrash.redact import Redactor

        self.stream = stream
        self.redactor = Redactor(enabled=redact)
        self.grace_s = grace_s
        self.shown: dict[tuple, str] = {}  # key -> kind shown ("root", "symptom", "caused by …")
        self.held: dict[tuple, float] = {}  # key -> when first seen, for provisional findings
        self.rows: dict[tuple, tuple[str, str, str, str]] = {}
        self.roots_shown = 0
        self.live = None
        self.status = "watching"
        use_live = stream.isatty() if live is None else live
        if use_live:
            try:
                from rich.console import Console
                from rich.live import Live

                self._console = Console(file=stream)
                self.live = Live(self._render(), console=self._console, refresh_per_second=4, transient=False)
                self.live.start()
            except Exception:
                self.live = None

    def _render(self):
        from rich.table import Table

        table = Table(title=f"vcrash --follow: {self.status}", title_justify="left", box=None,
                      header_style="bold")
        for col in ("kind", "rule", "where", "evidence"):
            table.add_column(col, overflow="fold")
        for kind, rule, where, evidence in list(self.rows.values())[-20:]:
            style = {"root": "bold red", "symptom": "yellow"}.get(kind, "")
            table.add_row(f"[{style}]{kind}[/]" if style else kind, rule, where, evidence)
        if not self.rows:
            table.add_row("", "[dim]no crash yet[/]", "", "")
        return table

    def update(self, report: Report, now: float, status: str | None = None, final: bool = False) -> list:
        """Show what is new or changed; `final` shows everything still held."""
        new = []
        changed = False
        present = {_key(d) for d, _ in _all_diagnoses(report)}
        for key in [k for k in self.held if k not in present]:
            del self.held[key]  # voided meanwhile (teardown noise of a stop)
        for d, parent in _all_diagnoses(report):
            key = _key(d)
            kind = d.rule.kind if parent is None else f"caused by {parent.rule.id}"
            before = self.shown.get(key)
            if before == kind:
                continue
            if before is None and parent is None and _provisional(d) and not final:
                first = self.held.setdefault(key, now)
                if now - first < self.grace_s:
                    continue
            self.held.pop(key, None)
            where = f"{d.input}:{d.line}"
            correction = before is not None and parent is not None and not before.startswith("caused by")
            promoted = before == "symptom" and kind == "root"
            if correction:
                self._say(f"vcrash: {key[2]} at {where} is explained by {parent.rule.id} at "
                          f"{parent.input}:{parent.line}")
            elif before is not None and not promoted:
                continue  # shown under a root already: that stays the story
            else:
                new.append(d)
            self.shown[key] = kind
            if kind == "root":
                self.roots_shown += 1
            stream_name = d.stream_id.split(":")[-2] if d.stream_id.count(":") >= 2 else d.stream_id
            evidence = (self.redactor.text(d.evidence) or "")[:160]
            row = (kind, d.rule.id, f"{where} ({stream_name})", evidence)
            self.rows[key] = row
            changed = True
            if not correction:
                self._say(f"vcrash: [{row[0]}] {row[1]} at {row[2]}: {row[3]}")
        if status is not None:
            self.status = status
        if self.live is not None and (changed or status is not None):
            self.live.update(self._render())
        return new

    def _say(self, text: str) -> None:
        if self.live is None:
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.live is not None:
            try:
                self.live.stop()
            except Exception:
                pass


def _key(d) -> tuple:
    # A symptom promoted to its only_from root keeps the key it had as a symptom.
    return d.input, d.line, d.rule.only_from or d.rule.id


def _provisional(d) -> bool:
    """A finding that a root still to come may explain: a symptom, or a symptom promoted to a
    root only because nothing explains it yet."""
    return d.rule.kind == "symptom" or bool(d.rule.only_from)


def _all_diagnoses(report: Report):
    """(diagnosis, the root it is attached to or None)."""
    for d in report.diagnoses:
        yield d, None
        for s in d.explains:
            yield s, d


class _Interrupt(Exception):
    pass


def follow(sources: list[Source], pack: RulePack, until_first: bool = False, redact: bool = True,
           idle_s: float = IDLE_S, poll_s: float = POLL_S, notify: TextIO | None = None,
           live: bool | None = None, stop: Callable[[], bool] | None = None,
           options: Options | None = None, grace_s: float | None = None) -> Report:
    """Tail the sources until Ctrl-C / SIGTERM (or the first root diagnosis with until_first, or
    stdin's end when every source is stdin, or `stop()`), then return the final report.

    Symptoms are shown after `grace_s` (default: idle_s plus a second), unless a root explains
    them first: a root whose traceback ends its process's output is only closed by the idle flush."""
    options = options or Options()
    if grace_s is None:
        grace_s = idle_s + GRACE_AFTER_IDLE_S
    matcher = Matcher(pack)
    inputs: list[_Input] = []

    def start_input(name: str) -> _Input:
        inp = _Input(InputAnalysis(len(inputs), name, matcher), InputSummary(name))
        inputs.append(inp)
        return inp

    notifier = _Notifier(notify or sys.stderr, redact, live, grace_s)
    tails: list[_Tail] = []
    old_term = None
    if _main_thread():
        def on_term(signum, frame):
            raise _Interrupt()

        old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        for source in sources:
            tails.append(_Tail(source, start_input))
        last_count = -1
        while True:
            got = False
            for tail in tails:
                got = tail.poll() or got
            now = time.monotonic()
            for inp in inputs:
                inp.flush_quiet(now, idle_s)
            count = _evidence_count(inputs)
            if count != last_count or notifier.held:
                last_count = count
                report = _report(inputs, matcher, pack, options, final=False)
                notifier.update(report, now)
                if until_first and notifier.roots_shown:
                    break
            if all(t.eof for t in tails):
                break
            if stop is not None and stop():
                break
            if not got:
                time.sleep(poll_s)
    except (KeyboardInterrupt, _Interrupt):
        pass
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        for tail in tails:
            try:
                tail.close()
            except Exception:
                pass
    report = _report(inputs, matcher, pack, options, final=True)
    notifier.update(report, time.monotonic(), status="stopped", final=True)
    notifier.close()
    return report


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _evidence_count(inputs: list[_Input]) -> tuple:
    return tuple((len(i.state.matched), len(i.state.replaced), len(i.state.events),
                  sum(s[3] for s in i.state.events.values()),
                  len(i.state.rebuilder.tracebacks)) for i in inputs)


def _report(inputs: list[_Input], matcher: Matcher, pack: RulePack, options: Options, final: bool) -> Report:
    if final:
        for inp in inputs:
            inp.summary.examined_lines = inp.examined
    for inp in inputs:
        obs = inp.state.observer
        inp.summary.vllm_versions = obs.versions
        inp.summary.vllm_version = obs.versions[0] if obs.versions else None
    # The finding of last resort waits for the end: a live log's first error line is not a crash
    # until nothing better came.
    return build_report([i.state for i in inputs], [i.summary for i in inputs], matcher, pack, options,
                        last_resort=final)

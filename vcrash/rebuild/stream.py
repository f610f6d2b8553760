"""Per-stream traceback state machines and the rebuilder that runs one per stream.

A stream's machine only decides where a traceback region starts and ends (and buffers it);
`parse.py` turns the region into exceptions. Lines of other streams never touch it, so
interleaving is harmless. A region left open is flushed after `IDLE_LINES` lines of other
streams (or by time in follow mode) and at the end of input; a region cut before its exception
line is kept and marked corrupted.
"""

from __future__ import annotations

import hashlib
import re
import sys
from array import array
from collections import OrderedDict
from typing import Callable

from vcrash.rebuild import grammar as g
from vcrash.rebuild.model import ExceptionInfo, Traceback, TracebackBase
from vcrash.rebuild.parse import parse_cpp_abort, parse_faulthandler, parse_python, parse_python_kept
from vcrash.rebuild.spool import KEEP_IN_MEMORY
from vcrash.rebuild.store import TracebackStore
from vcrash.split import UNTAGGED, Line, Stream

IDLE_LINES = 5000
IDLE_CHECK_EVERY = 256  # lines between checks for streams gone idle
MAX_REGION_LINES = 20000
MAX_RAW_TAIL = 40  # raw message tails longer than this are unrelated output
MAX_PARAGRAPH_TAIL = 12  # a message paragraph after a blank line is short
MAX_INTERLEAVED = 50
RECENT = 3  # lines a machine remembers for the context line of its next region
MAX_MACHINES = 4096  # above this many streams, idle ones lose their machine (evicted, counted)

_CONTEXT_KINDS = (
    (g.PRE_PROC, "process"),
    (g.PRE_THREAD, "thread"),
    (g.PRE_IGNORED, "ignored"),
    (g.PRE_TASK, "task"),
)
_HANDLED_CONTEXT = re.compile("|".join(g.REQUEST_HANDLER_PHRASES))


class StreamMachine:
    __slots__ = ("stream", "input", "state", "buf", "kind", "record_key", "start", "start_offset",
                 "recent", "last_seen", "context", "context_kind", "context_line", "process_hint", "time", "level",
                 "tail", "blank", "dropped", "opened", "clock", "grouped", "paragraphs", "heads_only")

    def __init__(self, stream: Stream, input_name: str):
        self.stream = stream
        self.input = input_name
        self.state = "idle"  # idle | frames | msg | sep | fault | cpp
        self.buf: list[tuple[int, str]] = []
        # The last lines fed (up to RECENT), for a context line: a list, since 100 K processes
        # each make a machine for a line or two (a deque reserves 64 slots).
        self.recent: list[Line] = []
        self.last_seen = 0
        self.opened = 0
        self.clock = None  # the latest timestamp seen in the input, for raw lines without one
        self._reset()

    def _reset(self) -> None:
        self.state = "idle"
        self.buf = []
        self.kind = "python"
        self.record_key = None
        self.start = 0
        self.start_offset = 0
        self.context = None
        self.context_kind = None
        self.context_line = None
        self.process_hint = None
        self.time = None
        self.level = None
        self.tail = 0
        self.blank = False
        self.paragraphs = 0
        self.dropped = 0
        self.grouped = False  # an exception-group header is in the buffer
        self.heads_only = False  # every buffered line is a 'Traceback' header (kept, not rescanned)

    @property
    def open(self) -> bool:
        return self.state != "idle"

    # -- feeding ---------------------------------------------------------------------------
    def feed(self, line: Line, emit: Callable[["StreamMachine"], None]) -> None:
        if self.state != "idle":
            if self._repeats_bare_header(line):
                # What _continue would do, at a fraction of the cost (a run of a million bare
                # headers is a hostile shape).
                self._append(line, True)
                return
            if self._continue(line, emit):
                return
        self._begin(line)
        recent = self.recent
        recent.append(line)
        if len(recent) > RECENT:
            del recent[0]

    def _repeats_bare_header(self, line: Line) -> bool:
        """One more copy of the raw bare header that every line of this region is."""
        return (self.heads_only and line.kind == "raw" and self.record_key is None and self.state == "frames"
                and line.payload == self.buf[-1][1])

    def _begin(self, line: Line) -> None:
        text = line.payload
        if not text or len(text) > 2000:
            return
        c = text.lstrip()[:1]
        if c == "T" and g.TB_HEAD.match(text):
            self._open(line, "python", "frames", bare_head=True)
        elif c == "+" and g.GROUP_HEAD.match(text):
            self._open(line, "python", "frames")
        elif c == "F" and g.FATAL.match(text):
            self._open(line, "faulthandler", "fault")
        elif c == "t" and g.CPP_TERMINATE.match(text):
            self._open(line, "cpp-abort", "cpp")
        elif text.endswith((g.TB_HEAD_TEXT, g.TB_HEAD_TEXT + " ")) and g.embedded_tb_head(text) is not None:
            # `EngineCore hit an exception: Traceback (most recent call last):`, frames raw after it.
            self._open(line, "python", "frames")
            self.buf = [(line.lineno, g.TB_HEAD_TEXT)]
            self.heads_only = True
            self.record_key = None
            self.context, self.context_kind, self.context_line = g.embedded_tb_head(text)[:500], "log", line.lineno
        elif c == "F" and (g.FRAME.match(text) or g.FRAME_NOFUNC.match(text) or g.ipython_frame(text)):
            # A block whose 'Traceback' line was lost (pasted excerpt), a bare SyntaxError, or a
            # notebook traceback cut above its first frame.
            self._open(line, "python", "frames")
        elif "Traceback (most recent call last)" in text and g.IPY_HEAD.match(text):
            self._open(line, "python", "frames")  # IPython / Jupyter
        elif c in "^~" and "^" in text and g.CARET.match(text) or c == "r" and g.RAISE.match(text):
            self._open(line, "python", "frames")  # a tail-only excerpt: caret or `raise` line first
        elif c not in " \t" and c.isalpha() or c == "(":
            exc = g.exception_line(text)
            if exc is not None and not exc[0].endswith("Warning"):
                self._open(line, "python", "msg")  # only the exception line survived

    def _open(self, line: Line, kind: str, state: str, bare_head: bool = False) -> None:
        """`bare_head`: the line is known to be a 'Traceback' header (so not a group's)."""
        self.opened += 1
        self.state = state
        self.kind = kind
        self.buf = [(line.lineno, line.payload)]
        self.grouped = not bare_head and bool(g.GROUP_HEAD.match(line.payload))
        self.heads_only = bare_head or bool(g.TB_HEAD.match(line.payload))
        self.record_key = line.record_key
        self.start = line.lineno
        self.start_offset = line.offset
        self.time = line.time or self.clock
        self.level = line.level
        self.tail = 0
        self.blank = False
        self._find_context(line)

    def _find_context(self, line: Line) -> None:
        for prev in reversed(self.recent):
            text = prev.payload.strip()
            if not text:
                continue
            if g.body_shaped(prev.payload) or g.exception_line(text) is not None:
                return  # the end of the traceback before, not a message introducing this one
            for pattern, kind in _CONTEXT_KINDS:
                m = pattern.match(text)
                if m:
                    self.context, self.context_kind, self.context_line = text, kind, prev.lineno
                    if kind == "process":
                        self.process_hint = m.group("name")
                    return
            same_record = line.record_key is not None and prev.record_key == line.record_key
            if prev.kind != "raw" and (same_record or prev.lineno >= line.lineno - 2):
                self.context, self.context_kind, self.context_line = text[:500], "log", prev.lineno
                if self.level is None and same_record:
                    # Only the record's own level: a raw traceback after an INFO line is not
                    # an INFO message (an uncaught exception prints raw after anything).
                    self.level = prev.level
                if self.time is None:
                    self.time = prev.time
            elif text.startswith("ERROR:") or _HANDLED_CONTEXT.search(text):
                self.context, self.context_kind, self.context_line = text[:500], "log", prev.lineno
            return

    def _append(self, line: Line, head: bool | None = None) -> None:
        if self.heads_only and not (head if head is not None else g.TB_HEAD.match(line.payload)):
            self.heads_only = False
        if len(self.buf) < MAX_REGION_LINES:
            self.buf.append((line.lineno, line.payload))
            if not self.grouped and "Exception Group" in line.payload and g.GROUP_HEAD.match(line.payload):
                self.grouped = True
        else:
            self.dropped += 1

    def _continue(self, line: Line, emit) -> bool:
        """True when the line was consumed by the open region."""
        text = line.payload
        stripped = text.strip()
        if line.record_key != self.record_key and self.state in ("frames", "sep") and self._body_line(text):
            # The traceback goes on under another header (two excerpts pasted together, another
            # call site, or raw after headed): follow it.
            self.record_key = line.record_key
        if self.record_key is not None:
            # A logger.exception copy: every line carries the same header.
            if line.record_key != self.record_key:
                if self.state in ("frames", "sep") and self.tail < MAX_INTERLEAVED \
                        and "most recent call" not in text:  # never swallow another traceback's head
                    # Another thread of this process wrote in the middle of the record.
                    self.tail += 1
                    return True
                self._finish(emit)
                return False
            if self.state == "msg" and self.context and stripped == self.context:
                self._finish(emit)  # the same call site logged again within the same second
                return False
            if self.state == "msg" and g.TB_HEAD.match(text) and not self.blank:
                self._finish(emit)
                return False
            self._append(line)
            if stripped in (g.CAUSE_SEP, g.CONTEXT_SEP):
                self.state = "sep"
            elif g.TB_HEAD.match(text) or g.GROUP_HEAD.match(text):
                self.state = "frames"
            elif self.state in ("frames", "sep") and self._exception_line(text):
                self.state = "msg"
            elif self.state == "frames" and g.GROUP_CLOSE.match(text) and self._in_group():
                self.state = "msg"  # an exception group's last line closes its innermost member
            self.blank = not stripped
            return True
        if line.kind != "raw" and self.state in ("msg", "fault", "cpp"):
            self._finish(emit)  # a new log record ends a raw message tail
            return False
        if self.state == "fault":
            return self._continue_fault(line, emit)
        if self.state == "cpp":
            return self._continue_cpp(line, emit)
        if self.state in ("frames", "sep"):
            head = g.TB_HEAD.match(text) is not None  # once: runs of bare headers are a hostile shape
            if line.kind != "raw" and not head:
                if text.endswith((g.TB_HEAD_TEXT, g.TB_HEAD_TEXT + " ")) and g.embedded_tb_head(text) is not None:
                    self._finish(emit)  # a record that starts another traceback (V0's worker summary)
                    return False
                return True  # another thread's log record interleaved in this process: skip
            if head and self.state == "frames" and len(self.buf) > 1 and not self._only_heads():
                self._finish(emit)  # cut: a new traceback started
                return False
            self._append(line, head)
            if stripped in (g.CAUSE_SEP, g.CONTEXT_SEP):
                self.state = "sep"
            elif head or g.GROUP_HEAD.match(text):
                self.state = "frames"
            elif self._exception_line(text) or g.GROUP_CLOSE.match(text) and self._in_group():
                self.state = "msg"
                self.tail = 0
                self.blank = False
            return True
        # state == "msg" (raw): message tail, until a blank line not followed by a separator.
        if not stripped:
            self.blank = True
            self._append(line)
            return True
        if stripped in (g.CAUSE_SEP, g.CONTEXT_SEP):
            self._append(line)
            self.state = "sep"
            self.blank = False
            return True
        if g.GROUP_MARGIN.match(text) and self._in_group():
            self._append(line)
            return True
        if self.buf and g.GROUP_CLOSE.match(self.buf[-1][1]):
            self._finish(emit)  # nothing but a group's next member follows its closing line
            return False
        if g.TB_HEAD.match(text) or g.FRAME.match(text) or self.tail >= MAX_RAW_TAIL:
            self._finish(emit)
            return False
        if g.FATAL.match(text) or g.CPP_TERMINATE.match(text) or g.PRE_PROC.match(stripped) \
                or g.PRE_THREAD.match(stripped):
            self._finish(emit)
            return False
        if self.blank:
            # One more paragraph of the message (e.g. huggingface_hub's "Repository Not Found for
            # url: …" after a blank line); anything else after a blank line ends the traceback.
            if self.paragraphs >= 1 or self.tail >= MAX_PARAGRAPH_TAIL or not stripped[0].isupper():
                self._finish(emit)
                return False
            self.paragraphs += 1
            self.blank = False
        self.tail += 1
        self._append(line)
        return True

    def _exception_line(self, text: str) -> bool:
        if g.exception_line(text) is not None:
            return True
        # Right after a source or caret line only the exception line can follow: take what an
        # abbreviation left of it.
        prev = self.buf[-2][1] if len(self.buf) >= 2 and self.buf[-1][1] == text else (self.buf[-1][1] if self.buf else "")
        return prev[:1] in " \t^~" and prev.strip() != "" and g.exception_line(text, lenient=True) is not None

    def _body_line(self, text: str) -> bool:
        return g.body_shaped(text) or self.state == "frames" and self._exception_line(text)

    def _only_heads(self) -> bool:
        return self.heads_only

    def _in_group(self) -> bool:
        return self.grouped  # kept up to date by _open/_append: O(1) per line, not a buffer scan

    def _continue_fault(self, line: Line, emit) -> bool:
        text = line.payload
        s = text.strip()
        if not s or g.FH_THREAD.match(text) or g.FH_FRAME.match(text) or g.FH_OTHER.match(text):
            if not s and self.blank and len(self.buf) > 2:
                self._finish(emit)
                return True
            self.blank = not s
            self._append(line)
            if s.startswith("Extension modules:"):
                self._finish(emit)
            return True
        self._finish(emit)
        return False

    def _continue_cpp(self, line: Line, emit) -> bool:
        text = line.payload
        if g.CPP_WHAT.match(text) or g.CPP_FRAME.match(text) or g.CPP_RAISED.match(text):
            self._append(line)
            self.tail = 0
            return True
        has_frames = any(g.CPP_FRAME.match(t) for _, t in self.buf)
        has_what = any(g.CPP_WHAT.match(t) for _, t in self.buf)
        if text.strip() and has_what and not has_frames and self.tail < MAX_RAW_TAIL \
                and not g.FATAL.match(text) and not g.TB_HEAD.match(text):
            self.tail += 1
            self._append(line)
            return True
        self._finish(emit)
        return False

    # -- finishing -------------------------------------------------------------------------
    def _finish(self, emit) -> None:
        if self.state != "idle" and self.buf:
            emit(self)
        self._reset()

    def flush(self, emit) -> None:
        self._finish(emit)


# What parse_python makes of a region of nothing but 'Traceback' headers (the most common cut
# region of a hostile log): the same every time, so not parsed again.
_HEADS_ONLY = parse_python([(0, g.TB_HEAD_TEXT)])


def build_traceback(m: StreamMachine, tb_id: str) -> Traceback:
    lines = m.buf
    while lines and not lines[-1][1].strip():
        lines = lines[:-1]
    if m.heads_only and m.kind == "python" and lines:
        parsed = _HEADS_ONLY
    elif m.kind == "faulthandler":
        parsed = parse_faulthandler(lines)
    elif m.kind == "cpp-abort":
        parsed = parse_cpp_abort(lines)
    else:
        parsed = parse_python_kept(lines)
    exceptions = parsed.exceptions
    if m.context and (not exceptions or exceptions[-1].type == "<truncated>"):
        # Cut before its exception line, under a line that names it: asyncio's
        # `future: <… exception=Type('msg')>`, or the repr V0's engine loop logs first.
        named = g.inferred_from_context(m.context, m.context_kind)
        if named is not None:
            cut = exceptions[-1] if exceptions else ExceptionInfo("<truncated>")
            exceptions = [*exceptions[:-1], ExceptionInfo(named[0], named[1], cut.relation, cut.frames,
                                                          repeated_frames=cut.repeated_frames,
                                                          group_path=cut.group_path, line=m.context_line,
                                                          inferred=True)]
    kind = m.kind
    if kind == "python" and exceptions and exceptions[-1].type.endswith(
            ("SyntaxError", "IndentationError", "TabError")) and not any(g.TB_HEAD.match(t) for _, t in lines[:1]):
        kind = "syntax"
    problems = parsed.problems
    if m.dropped or not exceptions:
        problems = list(problems)
        if m.dropped:
            problems.append(f"{m.dropped} lines beyond {MAX_REGION_LINES} not kept")
        if not exceptions:
            problems.append("no exception line")
    context_kind = m.context_kind
    if context_kind is None and m.record_key is not None and m.record_key[2] \
            and g.REQUEST_LOG_SOURCE.search(m.record_key[2]):
        context_kind = "handler"  # written by a request module's logger: one request's failure
    # A few reasons, interned: 100 K cut tracebacks share a handful of them.
    reason = sys.intern("; ".join(problems[:3])) if problems else None
    # Positional, in FIELDS order: keyword arguments cost a third more over 100 K cut tracebacks.
    tb = Traceback(tb_id, m.input, m.stream.id, m.stream.role, lines[0][0] if lines else m.start,
                   lines[-1][0] if lines else m.start, kind, exceptions or (), bool(problems), reason,
                   m.context, context_kind, m.context_line, tuple(parsed.foreign), m.process_hint, m.time,
                   m.level, m.record_key is not None, (), m.start_offset, len(lines) + m.dropped)
    if m.process_hint and tb.role in ("main", "other"):
        from vcrash.split.tags import role_of

        hinted = role_of(m.process_hint)
        if hinted not in ("main", "other"):
            tb.role = hinted
    return tb


def dedupe_key(tb: Traceback) -> str | None:
    """Same exceptions (type + first message line) and the same innermost frame of the root:
    the logger copy and the raw multiprocessing copy of one crash, or per-rank copies."""
    if not tb.exceptions or tb.corrupted:
        return None
    parts = []
    for exc in tb.exceptions:
        inner = exc.frames[-1] if exc.frames else None
        where = f"{inner.file.rsplit('/', 1)[-1]}:{inner.line}:{inner.function}" if inner else ""
        parts.append(f"{exc.type}|{exc.message_head}|{where}")
    return hashlib.sha1("\n".join(parts).encode("utf-8", "replace")).hexdigest()


class Rebuilder:
    """Runs one StreamMachine per stream and collects finished, de-duplicated tracebacks."""

    def __init__(self, input_name: str):
        self.input = input_name
        # Least recently fed first, so idle machines are evicted from the front.
        self.machines: OrderedDict[str, StreamMachine] = OrderedDict()
        self._evicted_opened = 0  # regions opened by machines that were evicted since
        self.tracebacks = TracebackStore(KEEP_IN_MEMORY)  # past the budget, spooled to disk
        self.start_lines = array("q")  # each one's start line, read without the spool
        self.corrupted = 0  # how many of them are
        self.replacements: dict[int, int] = {}  # position -> how often an earlier-starting copy took it
        self.duplicates = 0
        self._by_key: dict[str, int] = {}  # dedupe key -> the original's position
        # Streams with an open region, least recently fed first: idle flushing pops from the
        # front instead of scanning every open stream.
        self._open: OrderedDict[str, None] = OrderedDict()
        self.open_version = 0  # changes whenever a stream's region opens or closes
        self.evicted = 0  # idle stream machines dropped to bound memory (their regions were flushed)
        self._count = 0
        self._last_sid: str | None = None  # the stream of the line fed last (none after skipped lines)
        self._next_id = 1
        self.clock: str | None = None
        # (the traceback, what the list keeps for it, where): match the first, hold on to the second.
        self.on_traceback: Callable[[Traceback, TracebackBase, int], None] | None = None
        self.on_replace: Callable[[TracebackBase, Traceback, TracebackBase, int], None] | None = None  # (old, new, …)
        self.on_evict: Callable[[list[Stream]], None] | None = None  # streams whose machine was dropped
        self.epoch_of: Callable[[int], int] | None = None  # line -> server run, set by the pipeline

    @property
    def regions_opened(self) -> int:
        return self._evicted_opened + sum(m.opened for m in self.machines.values())

    def in_region(self, sid: str) -> bool:
        """Is the stream's last line part of an open traceback region?"""
        return sid in self._open

    def hot(self) -> bool:
        return bool(self._open)

    def feed(self, line: Line) -> None:
        self._count = count = self._count + 1
        sid = line.stream.id
        machines, opened = self.machines, self._open
        last, self._last_sid = self._last_sid, sid
        if last is not None and last != sid and line.stream.pid is not None and last in opened:
            prev = machines[last]
            if prev.stream.pid is None:  # a tagged line right after an untagged open region
                if self._adopts(prev, line, machines.get(sid)):
                    sid = self._last_sid = last
                elif self._header_moves(prev, line, machines.get(sid)):
                    self._move_header(prev, last, line)
        m = machines.get(sid)
        if m is None:
            m = machines[sid] = StreamMachine(line.stream, self.input)
        elif len(machines) > MAX_MACHINES:
            machines.move_to_end(sid)
        m.last_seen = count
        if line.time:
            self.clock = line.time
        m.clock = self.clock
        m.feed(line, self._emit)
        if m.state != "idle":
            if sid not in opened:
                self.open_version += 1
                opened[sid] = None
            else:
                opened.move_to_end(sid)
        elif sid in opened:
            del opened[sid]
            self.open_version += 1
        if count % IDLE_CHECK_EVERY == 0:
            if self._open:
                self.flush_idle(IDLE_LINES)
            if len(self.machines) > MAX_MACHINES:
                self._evict_idle_machines()

    @staticmethod
    def _adopts(prev: StreamMachine, line: Line, own: StreamMachine | None) -> bool:
        """A paste whose first line lost its process tag (the selection began after it): an
        untagged exception line, then the indented rest of its message behind a tag whose
        process has nothing open. The rest is the untagged message's (pydantic's "1 validation
        error for ModelConfig", then "  Value error, …" under the tag)."""
        if prev.state != "msg" or prev.stream.name != UNTAGGED or len(prev.buf) > 2:
            return False
        if own is not None and own.state != "idle" or line.record_key is not None:
            return False  # its process has a traceback of its own open, or the line is a record
        text = line.payload
        return text[:1] in " \t" and bool(text.strip()) and not g.FRAME.match(text) and not g.TB_HEAD.match(text)

    @staticmethod
    def _header_moves(prev: StreamMachine, line: Line, own: StreamMachine | None) -> bool:
        """The same paste's other form: its first line is a bare 'Traceback' header without the
        tag that the frames after it carry. The header is theirs."""
        if prev.state != "frames" or not prev.heads_only or len(prev.buf) != 1 or prev.record_key is not None \
                or prev.stream.name != UNTAGGED:
            return False
        if own is not None and own.state != "idle":
            return False
        return line.record_key is None and bool(g.FRAME.match(line.payload) or g.FRAME_NOFUNC.match(line.payload))

    def _move_header(self, prev: StreamMachine, prev_sid: str, line: Line) -> None:
        lineno, text = prev.buf[0]
        header = Line(lineno, prev.start_offset, line.stream, text, "raw", None, prev.time)
        prev.opened -= 1
        prev._reset()
        del self._open[prev_sid]
        self.open_version += 1
        sid = line.stream.id
        own = self.machines.get(sid)
        if own is None:
            own = self.machines[sid] = StreamMachine(line.stream, self.input)
        own.clock = self.clock
        own.feed(header, self._emit)
        self._open[sid] = None

    def skip(self, lines: int = 1) -> None:
        """Lines the fast path passed over while a region was open: they belong to no open
        stream (the reader checked), so they only count toward idle flushing. Nothing is fed
        in between, so the idle check at the last check point they cross flushes what the
        checks at every one of them would have."""
        before = self._count
        self._count += lines
        self._last_sid = None
        crossed = self._count - self._count % IDLE_CHECK_EVERY
        if self._open and crossed > before:
            self.flush_idle(IDLE_LINES, now=crossed)

    def _evict_idle_machines(self) -> None:
        """Drop the state machines of streams that are idle (no open region) and quiet for
        IDLE_LINES lines, oldest first: a log with 100 K processes must not keep 100 K machines."""
        gone = []
        machines = self.machines
        while len(machines) > MAX_MACHINES:
            sid, m = machines.popitem(last=False)
            if self._count - m.last_seen < IDLE_LINES:
                machines[sid] = m
                machines.move_to_end(sid, last=False)
                break  # machines are ordered by their last line: the rest are recent
            if sid in self._open:
                self._open.pop(sid, None)
                self.open_version += 1
                m.flush(self._emit)
            self._evicted_opened += m.opened
            self.evicted += 1
            gone.append(m.stream)
        if gone and self.on_evict is not None:
            self.on_evict(gone)

    def open_streams(self) -> dict[str, int]:
        """Streams with an open region -> the feed count of their last line (follow mode)."""
        return {sid: self.machines[sid].last_seen for sid in self._open}

    def flush_streams(self, sids) -> None:
        """Close the open regions of these streams now (follow mode: the stream went quiet)."""
        for sid in list(sids):
            if sid in self._open:
                self.machines[sid].flush(self._emit)
                self._open.pop(sid, None)
                self.open_version += 1

    def open_sids(self):
        """The streams with an open region (read only)."""
        return self._open.keys()

    def open_count(self) -> int:
        return len(self._open)

    def open_pids(self) -> list[int | None]:
        """The pids of the streams with an open region (None for an untagged stream)."""
        return [self.machines[sid].stream.pid for sid in self._open]

    def flush_idle(self, idle_lines: int, now: int | None = None) -> None:
        now = self._count if now is None else now
        while self._open:
            sid = next(iter(self._open))
            m = self.machines[sid]
            if now - m.last_seen < idle_lines:
                break  # the rest were fed more recently
            self._open.popitem(last=False)
            self.open_version += 1
            m.flush(self._emit)

    def flush(self) -> None:
        for sid in list(self._open):
            self.machines[sid].flush(self._emit)
        self._open.clear()
        self.open_version += 1

    def _emit(self, m: StreamMachine) -> None:
        tb = build_traceback(m, f"tb{self._next_id}")
        if m.state in ("frames", "sep") and not tb.corrupted:
            tb.corrupted = True
            tb.corrupted_reason = "cut off (stream ended or went silent)"
        key = dedupe_key(tb)
        if key is not None and self.epoch_of is not None:
            # The same crash after a restart is a new occurrence, not a copy.
            key = f"{self.epoch_of(tb.start_line)}:{key}"
        if key is not None:
            found = self._by_key.get(key)
            if found is not None:
                self._merge_copy(tb, found)
                return
        self._next_id += 1
        position = len(self.tracebacks)
        if key is not None:
            self._by_key[key] = position
        kept = self.tracebacks.add(tb)
        self.start_lines.append(tb.start_line)
        self.corrupted += tb.corrupted
        if self.on_traceback is not None:
            self.on_traceback(tb, kept, position)

    def _merge_copy(self, tb: Traceback, position: int) -> None:
        """`tb` is a copy of the traceback at `position` (the logger's and the dying process's,
        or one per rank)."""
        first = self.tracebacks[position]
        self.duplicates += 1
        if first.role in ("main", "other") and tb.role not in ("main", "other"):
            first.role = tb.role
        elif tb.role in ("main", "other") and first.role not in ("main", "other"):
            tb.role = first.role
        if tb.start_line < first.start_line:
            # A logger copy that stayed open longer than the raw copy of the same crash: the
            # earlier one is the original.
            tb.id = first.id
            tb.duplicates = sorted([*first.duplicates, first.start_line])
            self.start_lines[position] = tb.start_line
            self.replacements[position] = self.replacements.get(position, 0) + 1
            kept = self.tracebacks.replace(position, tb)
            if self.on_replace is not None:
                self.on_replace(first, tb, kept, position)
        else:
            if isinstance(first.duplicates, tuple):
                first.duplicates = []
            first.duplicates.append(tb.start_line)

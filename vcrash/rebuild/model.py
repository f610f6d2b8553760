"""What the rebuild stage produces: tracebacks (Python chains and groups, faulthandler dumps,
C++ aborts) with their exceptions and frames, modelled after Sentry's exception interface."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Frame:
    file: str
    line: int | None
    function: str | None
    code: str | None = None

    @property
    def in_app(self) -> bool:
        f = self.file.replace("\\", "/")
        return "/vllm/" in f or f.startswith("vllm/")

    def to_dict(self, redactor=None) -> dict:
        code = self.code if redactor is None or self.code is None else redactor.code(self.code)
        return {"file": self.file, "line": self.line, "function": self.function, "code": code}


@dataclass(slots=True)
class ExceptionInfo:
    type: str
    message: str = ""
    relation: str | None = None  # "cause" | "context" w.r.t. the one before; "group" for members
    frames: list[Frame] = field(default_factory=list)
    native_frames: list[str] = field(default_factory=list)
    repeated_frames: int = 0  # frames elided by "[Previous line repeated N more times]"
    group_path: str | None = None  # "1.2" for the 2nd member of the 1st member group
    line: int | None = None  # raw line of the exception line
    inferred: bool = False  # type and message read off a trailing `raise` line: the exception line was cut

    @property
    def message_head(self) -> str:
        return self.message.split("\n", 1)[0]

    def to_dict(self, redactor=None) -> dict:
        """`redactor`: texts redacted as Redactor.traceback() would (tests/test_redact.py checks)."""
        text = (lambda v: v) if redactor is None else redactor.text
        d = {"type": self.type, "message": text(self.message), "relation": self.relation,
             "frames": [f.to_dict(redactor) for f in self.frames]}
        if self.native_frames:
            d["native_frames"] = [text(f) for f in self.native_frames] if redactor is not None else self.native_frames
        if self.repeated_frames:
            d["repeated_frames"] = self.repeated_frames
        if self.group_path is not None:
            d["group_path"] = self.group_path
        if self.line is not None:
            d["line"] = self.line
        if self.inferred:
            d["inferred"] = True
        return d


# A traceback's fields that only the report reads once it is matched (a match keeps its input and
# stream itself): past a budget they lie in a spool file (rebuild/spool.py) as one record, so that
# 100 K tracebacks keep in memory only what passes over all of them read (lines, role, state).
COLD_FIELDS = ("id", "input", "stream_id", "exceptions", "corrupted_reason", "context", "context_kind",
               "context_line", "foreign", "process_hint", "time", "level", "start_offset")
_HOT_FIELDS = ("role", "start_line", "end_line", "kind", "corrupted", "headed", "duplicates", "lines")
# Positional order of the constructor (as the dataclass it was had it).
FIELDS = ("id", "input", "stream_id", "role", "start_line", "end_line", "kind", "exceptions", "corrupted",
          "corrupted_reason", "context", "context_kind", "context_line", "foreign", "process_hint", "time",
          "level", "headed", "duplicates", "start_offset", "lines")


def _cold_property(index: int, doc: str) -> property:
    def get(self):
        cold = self._cold
        if type(cold) is not tuple:
            cold = self._spool.load(cold)
        return cold[index]

    def set(self, value):
        cold = self._cold
        if type(cold) is not tuple:  # changed after it was spooled: back in memory for good
            cold, self._spool = self._spool.load(cold), None
        self._cold = cold[:index] + (value,) + cold[index + 1:]

    return property(get, set, doc=doc)


class Traceback:
    """One rebuilt traceback. Built like the dataclass it replaces (same fields, same order);
    `hibernate()` moves its COLD_FIELDS to a spool, read back on access."""

    __slots__ = (*_HOT_FIELDS, "_cold", "_spool")

    def __init__(self, id: str, input: str, stream_id: str, role: str, start_line: int, end_line: int,
                 kind: str = "python",  # python | faulthandler | cpp-abort | syntax
                 exceptions: list[ExceptionInfo] | None = None, corrupted: bool = False,
                 corrupted_reason: str | None = None,
                 context: str | None = None,  # the preamble or log message right before it
                 context_kind: str | None = None,  # log | process | thread | ignored | task | asgi
                 context_line: int | None = None,  # the raw line of `context`
                 foreign: tuple[str, ...] = (),  # another writer's text inside the region
                 process_hint: str | None = None,  # "EngineCore_DP0" from a `Process EngineCore_DP0:` preamble
                 time: str | None = None, level: str | None = None,
                 headed: bool = False,  # every line carried the vLLM log header (logger.exception copy)
                 duplicates: list[int] | tuple[()] = (),  # start lines of its copies; a list once there is one
                 start_offset: int = 0, lines: int = 0):
        self.role, self.start_line, self.end_line, self.kind = role, start_line, end_line, kind
        self.corrupted, self.headed, self.duplicates, self.lines = corrupted, headed, duplicates, lines
        self._cold = (id, input, stream_id, [] if exceptions is None else exceptions, corrupted_reason, context,
                      context_kind, context_line, foreign, process_hint, time, level, start_offset)
        self._spool = None

    id = _cold_property(0, "str")
    input = _cold_property(1, "str")
    stream_id = _cold_property(2, "str")
    exceptions = _cold_property(3, "list[ExceptionInfo]")
    corrupted_reason = _cold_property(4, "str | None")
    context = _cold_property(5, "str | None")
    context_kind = _cold_property(6, "str | None")
    context_line = _cold_property(7, "int | None")
    foreign = _cold_property(8, "tuple[str, ...]")
    process_hint = _cold_property(9, "str | None")
    time = _cold_property(10, "str | None")
    level = _cold_property(11, "str | None")
    start_offset = _cold_property(12, "int")

    @property
    def spooled(self) -> bool:
        return type(self._cold) is not tuple

    def hibernate(self, spool) -> None:
        """Cold fields to `spool` (store(tuple) -> handle, load(handle) -> tuple)."""
        if type(self._cold) is tuple:
            self._cold, self._spool = spool.store(self._cold), spool

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in FIELDS)

    def __eq__(self, other):
        if not isinstance(other, Traceback):
            return NotImplemented
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value, as the dataclass was

    def __reduce__(self):
        # A copy or a pickle carries the fields (exceptions as a list), never the spool file.
        values = list(self._values())
        values[FIELDS.index("exceptions")] = list(values[FIELDS.index("exceptions")])
        return (Traceback, tuple(values))

    def __repr__(self) -> str:
        return "Traceback(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in FIELDS) + ")"

    @property
    def root(self) -> ExceptionInfo | None:
        """The last-printed top-level exception: what finally propagated."""
        top = [e for e in self.exceptions if e.relation != "group"]
        return top[-1] if top else (self.exceptions[-1] if self.exceptions else None)

    @property
    def origin(self) -> ExceptionInfo | None:
        """The first-printed exception: the oldest link of the chain."""
        return self.exceptions[0] if self.exceptions else None

    def to_dict(self, redactor=None) -> dict:
        """`redactor` (enabled): secrets out of the texts, as Redactor.traceback() would take them
        out of the plain dict, without walking it again (tests/test_redact.py checks)."""
        text = (lambda v: v) if redactor is None else redactor.text
        cold = self._cold
        if type(cold) is not tuple:
            cold = self._spool.load(cold)  # read back once, not once per field
        (id, input, stream_id, exceptions, corrupted_reason, context, _context_kind, _context_line, _foreign,
         process_hint, time, _level, _start_offset) = cold
        d = {
            "id": id, "input": input, "stream": stream_id,
            "start_line": self.start_line, "end_line": self.end_line, "kind": self.kind,
            "corrupted": self.corrupted, "duplicates": list(self.duplicates),
            "exceptions": [e.to_dict(redactor) for e in exceptions],
        }
        if corrupted_reason:
            d["corrupted_reason"] = text(corrupted_reason)
        if context:
            d["context"] = text(context)
        if process_hint:
            d["process_hint"] = text(process_hint)
        if time:
            d["time"] = time
        return d


@dataclass(slots=True)
class Event:
    """A non-traceback evidence line (worker died, NCCL watchdog, shm waits, metrics...)."""

    input: str
    stream_id: str
    role: str
    line: int
    text: str
    time: str | None
    level: str | None
    last_line: int | None = None  # the last of several occurrences
    offset: int = 0  # byte offset of the line, for re-reading its neighbourhood
    exception_type: str | None = None  # what a message pattern on the line implies (no traceback)

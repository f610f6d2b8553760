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


# The constructor's positional order (that of the dataclass Traceback was first).
FIELDS = ("id", "input", "stream_id", "role", "start_line", "end_line", "kind", "exceptions", "corrupted",
          "corrupted_reason", "context", "context_kind", "context_line", "foreign", "process_hint", "time",
          "level", "headed", "duplicates", "start_offset", "lines")


class TracebackBase:
    """What a traceback offers whether it is held in memory (Traceback) or read back from a spool
    file (SpooledTraceback): both compare, copy and pickle as the same fields."""

    __slots__ = ()

    def fields(self) -> tuple:
        """Every field, in FIELDS order."""
        raise NotImplementedError

    @property
    def spooled(self) -> bool:
        return False

    @property
    def root(self) -> ExceptionInfo | None:
        """The last-printed top-level exception: what finally propagated."""
        exceptions = self.exceptions
        top = [e for e in exceptions if e.relation != "group"]
        return top[-1] if top else (exceptions[-1] if exceptions else None)

    @property
    def origin(self) -> ExceptionInfo | None:
        """The first-printed exception: the oldest link of the chain."""
        exceptions = self.exceptions
        return exceptions[0] if exceptions else None

    def to_dict(self, redactor=None) -> dict:
        """`redactor` (enabled): secrets out of the texts, as Redactor.traceback() would take them
        out of the plain dict, without walking it again (tests/test_redact.py checks)."""
        (id, input, stream_id, _role, start_line, end_line, kind, exceptions, corrupted, corrupted_reason,
         context, _context_kind, _context_line, _foreign, process_hint, time, _level, _headed, duplicates,
         _start_offset, _lines) = self.fields()
        return traceback_dict(id, input, stream_id, start_line, end_line, kind, corrupted, duplicates,
                               [e.to_dict(redactor) for e in exceptions], corrupted_reason, context, process_hint,
                               time, redactor)

    def __eq__(self, other):
        if not isinstance(other, TracebackBase):
            return NotImplemented
        return self.fields() == other.fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __reduce__(self):
        # A copy or a pickle carries the fields (exceptions as a list), never a spool file.
        values = list(self.fields())
        values[_EXCEPTIONS] = list(values[_EXCEPTIONS])
        return (Traceback, tuple(values))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{n}={v!r}" for n, v in zip(FIELDS, self.fields())) + ")"


def traceback_dict(id, input, stream_id, start_line, end_line, kind, corrupted, duplicates, exceptions: list[dict],
                    corrupted_reason, context, process_hint, time, redactor) -> dict:
    text = (lambda v: v) if redactor is None else redactor.text
    d = {
        "id": id, "input": input, "stream": stream_id,
        "start_line": start_line, "end_line": end_line, "kind": kind,
        "corrupted": corrupted, "duplicates": list(duplicates), "exceptions": exceptions,
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


_EXCEPTIONS = FIELDS.index("exceptions")


@dataclass(slots=True, eq=False, repr=False)
class Traceback(TracebackBase):
    id: str
    input: str
    stream_id: str
    role: str
    start_line: int
    end_line: int
    kind: str = "python"  # python | faulthandler | cpp-abort | syntax
    exceptions: list[ExceptionInfo] = field(default_factory=list)
    corrupted: bool = False
    corrupted_reason: str | None = None
    context: str | None = None  # the preamble or log message right before it
    context_kind: str | None = None  # log | process | thread | ignored | task | asgi | handler
    context_line: int | None = None  # the raw line of `context`
    foreign: tuple[str, ...] = ()  # another writer's text inside the region
    process_hint: str | None = None  # "EngineCore_DP0" from a `Process EngineCore_DP0:` preamble
    time: str | None = None
    level: str | None = None
    headed: bool = False  # every line carried the vLLM log header (logger.exception copy)
    duplicates: list[int] | tuple[()] = ()  # start lines of its copies; a list once there is one
    start_offset: int = 0
    lines: int = 0

    def fields(self) -> tuple:
        return (self.id, self.input, self.stream_id, self.role, self.start_line, self.end_line, self.kind,
                self.exceptions, self.corrupted, self.corrupted_reason, self.context, self.context_kind,
                self.context_line, self.foreign, self.process_hint, self.time, self.level, self.headed,
                self.duplicates, self.start_offset, self.lines)


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
    # Matched by one of its rule's own line patterns (written for this very line), not by the
    # rule's exception message found in the line's text.
    line_pattern: bool = False

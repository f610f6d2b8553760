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


@dataclass(slots=True)
class Traceback:
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
    context_kind: str | None = None  # log | process | thread | ignored | task | asgi
    context_line: int | None = None  # the raw line of `context`
    foreign: tuple[str, ...] = ()  # another writer's text inside the region
    process_hint: str | None = None  # "EngineCore_DP0" from a `Process EngineCore_DP0:` preamble
    time: str | None = None
    level: str | None = None
    headed: bool = False  # every line carried the vLLM log header (logger.exception copy)
    duplicates: list[int] | tuple[()] = ()  # start lines of its copies; a list once there is one
    start_offset: int = 0
    lines: int = 0

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
        d = {
            "id": self.id, "input": self.input, "stream": self.stream_id,
            "start_line": self.start_line, "end_line": self.end_line, "kind": self.kind,
            "corrupted": self.corrupted, "duplicates": list(self.duplicates),
            "exceptions": [e.to_dict(redactor) for e in self.exceptions],
        }
        if self.corrupted_reason:
            d["corrupted_reason"] = text(self.corrupted_reason)
        if self.context:
            d["context"] = text(self.context)
        if self.process_hint:
            d["process_hint"] = text(self.process_hint)
        if self.time:
            d["time"] = self.time
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

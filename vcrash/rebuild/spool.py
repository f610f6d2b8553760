"""Finished tracebacks, past a budget, kept in a temporary file instead of memory.

A log with 100 K processes that each printed a traceback yields 100 K tracebacks (300 K when
their processes wrote them in waves and each was cut twice), every one of which the report lists.
Once matched, a traceback rarely matters again until the report is written, so after the first
KEEP_IN_MEMORY tracebacks of an input each goes to a SpoolFile as one tuple and a
SpooledTraceback stands in for it, reading it back on access. Small logs never touch the disk.
"""

from __future__ import annotations

from vcrash.rebuild.model import FIELDS, ExceptionInfo, Frame, TracebackBase
from vcrash.spool import SpoolFile

KEEP_IN_MEMORY = 2000
_EXCEPTIONS = FIELDS.index("exceptions")


def encode_exceptions(exceptions: list[ExceptionInfo]) -> list[tuple]:
    return [
        (e.type, e.message, e.relation, [(f.file, f.line, f.function, f.code) for f in e.frames],
         e.native_frames, e.repeated_frames, e.group_path, e.line, e.inferred)
        for e in exceptions]


def decode_exceptions(rows: list[tuple]) -> list[ExceptionInfo]:
    return [ExceptionInfo(t, msg, rel, [Frame(*f) for f in frames], native, repeated, group, line, inferred)
            for t, msg, rel, frames, native, repeated, group, line, inferred in rows]


class TracebackSpool:
    """One input's spooled tracebacks (their fields in model.FIELDS order)."""

    def __init__(self) -> None:
        self._file = SpoolFile()
        self._last: tuple[int, tuple] | None = None  # the last read, reused by the next

    def store(self, fields: tuple) -> tuple[int, int]:
        """Where the record lies: (offset, size)."""
        return self._file.put((*fields[:_EXCEPTIONS], encode_exceptions(fields[_EXCEPTIONS]),
                               *fields[_EXCEPTIONS + 1:]))

    def row(self, offset: int, size: int) -> tuple:
        """The stored tuple itself (exceptions as tuples): what a report writer reads."""
        return self._file.get(offset, size)

    def load(self, offset: int, size: int) -> tuple:
        last = self._last
        if last is not None and last[0] == offset:
            return last[1]  # the same objects for back-to-back reads of one traceback
        row = self.row(offset, size)
        fields = (*row[:_EXCEPTIONS], decode_exceptions(row[_EXCEPTIONS]), *row[_EXCEPTIONS + 1:])
        self._last = (offset, fields)
        return fields


class SpooledException:
    """Stands in for one exception of a spooled traceback where a diagnosis keeps it: read back
    on each use, so a crash loop's thousands of per-run diagnoses do not hold their frames."""

    __slots__ = ("_traceback", "_index")

    def __init__(self, traceback: TracebackBase, index: int):
        self._traceback, self._index = traceback, index

    def __getattr__(self, name: str):
        return getattr(self._traceback.exceptions[self._index], name)

    def __reduce__(self):
        return (_itself, (self._traceback.exceptions[self._index],))  # a copy or a pickle carries the exception


def _itself(value):
    return value


def exception_dicts(rows: list[tuple], redactor=None) -> list[dict]:
    """ExceptionInfo.to_dict of each stored exception, without making the objects (a report of
    100 K spooled tracebacks writes them all)."""
    text = (lambda v: v) if redactor is None else redactor.text
    code = (lambda v: v) if redactor is None else redactor.code
    out = []
    for type_, message, relation, frames, native, repeated, group, line, inferred in rows:
        d = {"type": type_, "message": text(message), "relation": relation,
             "frames": [{"file": file, "line": lineno, "function": function,
                         "code": source if source is None else code(source)}
                        for file, lineno, function, source in frames]}
        if native:
            d["native_frames"] = [text(f) for f in native] if redactor is not None else native
        if repeated:
            d["repeated_frames"] = repeated
        if group is not None:
            d["group_path"] = group
        if line is not None:
            d["line"] = line
        if inferred:
            d["inferred"] = True
        out.append(d)
    return out

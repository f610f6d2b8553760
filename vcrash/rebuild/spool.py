"""Finished tracebacks' exceptions, past a budget, kept in a temporary file instead of memory.

A log with 100 K processes that each printed a traceback yields 100 K tracebacks, every one of
which the report lists; their frames and messages are most of what they weigh. Once matched,
a traceback's exceptions rarely matter again until the report is written, so after the first
KEEP_IN_MEMORY tracebacks of an input they go to a SpoolFile as tuples and are read back on
access. Small logs never touch the disk.
"""

from __future__ import annotations

from collections.abc import Sequence

from vcrash.rebuild.model import ExceptionInfo, Frame
from vcrash.spool import SpoolFile

KEEP_IN_MEMORY = 2000


def _encode(exceptions: list[ExceptionInfo]) -> list[tuple]:
    return [
        (e.type, e.message, e.relation, [(f.file, f.line, f.function, f.code) for f in e.frames],
         e.native_frames, e.repeated_frames, e.group_path, e.line, e.inferred)
        for e in exceptions]


def _decode(rows: list[tuple]) -> list[ExceptionInfo]:
    return [ExceptionInfo(t, msg, rel, [Frame(*f) for f in frames], native, repeated, group, line, inferred)
            for t, msg, rel, frames, native, repeated, group, line, inferred in rows]


class ExceptionSpool:
    """One input's spooled exceptions; read back at any offset."""

    def __init__(self) -> None:
        self._file = SpoolFile()
        self._last: tuple[int, list[ExceptionInfo]] | None = None  # the last read, reused by the next

    def store(self, exceptions: list[ExceptionInfo]) -> "SpooledExceptions":
        offset, size = self._file.put(_encode(exceptions))
        return SpooledExceptions(self, offset, size, len(exceptions))

    def load(self, offset: int, size: int) -> list[ExceptionInfo]:
        last = self._last
        if last is not None and last[0] == offset:
            return last[1]  # the same objects for back-to-back reads of one traceback
        exceptions = _decode(self._file.get(offset, size))
        self._last = (offset, exceptions)
        return exceptions


class SpooledExceptions(Sequence):
    """Stands in for a traceback's list of exceptions; reads them back when they are used."""

    __slots__ = ("_spool", "_offset", "_size", "_count")

    def __init__(self, spool: ExceptionSpool, offset: int, size: int, count: int):
        self._spool, self._offset, self._size, self._count = spool, offset, size, count

    def _load(self) -> list[ExceptionInfo]:
        return self._spool.load(self._offset, self._size)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self._load()[index]

    def __iter__(self):
        return iter(self._load())

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None

    def __reduce__(self):
        return (list, (list(self),))  # a copy or a pickle carries the exceptions, not the file

    def __repr__(self) -> str:
        return repr(list(self))


class SpooledException:
    """Stands in for one exception of a spooled traceback where a diagnosis keeps it: read back
    on each use, so a crash loop's thousands of per-run diagnoses do not hold their frames."""

    __slots__ = ("_exceptions", "_index")

    def __init__(self, exceptions: SpooledExceptions, index: int):
        self._exceptions, self._index = exceptions, index

    def __getattr__(self, name: str):
        return getattr(self._exceptions[self._index], name)

    def __reduce__(self):
        return (_itself, (self._exceptions[self._index],))  # a copy or a pickle carries the exception


def _itself(value):
    return value

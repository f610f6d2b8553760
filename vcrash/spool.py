"""An append-only temporary file for what a huge log leaves behind and a report reads back
once (finished tracebacks' exceptions, idle processes' stream records): memory stays bounded
whatever the number of processes. Created on first use, so small logs never touch the disk."""

from __future__ import annotations

import heapq
import marshal
import os
import tempfile
from collections.abc import Iterable, Iterator

WRITE_BATCH = 1 << 20
READ_WINDOW = 256 << 10  # records are mostly read back in the order written: one read serves many
# Format 2 keeps no table of shared objects: a third faster both ways on a traceback's record,
# for ~15% more bytes (the same strings written out again).
MARSHAL_VERSION = 2


class SpoolFile:
    """Records go to a buffer, and the buffer to an unbuffered temporary file a MiB at a time,
    so what is on disk is always known. Where no file can be made (a read-only TMPDIR) or the
    disk fills up (often the very incident being analyzed), the records move to memory and the
    analysis goes on: unbounded, but whole. Reads and writes name their offset (pread, pwrite):
    a forked child reading the same file (report/forked.py) shares no file position with us."""

    def __init__(self) -> None:
        self._file = None  # raw FileIO, or None before the first write and in memory
        self._on_disk = 0  # bytes written to the file
        self._buffer = bytearray()  # records after those: all of them in memory
        self._opened = False
        self._window_start = 0
        self._window = memoryview(b"")  # the file's bytes from _window_start, as last read

    def put(self, value) -> tuple[int, int]:
        """Stores a value of builtins (marshal: C speed); returns where it lies."""
        data = marshal.dumps(value, MARSHAL_VERSION)
        offset = self._on_disk + len(self._buffer)
        self._buffer += data
        if len(self._buffer) >= WRITE_BATCH:
            self._write_out()
        return offset, len(data)

    def get(self, offset: int, size: int, window: int = READ_WINDOW):
        """`window`: how much to read ahead for the next gets (0 where they come in no order)."""
        if offset >= self._on_disk:
            start = offset - self._on_disk
            return marshal.loads(bytes(self._buffer[start:start + size]))
        start = offset - self._window_start
        if start < 0 or start + size > len(self._window):
            data = _read_at(self._file, max(size, window), offset)
            if not window:
                return marshal.loads(data)
            self._window_start, self._window = offset, memoryview(data)
            start = 0
        return marshal.loads(self._window[start:start + size])

    def _write_out(self) -> None:
        if not self._opened:
            self._opened = True
            try:
                self._file = tempfile.TemporaryFile(prefix="vcrash-spool-", buffering=0)
            except OSError:
                self._file = None
        if self._file is None:
            return  # in memory from now on
        data = bytes(self._buffer)  # a copy, so the buffer never has a view on it
        try:
            written = 0
            while written < len(data):
                written += _write_at(self._file, data[written:] if written else data, self._on_disk + written)
        except OSError:
            self._to_memory()
            return
        self._on_disk += written
        self._buffer.clear()

    def _to_memory(self) -> None:
        """Everything back into the buffer (what the file holds, then what was not written)."""
        try:
            kept = _read_at(self._file, self._on_disk, 0)
        finally:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
        self._buffer[:0] = kept
        self._on_disk = 0
        self._window_start, self._window = 0, memoryview(b"")


def _read_at(file, size: int, offset: int) -> bytes:
    """Up to `size` bytes from `offset` (fewer only at the end of the file)."""
    if not hasattr(os, "pread"):  # Windows: no child ever shares the position there
        file.seek(offset)
        return file.read(size)
    data = os.pread(file.fileno(), size, offset)
    while len(data) < size:
        more = os.pread(file.fileno(), size - len(data), offset + len(data))
        if not more:
            break
        data += more
    return data


def _write_at(file, data: bytes, offset: int) -> int:
    if not hasattr(os, "pwrite"):
        file.seek(offset)
        return file.write(data)
    return os.pwrite(file.fileno(), data, offset)


RUN = 1 << 15  # items sorted in memory at once
RUN_BATCH = 1024  # items per spooled batch of a sorted run: what a merge holds of each run


def external_sorted(items: Iterable, run: int | None = None) -> Iterator:
    """`items` (tuples of builtins) in sorted order, in bounded memory: runs of `run` items are
    sorted and spooled, then merged reading a batch of each at a time. Fewer items than a run
    never touch the disk."""
    run = run or RUN
    spool: SpoolFile | None = None
    runs: list[list[tuple[int, int]]] = []
    buffer: list = []
    for item in items:
        buffer.append(item)
        if len(buffer) >= run:
            spool = spool or SpoolFile()
            buffer.sort()
            runs.append([spool.put(buffer[i:i + RUN_BATCH]) for i in range(0, len(buffer), RUN_BATCH)])
            buffer = []
    buffer.sort()
    if not runs:
        yield from buffer
        return
    sources = [_spooled_run(spool, batches) for batches in runs]
    if buffer:
        sources.append(iter(buffer))
    yield from heapq.merge(*sources)


def _spooled_run(spool: SpoolFile, batches: list[tuple[int, int]]) -> Iterator:
    for offset, size in batches:
        yield from spool.get(offset, size, window=0)

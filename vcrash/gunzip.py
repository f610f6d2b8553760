"""A gzip file's bytes, decompressed in large blocks, with points to resume from later.

After the bulk scan, the windows it skipped (the minutes before a timeout, the lines after a
hang warning) are read again. A plain file seeks there; a gzip file had to be decompressed from
its first byte for every window, which made a 20 MB log's re-reads 120 ms of a 210 ms run. On
a file (not a pipe) this reader keeps a copy of zlib's state every so many output bytes (~40 KB
each, at most MAX_POINTS of them), and `open_gzip_at` starts from the last one before an offset.
Every member of a multi-member file is read; zlib checks each member's CRC and length.
"""

from __future__ import annotations

import zlib
from typing import BinaryIO

BLOCK = 256 << 10  # compressed bytes a read
MAX_OUT = 4 << 20  # decompressed bytes a step at most (a gzip bomb stays a stream)
FIRST_INTERVAL = 1 << 20  # output bytes between resume points, doubled when they run out
MAX_POINTS = 64
MAGIC = b"\x1f\x8b"


class ResumePoint:
    __slots__ = ("out_offset", "in_offset", "state")

    def __init__(self, out_offset: int, in_offset: int, state) -> None:
        self.out_offset, self.in_offset, self.state = out_offset, in_offset, state


class GzipReader:
    """`read(n)` gives up to n decompressed bytes (b"" at the end). `raw` starts at
    `in_offset` of the file, with `state` (a zlib decompressor) there when resuming.
    `points`: where resume points go (None: keep none, e.g. on stdin)."""

    def __init__(self, raw: BinaryIO, points: list[ResumePoint] | None = None, in_offset: int = 0,
                 out_offset: int = 0, state=None) -> None:
        self._raw = raw
        self._in = in_offset  # file offset of the next compressed byte to read
        self._out = out_offset  # stream offset of the next decompressed byte produced
        self._d = state  # the member's decompressor; None between members
        self._started = state is not None
        self._input = b""  # compressed bytes not yet given to zlib
        self._pending = b""
        self.points = points
        self._interval = FIRST_INTERVAL
        self._next_point = out_offset + FIRST_INTERVAL

    def read(self, n: int = -1) -> bytes:
        while not self._pending:
            if not self._step():
                return b""
        if n is None or n < 0 or n >= len(self._pending):
            data, self._pending = self._pending, b""
        else:
            data, self._pending = self._pending[:n], self._pending[n:]
        return data

    read1 = read

    def _step(self) -> bool:
        """Decompress some more into _pending; False at the end of the stream."""
        if not self._input:
            self._input = self._raw.read(BLOCK)
            self._in += len(self._input)
            if not self._input:
                if self._d is not None:
                    raise EOFError("compressed file ended before the end-of-stream marker was reached")
                return False
        if self._d is None:
            if self._started:
                # Between members: zero padding is allowed (as gzip's own reader does), anything
                # else that is not another member is damage.
                self._input = self._input.lstrip(b"\0")
                if not self._input:
                    return True
                if not self._input.startswith(MAGIC[:len(self._input)]):
                    raise OSError("not a gzip member after the previous one (trailing garbage)")
            self._d = zlib.decompressobj(31)
            self._started = True
        d = self._d
        self._pending = d.decompress(self._input, MAX_OUT)
        self._out += len(self._pending)
        if d.eof:
            self._input, self._d = d.unused_data, None
        else:
            self._input = d.unconsumed_tail
            if self.points is not None and not self._input and self._out >= self._next_point:
                self._keep_point()
        return True

    def _keep_point(self) -> None:
        points = self.points
        points.append(ResumePoint(self._out, self._in, self._d.copy()))
        if len(points) > MAX_POINTS:
            del points[::2]  # every other one goes; the rest are twice as far apart
            self._interval *= 2
        self._next_point = self._out + self._interval

    def close(self) -> None:
        self._raw.close()


def best_point(points: list[ResumePoint], offset: int) -> ResumePoint | None:
    """The last resume point at or before `offset` (points are in stream order)."""
    import bisect

    i = bisect.bisect_right([p.out_offset for p in points], offset)
    return points[i - 1] if i else None


def open_gzip_at(path: str, points: list[ResumePoint], offset: int) -> tuple[GzipReader, int]:
    """A reader from the last resume point at or before `offset` (or the file's start), and the
    stream offset it starts at."""
    best = best_point(points, offset)
    raw = open(path, "rb")
    if best is None:
        return GzipReader(raw), 0
    raw.seek(best.in_offset)
    return GzipReader(raw, None, best.in_offset, best.out_offset, best.state.copy()), best.out_offset

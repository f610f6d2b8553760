"""Streams for the windows of one input read again after the bulk scan.

The windows (the minutes before a timeout, the bytes after a hang warning) come in file order.
A plain file seeks to each; a gzip file starts from its last resume point before it
(vcrash/gunzip.py); any other compressed input (bz2, xz, zstd) keeps one decompressing stream
open from window to window, so that all of them together cost about one more decompression
instead of one from the first byte for each (a 20 MB bz2 log's re-reads were 1.4 s of 1.8 s).
"""

from __future__ import annotations

from typing import BinaryIO

from vcrash.gunzip import best_point, open_gzip_at
from vcrash.read import InputError, Source, open_binary, remote_url

SKIP_READ = 1 << 20


class _Counted:
    """A stream, the offset of the next byte it gives, and its last KEEP bytes: a reader that
    stopped inside a chunk may start its next window a little before where the stream is."""

    def __init__(self, stream: BinaryIO, position: int = 0, keep: int = 0) -> None:
        self.stream, self.position, self._keep = stream, position, keep
        self._end = position  # the offset of the stream's own next byte
        self._recent = bytearray()  # the bytes just before _end

    def read(self, n: int = -1) -> bytes:
        behind = self._end - self.position
        if behind:
            i = len(self._recent) - behind
            data = bytes(self._recent[i:i + n if n is not None and n >= 0 else None])
        else:
            data = self.stream.read(n)
            self._end += len(data)
            if self._keep:
                self._recent += data
                if len(self._recent) > self._keep:
                    del self._recent[:len(self._recent) - self._keep]
        self.position += len(data)
        return data

    def seek(self, start: int) -> None:
        self.stream.seek(start)
        self.position = self._end = start
        self._recent.clear()

    def rewind(self, start: int) -> bool:
        """Go back to `start` if its bytes are still kept."""
        if self._end - len(self._recent) <= start <= self.position:
            self.position = start
            return True
        return False

    def close(self) -> None:
        try:
            self.stream.close()
        except Exception:
            pass


KEEP = 4 << 20


class WindowReader:
    """One input's stream for its windows, opened on the first and kept until close()."""

    def __init__(self, source: Source, resume_points: list | None = None) -> None:
        self.source, self.resume_points = source, resume_points
        self._open: _Counted | None = None
        self._seeks = False  # the open stream is a plain file's (or a URL's): it seeks
        self.opened = 0  # streams opened so far (the tests hold a compressed input to one or two)

    def at(self, start: int):
        """A stream whose next byte is `start` of the input's (decompressed) bytes, or None;
        it stays open for the next window: read from it, do not close it."""
        current = self._open
        if current is not None:
            if self._seeks:
                current.seek(start)
                return current
            if current.rewind(start):
                return current
            point = best_point(self.resume_points, start) if self.resume_points else None
            if current.position <= start and (point is None or point.out_offset <= current.position):
                return self._skip(current, start)  # nearer than any resume point
        self.close()
        try:
            stream, compression, _ = open_binary(self.source)
        except (InputError, OSError):
            return None
        self.opened += 1
        self._seeks = compression is None
        try:
            if compression is None:  # a plain file (or URL): seek instead of reading up to the window
                stream.close()
                if remote_url(self.source.path):
                    from vcrash.remote import open_url

                    stream = open_url(self.source.path, self.source.display)[0]
                else:
                    stream = open(self.source.path, "rb")
                stream.seek(start)
                self._open = _Counted(stream, start)
                return self._open
            if compression == "gzip" and self.resume_points:
                stream.close()
                stream, position = open_gzip_at(self.source.path, self.resume_points, start)
                self._open = _Counted(stream, position, KEEP)
            else:
                self._open = _Counted(stream, 0, KEEP)
        except (InputError, OSError, ValueError):
            self.close()
            return None
        return self._skip(self._open, start)

    def _skip(self, stream: _Counted, start: int):
        while stream.position < start:  # compressed: decompress up to the window
            if not stream.read(min(SKIP_READ, start - stream.position)):
                return None
        return stream

    def broken(self) -> None:
        """The stream failed mid-window: the next window opens a new one."""
        self.close()

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None

"""Read a big input's next chunks on a thread while this one is scanned.

A file read (the kernel's copy out of the page cache) and a decompression step (zlib, bz2, lzma
and zstd all let go of the GIL) run beside the scan of the chunk before. On a 20 MB log the
reads are ~5 ms of a ~60 ms run; on a gzip log, decompression is most of it.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator

DEPTH = 2  # chunks read ahead: memory stays two chunks above the scan's
_POLL_S = 0.05  # how often a blocked put looks whether the reader was closed

_DATA, _END, _RAISED = 0, 1, 2


class ReadAhead:
    """Iterates `chunks` (any iterator of bytes) from a reader thread, in order; an exception
    the chunks raise (a truncated stream) comes out where its chunk would have. `close()` stops
    the thread before the caller closes the stream under it."""

    def __init__(self, chunks: Iterator[bytes], depth: int = DEPTH) -> None:
        self._chunks = chunks
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="vcrash-read-ahead", daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _pump(self) -> None:
        try:
            for data in self._chunks:
                if not self._put((_DATA, data)):
                    return
            self._put((_END, None))
        except BaseException as exc:  # handed to the consumer, raised there
            self._put((_RAISED, exc))

    def __iter__(self) -> Iterator[bytes]:
        while True:
            kind, value = self._queue.get()
            if kind == _DATA:
                yield value
            elif kind == _END:
                return
            else:
                self._put((_END, None))  # a later next() ends instead of waiting
                raise value

    def close(self) -> None:
        self._closed.set()
        while True:  # unblock a put in progress
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()

"""A huge JSON list of a report, written from both ends at once: this process from the front,
a forked child on the second CPU from the back, until they meet.

A log of 100 K processes leaves a report of 300 K tracebacks and 100 K streams, and writing them
took a sixth of the run on one CPU. The child is forked before the streams are written, so it
works through the tracebacks from the last batch down while this process writes the streams and
then the tracebacks from the first batch up; where they meet depends on which went faster, so
neither waits long whatever the two lists cost. The child writes each batch's text (in the
output's encoding where that codec keeps no state, else in UTF-8 that this process writes as
text) to an unlinked temporary file, and where it lies to shared memory; once it
has left (os._exit: no buffer of ours flushed twice, no atexit handler run), this process copies
those batches in order. The child inherits everything the batches read (the spool files are
read at an offset, never through a shared file position). A race where they meet only makes a
batch written twice, never neither; a child that fails leaves its batches to be written here, so
the output is the same, byte for byte, either way. VCRASH_FORKED_REPORT=0 turns it off; =1 forks
whatever the list's size (tests).
"""

from __future__ import annotations

import codecs
import os
import struct
import tempfile
from typing import Callable, TextIO

from vcrash import forking

STATELESS_CODECS = frozenset({"utf-8", "ascii", "latin-1", "iso8859-1", "cp1252"})
MIN_ITEMS = 20_000  # fewer: the fork and the copy cost about what the child saves
_SLOT = struct.Struct("<q")  # the front's next batch, then the batch the back took last
_WHERE = struct.Struct("<qq")  # each batch's (offset, length) in the child's file; length 0: not written


def wanted(items: int) -> bool:
    switch = os.environ.get("VCRASH_FORKED_REPORT", "")
    if switch == "0" or not forking.can_fork():
        return False
    return switch == "1" or items >= MIN_ITEMS and forking.second_cpu()


class SharedList:
    """The batches of one list: `batch_text(b)` is batch b's items joined (", "); a comma goes
    between batches. The child starts at once; `write_into(out)` writes the whole list's items."""

    def __init__(self, batches: int, batch_text: Callable[[int], str], out: TextIO):
        import mmap

        self._batches, self._batch_text = batches, batch_text
        # Bytes go straight to the output's buffer when there is one and its codec keeps no state
        # (a UTF-16 writer would put a BOM before every batch); else (a StringIO) as UTF-8, which
        # this process writes as text.
        self._buffer = getattr(out, "buffer", None)
        self._encoding = getattr(out, "encoding", None) or "utf-8"
        self._errors = getattr(out, "errors", None) or "strict"
        try:
            stateless = codecs.lookup(self._encoding).name in STATELESS_CODECS
        except LookupError:
            stateless = False
        if self._buffer is None or not stateless:
            self._buffer, self._encoding, self._errors = None, "utf-8", "strict"
        self.pid: int | None = None
        self.failed: str | None = None  # why every batch was written here, if it was
        self.copied = 0  # batches the child wrote
        self._fd: int | None = None
        self._shared = mmap.mmap(-1, 2 * _SLOT.size + batches * _WHERE.size)  # zeros: nothing written
        _SLOT.pack_into(self._shared, 0, 0)
        _SLOT.pack_into(self._shared, _SLOT.size, batches)  # the back has taken none
        try:
            with tempfile.TemporaryFile(prefix="vcrash-list-") as fh:
                self._fd = os.dup(fh.fileno())
        except OSError as exc:
            self.failed = f"no temporary file: {exc}"
            return
        try:
            pid = os.fork()
        except OSError as exc:
            self.failed = f"fork failed: {exc}"
            return
        if pid == 0:
            os._exit(self._child())
        self.pid = pid

    def _text(self, batch: int) -> str:
        return self._batch_text(batch) if batch == 0 else "," + self._batch_text(batch)

    def _child(self) -> int:
        try:
            import gc
            import signal

            gc.disable()  # the parent's uncollected cycles (and their finalizers) are the parent's
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C reaches the whole group: just go
            shared, offset = self._shared, 0
            for batch in range(self._batches - 1, -1, -1):
                _SLOT.pack_into(shared, _SLOT.size, batch)  # first, so the front sees it taken
                if _SLOT.unpack_from(shared, 0)[0] >= batch:
                    return 0  # the front got here first
                data = self._text(batch).encode(self._encoding, self._errors)
                view = memoryview(data)
                while view:
                    view = view[os.pwrite(self._fd, view, offset + len(data) - len(view)):]
                _WHERE.pack_into(shared, 2 * _SLOT.size + batch * _WHERE.size, offset, len(data))
                offset += len(data)
            return 0
        except BaseException:
            return 1

    def write_into(self, out: TextIO) -> None:
        """Every batch, in order: the front's own, then the child's (read back from its file)."""
        shared, batch = self._shared, 0
        while batch < self._batches:
            _SLOT.pack_into(shared, 0, batch)
            if self.pid is not None and _SLOT.unpack_from(shared, _SLOT.size)[0] <= batch:
                break  # the back has this one, or passed it
            out.write(self._text(batch))
            batch += 1
        if batch == self._batches:
            self.close()
            return
        first = self._first_written(batch) if self._reaped_ok() else self._batches
        for own in range(batch, first):  # the child left them (it saw us coming) or failed
            out.write(self._text(own))
        if first < self._batches:
            self._copy(out, first)
        self.close()

    def _first_written(self, batch: int) -> int:
        """The first of the batches from `batch` on that the child wrote with all after it."""
        first = self._batches
        while first > batch and _WHERE.unpack_from(self._shared, 2 * _SLOT.size + (first - 1) * _WHERE.size)[1]:
            first -= 1
        return first

    def _copy(self, out: TextIO, first: int) -> None:
        if self._buffer is not None:
            out.flush()  # what this process wrote before them goes first
        for batch in range(first, self._batches):
            offset, length = _WHERE.unpack_from(self._shared, 2 * _SLOT.size + batch * _WHERE.size)
            data = os.pread(self._fd, length, offset)
            while len(data) < length:  # a short read (never from a regular file, but cheap to handle)
                data += os.pread(self._fd, length - len(data), offset + len(data))
            if self._buffer is not None:
                self._buffer.write(data)
            else:
                out.write(data.decode("utf-8"))
            self.copied += 1

    def _reaped_ok(self) -> bool:
        if self.pid is None:
            return False
        pid, self.pid = self.pid, None
        status = forking.reap(pid)
        if status != 0:
            self.failed = f"the report's second process ended with status {status}"
            return False
        return True

    def close(self) -> None:
        """Ends the child (whatever it is doing), reaps it and drops its file."""
        if self.pid is not None:
            forking.kill(self.pid)
            self.pid = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._shared is not None:
            self._shared.close()
            self._shared = None

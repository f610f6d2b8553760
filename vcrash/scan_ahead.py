"""The bulk scan of a big file, run ahead in a second process.

On a server's own log most of the reading time goes to the scanner (read.py's `read_starts`:
blanking the users' text, the multi-literal scan, the checks of lines without a level), not to
the few lines it hands on. With a second CPU, a forked child reads the same file again and
replays iter_lines' scan without walking any line: each chunk's starts, heads and scanner state
go through a pipe, and the main process takes them where it would have scanned, leaving it only
the walk and the analysis. The results are the same by construction: the child runs the same
code on the same bytes, and every record names the piece of input it describes; on any mismatch
(the file changed under us), a dead child or a broken pipe, the main process scans the rest
itself from the state the last record left. Once the scan is over the child stays for requests,
the newest first: analyze.py has it read the window before a timeout found during the pass (so
that it is ready by the pass's end), or the second half of a long window read again after it.

Only a plain file on disk qualifies (a compressed one would decompress twice, stdin and an
object store's download cannot be read twice), on Linux with two usable CPUs and no other thread running (fork keeps only this one).
VCRASH_SCAN_AHEAD=0 turns it off; =1 forces it at any size (tests).
"""

from __future__ import annotations

import gc
import marshal
import os
import struct
from typing import Callable

from vcrash import forking

# select and signal are imported where a child is forked or ended: ~1 ms a run that never forks.

MIN_BYTES = 16 << 20  # smaller: the fork and the child's replay cost about what they save
PIPE_BYTES = 1 << 20  # room for several chunks' records, so the child rarely waits for us
READ_BYTES = 1 << 16
_LENGTH = struct.Struct("<I")
_EDGE = 16  # bytes from each end of a scanned piece that its record carries
_PROGRESS = struct.Struct("<q")  # the piece the child began last, at the start of the shared flags


def wanted(source, compression: str | None, size: int | None) -> bool:
    """Whether `source` (a read.Source), read this way, should be scanned ahead."""
    from vcrash.read import remote_url  # here: read.py imports this module

    switch = os.environ.get("VCRASH_SCAN_AHEAD", "")
    if switch == "0" or source.is_stdin or remote_url(source.path) or compression is not None or size is None:
        return False  # stdin and a download cannot be read twice, nor is decompressing worth it
    if not forking.can_fork():
        return False
    if switch == "1":
        return True
    return size >= MIN_BYTES and forking.second_cpu()


def token(buf: bytes, begin: int, end: int) -> tuple:
    """What identifies a scanned piece: its place and the bytes at both ends."""
    return len(buf), begin, end, buf[begin:begin + _EDGE], buf[max(begin, end - _EDGE):end]


class ScanAhead:
    """The main process's end. `replay(claims)` runs in the child: the same iter_lines over the
    same bytes, its scanner asking `claims.claim(i)` before scanning piece i and handing the
    result to `claims.send(record)`.

    Pieces (whole chunks) are shared out as they come: the child takes them in order; a piece
    the child has not begun when the main process reaches it, the main process scans itself, and
    when it has to wait for the one the child is scanning, it marks the next as its own. So
    neither waits long on a slower other (the generated 1 GB logs with costly scans split about
    two to one). Flags in shared memory say who scans what; a race between the two only makes
    both scan a piece (the main process drops the child's record), never neither (a record past
    the one wanted says the child passed it over).

    Its replay done, the child answers requests (`serve`'s, e.g. the second half of a window
    read again) until the main process closes their pipe: `ask()` sends one, `answer()` waits
    for its answer."""

    def __init__(self, replay: Callable[["_Claims"], None], chunks: int, serve: Callable[[tuple], object] | None = None):
        self._replay = replay
        self._serve = serve  # in the child, once its replay is done: a request -> its answer (marshal-able)
        self._requests: int | None = None  # the write end of the requests' pipe
        self._asked = 0  # requests sent so far: each answer names its own
        self._answers: dict[int, object] = {}  # answers read while waiting for another
        self._done = False  # the child's replay is over: no more pieces will come
        self._pieces = chunks + 64  # flags for the chunks (a file that grows: the rest are the child's)
        self.pid: int | None = None
        self._fd: int | None = None  # the pipe's read end
        self._buf = bytearray()  # what was read of it and not yet taken
        self._shared = None
        self._pending: tuple | None = None  # the next record read, for a later piece
        self._mine: set[int] = set()  # pieces ahead marked as the main process's
        self.taken = 0  # pieces the child scanned for us
        self.scanned_here = 0  # pieces the main process scanned itself
        self.stopped: str | None = None  # why the main process scans on its own, if it does

    def start(self) -> None:
        import mmap

        self._shared = mmap.mmap(-1, _PROGRESS.size + self._pieces)  # shared with the child (MAP_SHARED)
        _PROGRESS.pack_into(self._shared, 0, -1)
        read_end, write_end = os.pipe()
        try:
            import fcntl

            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except (ImportError, AttributeError, OSError):
            pass  # the default 64 KiB: the child waits more, nothing else changes
        request_read, request_write = os.pipe()  # requests, main process -> child
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in (read_end, write_end, request_read, request_write):
                os.close(fd)
            self.stopped = f"fork failed: {exc}"
            return
        if pid == 0:
            os.close(read_end)
            os.close(request_write)
            os._exit(_child(self._replay, write_end, self._shared, self._pieces, request_read, self._serve))
        os.close(write_end)
        os.close(request_read)
        self.pid = pid
        self._fd = read_end
        self._requests = request_write

    def take(self, piece: int, buf: bytes, begin: int, end: int) -> tuple | None:
        """The child's record for piece `piece` (buf[begin:end]), or None: scan it here."""
        if self._fd is None or self._done:  # not started, or the child is done: every piece left is ours
            self.scanned_here += 1
            return None
        if piece in self._mine:
            self._mine.discard(piece)
            self.scanned_here += 1
            return None
        record = self._record(piece, wait=False)
        if record is None:
            if self._fd is None or self._done:  # the child is gone, or done with its pieces
                self.scanned_here += 1
                return None
            if self._claim(piece):  # the child has not begun it
                self.scanned_here += 1
                return None
            if self._claim(piece + 1):  # it has: we wait for it, then scan the next one while it goes on
                self._mine.add(piece + 1)
            record = self._record(piece, wait=True)
            if record is None:
                if self._done:
                    self.scanned_here += 1
                return None
        if record[0] > piece:  # the child passed this one over
            self.scanned_here += 1
            return None
        self._pending = None
        if record[1] != token(buf, begin, end):
            return self._stop("the input changed while it was read")
        self.taken += 1
        return record

    def alive(self) -> bool:
        """Whether the child can still take a request."""
        return self._fd is not None and self._requests is not None and self._serve is not None

    def ask(self, request: tuple) -> int | None:
        """Sends the child a request (its `serve`'s argument); the number to wait for its answer
        by, or None where it cannot take one."""
        if not self.alive():
            return None
        self._asked += 1
        blob = marshal.dumps((self._asked, *request))
        try:
            _write_all(self._requests, _LENGTH.pack(len(blob)) + blob)
        except OSError:
            self._stop("the scan-ahead pipe broke")
            return None
        return self._asked

    def answer(self, asked: int):
        """The child's answer to request `asked` (None where there is none: do it here). The
        pieces the child sent that the main process no longer wants are passed over; the answers
        to other requests are kept until asked for (the child takes the newest request first)."""
        if asked in self._answers:
            return self._answers.pop(asked)
        while self._fd is not None:
            record = self._next_record(wait=True)
            if record is None:
                return None
            if record[0] == "answer":
                if record[1] == asked:
                    return record[2]
                self._answers[record[1]] = record[2]
            elif record[0] == "done":
                self._done = True
        return None

    def _claim(self, piece: int) -> bool:
        """Marks `piece` as the main process's, if the child has not begun it (True)."""
        if piece >= self._pieces or _PROGRESS.unpack_from(self._shared)[0] >= piece:
            return False
        self._shared[_PROGRESS.size + piece] = 1
        # Looked at again after the mark: if the child began it in between, both may scan it.
        return _PROGRESS.unpack_from(self._shared)[0] < piece

    def _record(self, piece: int, wait: bool) -> tuple | None:
        """The child's first record for `piece` or a later one (a piece it passed over), skipping
        those for pieces scanned here; None if there is none yet (without `wait`) or ever."""
        while True:
            record = self._pending
            if record is not None and record[0] >= piece and record[0] not in self._mine:
                return record
            self._pending = None
            record = self._next_record(wait)
            if record is None:
                return None
            if record[0] == "done":  # the replay is over: the pieces not sent were ours
                self._done = True
                return None
            self._pending = record

    def _next_record(self, wait: bool) -> tuple | None:
        blob = self._next_blob(wait)
        if blob is None:
            return None
        try:
            return marshal.loads(blob)
        except (EOFError, ValueError, TypeError):
            return self._stop("the scan-ahead pipe broke")

    def _next_blob(self, wait: bool) -> bytes | None:
        buf = self._buf
        while True:
            if len(buf) >= _LENGTH.size:
                size = _LENGTH.unpack_from(buf)[0] + _LENGTH.size
                if len(buf) >= size:
                    blob = bytes(buf[_LENGTH.size:size])
                    del buf[:size]
                    return blob
            if not wait and not _readable(self._fd):
                return None
            try:
                data = os.read(self._fd, READ_BYTES)
            except OSError:
                return self._stop("the scan-ahead pipe broke")
            if not data:
                return self._ended()
            buf += data

    def _ended(self) -> None:
        """The pipe's end: a child that finished its replay has sent every piece it took (those
        left were the main process's to scan, the last of them marked as it ended); one that died
        has not."""
        pid, self.pid = self.pid, None
        status = forking.reap(pid)
        if status != 0:
            return self._stop("the scan-ahead process ended early")
        self.close()
        return None

    def _stop(self, why: str) -> None:
        self.stopped = why
        self.close()
        return None

    def close(self) -> None:
        """Ends the child (whatever it is doing) and reaps it."""
        for fd in (self._fd, self._requests):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fd = self._requests = None
        if self.pid is not None:
            forking.kill(self.pid)
            self.pid = None
        if self._shared is not None:
            self._shared.close()
            self._shared = None


class _Claims:
    """The child's end: which pieces to scan, and where their records go."""

    def __init__(self, shared, pieces: int, send: Callable[[tuple], None]):
        self._shared, self._pieces, self.send = shared, pieces, send

    def claim(self, piece: int) -> bool:
        if piece >= self._pieces:
            return True  # past the flags (a file that grew): ours alone
        _PROGRESS.pack_into(self._shared, 0, piece)  # first, so the main process sees we began it
        return not self._shared[_PROGRESS.size + piece]


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 0)[0])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _child(replay: Callable, write_end: int, shared, pieces: int, request_read: int, serve) -> int:
    """The forked process: replays the scan into the pipe, then answers requests until the main
    process closes their pipe; its exit code (never returns to the caller's stack: os._exit runs
    no atexit handler and flushes none of the parent's buffers)."""
    try:
        # The parent's garbage not yet collected is the parent's: collected here, a cycle's
        # finalizers (a temporary file's, a folder's cleanup) would run in the wrong process.
        gc.disable()
        import signal

        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C reaches the whole group: just go
        pack = _LENGTH.pack

        def send(record: tuple) -> None:
            # Unbuffered: the main process may be waiting for this very record.
            blob = marshal.dumps(record)
            _write_all(write_end, pack(len(blob)) + blob)

        replay(_Claims(shared, pieces, send))
        send(("done",))
        if serve is None:
            return 0
        for asked, *request in _requests_newest_first(request_read):
            send(("answer", asked, serve(tuple(request))))
        return 0
    except BaseException:  # a closed pipe (the main process is done) or anything else: the main scans
        return 1


def _requests_newest_first(fd: int):
    """The requests as they come, the newest of those waiting first: one asked during the pass
    and superseded since (a timeout's copy that an earlier-starting one replaced) waits behind
    the one the main process wants now. Ends when the main process closes the pipe."""
    buf, waiting = bytearray(), []
    while True:
        if not waiting or _readable(fd):
            data = os.read(fd, READ_BYTES)  # blocks only with nothing waiting
            if not data:
                return  # the main process is done with us
            buf += data
            while len(buf) >= _LENGTH.size and len(buf) >= _LENGTH.size + _LENGTH.unpack_from(buf)[0]:
                size = _LENGTH.size + _LENGTH.unpack_from(buf)[0]
                waiting.append(marshal.loads(bytes(buf[_LENGTH.size:size])))
                del buf[:size]
            continue  # more may be waiting
        yield waiting.pop()

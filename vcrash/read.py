"""Stage 1, read: inputs (files, dirs, globs, stdin, compressed) -> raw lines with positions.

Nothing here loads a whole file: input is consumed in binary chunks, decoded leniently, and
split into lines. The bulk scan (`iter_lines` with needles, every input by default) skips
routine lines: a scanner finds the lines of each chunk that hold one of the needles and only
those are yielded, unless the caller says something is open (`hot()`), in which case every line
is yielded (or every line naming the open process, `focus()`).
"""

from __future__ import annotations

import bz2
import codecs
import fnmatch
import glob
import lzma
import os
import re
import stat
import sys
import threading
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterable, Iterator

from vcrash.gunzip import GzipReader
from vcrash.hsdb import block_database
from vcrash.memo import Memo

CHUNK_SIZE = 1 << 20
# A longer line is cut: the rest is skipped up to the next newline (memory stays bounded).
MAX_LINE_BYTES = 256 * 1024


class InputError(Exception):
    """An input that cannot be read; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Source:
    path: str  # filesystem path, or "-" for stdin
    display: str  # the name used in reports
    walked: bool = False  # found by a folder walk or a glob: only ever opened as a regular file

    @property
    def is_stdin(self) -> bool:
        return self.path == "-"


@dataclass(slots=True)
class RawLine:
    lineno: int  # 1-based line of the raw input
    offset: int  # byte offset of the line start in the decompressed stream
    text: str
    context: bool = False  # fast path: read only as the lines before a traceback's first line
    # Fast path: the nearest line before this one that has a timestamp's shape, when lines in
    # between were skipped (the pipeline's clock must not stop at the last line it read).
    clock: str | None = None
    # Fast path: a line of the start-up prefix that holds no needle and is no traceback's
    # context: read only to list its process (and for its time), like a skipped line otherwise.
    census: bool = False


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry a folder walk or a glob found and did not read, with the reason."""

    path: str
    reason: str

    def to_dict(self) -> dict:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class Selection:
    """How folder walks and globs pick entries (explicitly named files are always taken)."""

    include: tuple[str, ...] = ()  # globs; when given, an entry must match one
    exclude: tuple[str, ...] = ()
    follow_symlinks: bool = False  # read file symlinks that lead out of the walked tree
    special_files: bool = True  # an explicitly named FIFO or device is read (analyze), not in scan


# Bytes sniffed to tell a log from a binary file.
SNIFF_BYTES = 1024
# procfs/sysfs files say size 0 and some block forever (/proc/kmsg) or hold secrets
# (/proc/self/environ): never read during a walk, wherever a symlink points.
PSEUDO_ROOTS = ("/proc", "/sys")


def expand_inputs(args: Iterable[str], selection: Selection | None = None,
                  skipped: list[Skipped] | None = None, list_map: Callable | None = None) -> list[Source]:
    """Files, directories (recursively, text and compressed files), globs, URLs and '-' -> sources.
    Every entry a walk or glob passes over is appended to `skipped` with its reason. `list_map`
    runs the sub-folder listings of a URL prefix (default: here, one after another; the Dask
    engine passes one that runs them on its workers)."""
    sel = selection or Selection()
    skipped = skipped if skipped is not None else []
    sources: list[Source] = []
    seen: set[str] = set()

    def add(path: str, walked: bool = False) -> None:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            sources.append(Source(path, path, walked))

    for arg in args:
        if arg == "-":
            sources.append(Source("-", "<stdin>"))
            continue
        if remote_url(arg):
            _expand_url(arg, sel, skipped, sources, seen, list_map or map)
            continue
        if arg.lower().startswith("file://"):
            from vcrash.remote import local_path

            arg = local_path(arg) or arg
        if os.path.isdir(arg):
            for path in _walk_dir(arg, sel, skipped):
                add(path, walked=True)
            continue
        if os.path.exists(arg) or os.path.islink(arg):
            reason = None if sel.special_files else _special_reason(arg)
            if reason:
                skipped.append(Skipped(arg, reason + " (scan reads regular files only; 'vcrash analyze' reads it)"))
            else:
                add(arg)
            continue
        if glob.has_magic(arg):
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                raise InputError(f"no file matches {arg!r}")
            base = _glob_base(arg)
            for path in matches:
                if os.path.isdir(path):
                    for inner in _walk_dir(path, sel, skipped):
                        add(inner, walked=True)
                    continue
                reason = _entry_reason(path, base, sel)
                if reason:
                    skipped.append(Skipped(path, reason))
                else:
                    add(path, walked=True)
            continue
        raise InputError(f"no such file or directory: {arg}")
    return sources


def remote_url(arg: str) -> bool:
    if "://" not in arg:
        return False
    from vcrash.remote import is_url, protocol

    return is_url(arg) and protocol(arg) != "file"


def _expand_url(url: str, sel: Selection, skipped: list[Skipped], sources: list[Source], seen: set[str],
                list_map: Callable) -> None:
    from vcrash.remote import RemoteError, plan, run_list_job

    try:
        found, jobs, passed_over, named = plan(url, sel.include, sel.exclude)
    except RemoteError as exc:
        raise InputError(str(exc)) from None
    listed = list(found)
    try:
        for more, more_skipped in list_map(run_list_job, jobs):
            listed.extend(more)
            passed_over.extend(more_skipped)
    except RemoteError as exc:  # raised on a worker (its protocol package missing there)
        raise InputError(str(exc)) from None
    skipped.extend(Skipped(name, why) for name, why in passed_over)
    for obj in sorted(listed, key=lambda f: f.url):
        if obj.url not in seen:
            seen.add(obj.url)
            sources.append(Source(obj.url, obj.display, walked=not named))


def _glob_base(pattern: str) -> str:
    """The folder a glob searches: its part before the first wildcard."""
    head = []
    for part in pattern.split(os.sep):
        if glob.has_magic(part):
            break
        head.append(part)
    return os.sep.join(head) or "."


def _special_reason(path: str) -> str | None:
    """Why an explicitly named path is not a regular file a scan may open (None: it is one)."""
    try:
        st = os.stat(path)
    except OSError:
        return None  # reported as unreadable when opened
    kind = _kind(st.st_mode)
    if kind:
        return kind
    return "procfs/sysfs file" if _pseudo(path, st) else None


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "FIFO (it would block)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISDIR(mode):
        return "directory"
    return "not a regular file"


def _pseudo_devices() -> set[int]:
    devs = set()
    for root in PSEUDO_ROOTS:
        try:
            devs.add(os.stat(root).st_dev)
        except OSError:
            pass
    return devs


_PSEUDO_DEVS: set[int] | None = None


def _pseudo(path: str, st: os.stat_result) -> bool:
    global _PSEUDO_DEVS
    if _PSEUDO_DEVS is None:
        _PSEUDO_DEVS = _pseudo_devices()
    real = os.path.realpath(path)
    return st.st_dev in _PSEUDO_DEVS or any(real == r or real.startswith(r + "/") for r in PSEUDO_ROOTS)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _matches(rel: str, name: str, patterns: tuple[str, ...]) -> str | None:
    for pat in patterns:
        if fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(name, pat):
            return pat
    return None


def _entry_reason(path: str, root: str, sel: Selection) -> str | None:
    """Why a walked or globbed entry is not read (None: read it). Nothing here opens anything
    but a regular file, and that for SNIFF_BYTES only."""
    name = os.path.basename(path)
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    excluded = _matches(rel, name, sel.exclude)
    if excluded:
        return f"excluded by --exclude {excluded}"
    included = _matches(rel, name, sel.include)
    if sel.include and not included:
        return "not matched by --include"
    if name.startswith(".") and not included:
        return "hidden file"
    try:
        lst = os.lstat(path)
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}"
    if stat.S_ISLNK(lst.st_mode):
        try:
            os.stat(path)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                return "dangling symlink"
            return f"broken symlink: {exc.strerror or exc}"
        target = os.path.realpath(path)
        if not sel.follow_symlinks and not _inside(target, os.path.realpath(root)):
            return f"symlink out of the scanned tree to {target} (--follow-symlinks reads it)"
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}"
    kind = _kind(st.st_mode)
    if kind:
        return kind
    if _pseudo(path, st):
        return "procfs/sysfs file"
    return _sniff_reason(path)


def _sniff_reason(path: str) -> str | None:
    """Decide by content: text (UTF-8, UTF-16) or compressed is read, anything else is not."""
    try:
        # O_NONBLOCK: swapped for a FIFO since the stat, the open still cannot block.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None  # kept: opening it again reports it as unreadable (exit 2), never silently
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        head = os.read(fd, SNIFF_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not head or detect_compression(head) or utf16_encoding(head):
        return None
    return None if looks_like_text(head) else "binary content (not text or a known compression)"


def looks_like_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    text = head.decode("utf-8", "replace")
    # A cut multi-byte character at the end of the sniffed bytes is not evidence of binary.
    bad = text[:-2].count("\ufffd") + sum(1 for ch in text if ch < " " and ch not in "\t\n\r\x1b\x08\x0c\x07")
    return bad <= max(2, len(text) // 20)


def _walk_dir(root: str, sel: Selection, skipped: list[Skipped]) -> list[str]:
    # followlinks=False: a symlink loop cannot make this walk forever; a symlinked folder is listed.
    out: list[str] = []

    def unreadable(exc: OSError) -> None:
        skipped.append(Skipped(exc.filename or root, f"unreadable directory: {exc.strerror or exc}"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        dirnames.sort()
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                skipped.append(Skipped(path, "symlink to a folder (folders are walked without following links)"))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            reason = _entry_reason(path, root, sel)
            if reason:
                skipped.append(Skipped(path, reason))
            else:
                out.append(path)
    return out


_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
)


def detect_compression(head: bytes) -> str | None:
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def open_binary(source: Source) -> tuple[BinaryIO, str | None, int | None]:
    """Open a source for binary reading: (stream, compression, size on disk)."""
    if source.is_stdin:
        raw: BinaryIO = sys.stdin.buffer
        size = None
    elif remote_url(source.path):
        from vcrash.remote import open_url

        raw, size = open_url(source.path, source.display)
        if size:
            raw = _Bounded(raw, size)  # type: ignore[assignment]
    else:
        try:
            if source.walked:
                raw, st = _open_walked(source)
            else:
                st = os.stat(source.path)
                if stat.S_ISDIR(st.st_mode):
                    raise InputError(f"{source.display}: is a directory")
                raw = open(source.path, "rb")
        except InputError:
            raise
        except OSError as exc:
            raise InputError(f"cannot read {source.display}: {exc.strerror or exc}") from None
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
        if size or source.walked:
            # Read what was there at open: a log that keeps growing cannot keep the run going.
            raw = _Bounded(raw, size or 0)  # type: ignore[assignment]
    peekable = _Peekable(raw)
    try:
        head = peekable.peek(6)
    except OSError as exc:  # an object store refusing the first read (403, 5xx)
        raw.close()
        raise InputError(f"cannot read {source.display}: {exc.strerror or exc}") from None
    kind = detect_compression(head)
    if kind is None and _cut_magic(head, source.path):
        return _Damaged("compressed stream cut inside its magic bytes"), None, size  # type: ignore[return-value]
    if kind == "gzip":
        # A file on disk keeps resume points, so that windows read again later need not
        # decompress from the start (a pipe or a URL cannot seek).
        seekable = size is not None and not source.is_stdin and not remote_url(source.path)
        stream: BinaryIO = GzipReader(peekable, [] if seekable else None)  # type: ignore[arg-type,assignment]
    elif kind == "bz2":
        stream = bz2.BZ2File(peekable)  # type: ignore[arg-type]
    elif kind == "xz":
        stream = lzma.LZMAFile(peekable)  # type: ignore[arg-type]
    elif kind == "zstd":
        stream = _ZstdReader(peekable, source.display)  # type: ignore[assignment]
    else:
        stream = peekable  # type: ignore[assignment]
    return stream, kind, size


def zstd_max_window() -> int:
    """The largest zstd window we accept: `zstd --long=31` writes 2 GiB windows, and the decoder
    buffers one window, so allow up to half the machine's memory (at least zstd's default 128 MiB)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = 0
    window = 1 << 27
    while window < (1 << 31) and window * 2 <= memory // 2:
        window *= 2
    return window


ZSTD_MAX_WINDOW = zstd_max_window()


def _open_walked(source: Source) -> tuple[BinaryIO, os.stat_result]:
    """Open a file a walk picked, checking on the open file that it is still a regular file
    outside procfs/sysfs (it may have been replaced by a FIFO since): O_NONBLOCK, so even then
    the open cannot block."""
    fd = os.open(source.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        reason = _kind(st.st_mode) or ("procfs/sysfs file" if _pseudo(source.path, st) else None)
        if reason:
            raise InputError(f"{source.display}: not read: {reason}")
        return os.fdopen(fd, "rb"), st
    except BaseException:
        os.close(fd)
        raise


def _read_into(raw, buffer) -> int:
    """raw.readinto(buffer), or a read copied in for readers without one (a remote object's)."""
    readinto = getattr(raw, "readinto", None)
    if readinto is not None:
        return readinto(buffer) or 0
    data = raw.read(len(buffer))
    buffer[:len(data)] = data
    return len(data)


class _Bounded:
    """At most `limit` bytes of a file."""

    def __init__(self, raw: BinaryIO, limit: int):
        self._raw = raw
        self._left = limit

    def read(self, n: int | None = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._raw.read(n)
        self._left -= len(data)
        return data

    def readinto(self, buffer: bytearray) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buffer)
        n = _read_into(self._raw, view[:self._left] if self._left < len(buffer) else view)
        self._left -= n
        return n

    def close(self) -> None:
        self._raw.close()


COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".xz")


def _cut_magic(head: bytes, path: str) -> bool:
    """A file named as compressed that ends inside the magic bytes: an upload cut short."""
    return (0 < len(head) < 6 and path.lower().endswith(COMPRESSED_SUFFIXES)
            and any(magic.startswith(head) for magic, _ in _MAGIC))


class _Damaged:
    def __init__(self, why: str):
        self._why = why

    def read(self, n: int = -1) -> bytes:
        raise EOFError(self._why)

    def close(self) -> None:
        pass


# Compressed bytes a zstd decompress call is given: a byte can stand for ~32,000 (RLE blocks),
# so one call's output stays ~8 MB even on a bomb; and small calls are faster than one big one
# (20 MB of log: 10 ms in 256-byte pieces, 36 ms in 1 MiB ones).
ZSTD_PIECE = 256


class _ZstdReader:
    """zstd frames one after another, like `zstd -d`; a frame cut short raises EOFError at the
    end (zstandard's own stream reader just stops, so a truncated log looked complete)."""

    def __init__(self, raw: "_Peekable", display: str = ""):
        import zstandard

        self._zstd = zstandard
        self._raw = raw
        self._display = display
        self._dobj = self._decompressor()
        self._in_frame = False
        self._pending = b""  # output beyond what the last read asked for
        self._input, self._ipos, self._view = b"", 0, memoryview(b"")  # compressed, as read
        self._carry = b""  # compressed bytes after a frame's end, fed before the rest

    def read(self, n: int = -1) -> bytes:
        want = n if n and n > 0 else 1 << 20
        pending, self._pending = self._pending, b""
        parts, have = ([pending], len(pending)) if pending else ([], 0)
        while have < want:
            piece = self._next_piece()
            if piece is None:
                if self._in_frame:
                    raise EOFError("zstd frame cut short")
                break
            if not self._in_frame:
                self._check_window(bytes(piece))
            self._in_frame = True
            out = self._dobj.decompress(piece)
            if self._dobj.eof:  # a frame ended: the rest belongs to the next one
                self._carry = self._dobj.unused_data
                self._dobj = self._decompressor()
                self._in_frame = False
            if out:
                parts.append(out)
                have += len(out)
        data = b"".join(parts)
        if len(data) > want:
            data, self._pending = data[:want], data[want:]
        return data

    def _next_piece(self):
        """The next ZSTD_PIECE compressed bytes (a frame's leftover first), None at the end."""
        if self._carry:
            piece, self._carry = self._carry[:ZSTD_PIECE], self._carry[ZSTD_PIECE:]
            return piece
        if self._ipos >= len(self._input):
            self._input, self._ipos = self._raw.read(1 << 20), 0
            if not self._input:
                return None
            self._view = memoryview(self._input)  # pieces without a copy each
        piece = self._view[self._ipos:self._ipos + ZSTD_PIECE]
        self._ipos += len(piece)
        return piece

    def _decompressor(self):
        return self._zstd.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).decompressobj()

    def _check_window(self, data: bytes) -> None:
        # A window above the limit is not damage: say so and how to read it anyway.
        try:
            window = self._zstd.get_frame_parameters(data).window_size
        except Exception:
            return  # too few bytes for the header, or not a frame: decompress() reports it
        # Above 2 GiB no zstd writes a frame (windowLog 31 is the format's limit): that is damage.
        if ZSTD_MAX_WINDOW < window <= 1 << 31:
            raise InputError(
                f"{self._display}: zstd frame needs a {window >> 20} MiB window, above the "
                f"{ZSTD_MAX_WINDOW >> 20} MiB this machine allows; decompress it first "
                f"(zstd -d --long={window.bit_length() - 1} FILE) and analyze the output")

    def close(self) -> None:
        self._raw.close()


class _Peekable:
    """A minimal reader that lets us look at the magic bytes of a pipe without losing them."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self._buf = b""

    def peek(self, n: int) -> bytes:
        while len(self._buf) < n:
            more = self._raw.read(n - len(self._buf))
            if not more:
                break
            self._buf += more
        return self._buf[:n]

    def read(self, n: int = -1) -> bytes:
        if self._buf:
            if n is None or n < 0:
                data, self._buf = self._buf + self._raw.read(), b""
                return data
            data, self._buf = self._buf[:n], self._buf[n:]
            if len(data) < n:
                data += self._raw.read(n - len(data)) or b""
            return data
        return self._raw.read(n)

    def readinto(self, buffer: bytearray) -> int:
        n = 0
        if self._buf:
            n = min(len(self._buf), len(buffer))
            buffer[:n], self._buf = self._buf[:n], self._buf[n:]
            if n == len(buffer):
                return n
        # The peeked bytes, then a read for the rest: a first chunk as long as read() gives.
        return n + _read_into(self._raw, memoryview(buffer)[n:] if n else buffer)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if self._raw is not sys.stdin.buffer:
            self._raw.close()

    # GzipFile and friends probe these.
    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False


def iter_chunks(stream: BinaryIO, display: str, chunk_size: int | None = None) -> Iterator[bytes]:
    """Binary chunks; a damaged compressed stream ends with what was recovered plus a warning.
    A plain file or pipe is read into one buffer, given again for every chunk: a chunk is only
    good until the next is asked for (a new 1 MiB object per chunk cost ~0.1 ms of allocation
    and first-touch page faults each)."""
    chunk_size = chunk_size or CHUNK_SIZE  # looked up now: tests read in small chunks
    if isinstance(stream, _Peekable):
        buffer = bytearray(chunk_size)

        def read(size: int) -> bytes | bytearray:
            n = stream.readinto(buffer)
            return buffer if n == size else buffer[:n]
    else:
        # read1 returns what one decompression step produced, so a truncated stream loses at
        # most that step instead of the whole chunk being assembled when the damage is hit.
        read = getattr(stream, "read1", None) or stream.read
    while True:
        try:
            data = read(chunk_size)
        except InputError:
            raise
        except (EOFError, OSError, lzma.LZMAError, ValueError) as exc:
            # Truncated gzip/xz/bz2 or a corrupt zstd frame: keep what was read.
            raise TruncatedInput(f"{display}: compressed stream damaged or truncated ({_short(exc)})") from None
        except Exception as exc:  # zstandard raises its own ZstdError
            raise TruncatedInput(f"{display}: compressed stream damaged or truncated ({_short(exc)})") from None
        if not data:
            return
        yield data


def chunks_in(size: int) -> int:
    """How many chunks iter_chunks gives of a plain file of `size` bytes."""
    return -(-size // CHUNK_SIZE)


class TruncatedInput(Exception):
    """The input ended early; everything before the damage was processed."""


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:120]


def decode(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return text.replace("\x00", "") if "\x00" in text else text


def iter_lines(
    chunks: Iterable[bytes],
    needles: tuple[bytes, ...] = (),
    hot: Callable[[], bool] | None = None,
    full_prefix_lines: int = 0,
    stats: dict | None = None,
    focus: Callable[[], tuple[bytes, ...] | None] | None = None,
    skipper=None,
    census: bool = False,
    raw_only: frozenset[bytes] = frozenset(),
    ahead=None,
    recorder=None,
) -> Iterator[RawLine]:
    """Split binary chunks into lines.

    Without needles every line is yielded. With needles, a line is yielded only when it holds
    one of them, lies within the first `full_prefix_lines`, or `hot()` is true when the scan
    reaches it; the rest are counted, never decoded. Line numbers and offsets stay exact.
    While hot, `focus()` may narrow "every line" down to lines holding one of the needles it
    returns (None: every line); lines passed over then are reported through `skipper.skip(n)`.
    `census`: prefix lines the bulk scan would skip are flagged as census lines. `raw_only`:
    needles that only a line without a level needs (a routine record holding only them is
    passed over where the scanner can tell). `ahead` (scan_ahead.ScanAhead): started when the
    scanner is made, it scans in another process; `recorder`: that process's replay, which
    scans, sends each piece's result and walks none.
    """
    lineno = 0
    offset = 0  # offset in the stream of the first byte not yet passed on (carry's first byte)
    carry = b""
    cut_until_newline = False
    fast = bool(needles)
    stats = stats if stats is not None else {}
    examined = 0
    scanner = None

    try:
        for data in chunks:
            if cut_until_newline:
                nl = data.find(b"\n")
                if nl < 0:
                    offset += len(data)
                    continue
                offset += nl + 1
                data = data[nl + 1 :]
                cut_until_newline = False
            first_nl = data.find(b"\n")
            if first_nl < 0:
                # No complete line yet: keep accumulating, but never beyond the line cap.
                buf = carry + data
                if len(buf) > MAX_LINE_BYTES:
                    lineno += 1
                    examined += 1
                    yield RawLine(lineno, offset, decode(buf[:MAX_LINE_BYTES]) + " …[line cut]")
                    offset += len(buf)
                    carry = b""
                    cut_until_newline = True
                else:
                    carry = buf
                continue
            last_nl = data.rfind(b"\n")
            if carry:
                # The line the chunk boundary cut is joined on its own, so the chunk itself is
                # scanned where it lies (a 1 MiB copy per chunk costs as much as the scan).
                head = carry + data[:first_nl + 1]
                segments = [(head, 0, len(head), offset), (data, first_nl + 1, last_nl + 1, offset + len(carry))]
            else:
                segments = [(data, 0, last_nl + 1, offset)]
            for buf, pos, end, base in segments:
                # Every line of the prefix (all of them without needles), then the bulk scan.
                find = buf.find
                wanted = None  # prefix lines the bulk scan would read too; the rest are census lines
                if census and fast and lineno < full_prefix_lines and pos < end:
                    if scanner is None and not _has_newlines(buf, pos, end, full_prefix_lines - lineno):
                        # A short input: not worth building the scanner for.
                        wanted = _needle_lines(buf, pos, end, needles)
                    else:
                        if scanner is None:
                            scanner = _new_scanner(needles, raw_only, focus, skipper, ahead, recorder)
                        wanted = scanner.prefix_reads(buf, pos, end, full_prefix_lines - lineno)
                while pos < end and not (fast and lineno >= full_prefix_lines):
                    nl = find(b"\n", pos, end)
                    lineno += 1
                    examined += 1
                    if nl - pos > MAX_LINE_BYTES:
                        text = decode(buf[pos:pos + MAX_LINE_BYTES]) + " …[line cut]"
                    else:
                        text = decode(buf[pos:nl])
                    yield RawLine(lineno, base + pos, text, census=wanted is not None and pos not in wanted)
                    pos = nl + 1
                if pos < end:
                    if scanner is None:
                        scanner = _new_scanner(needles, raw_only, focus, skipper, ahead, recorder)
                    if recorder is not None:
                        scanner.starts_for(buf, pos, end, stats)
                        continue
                    # Only the lines holding a needle (or all, while hot) reach Python.
                    yield from scanner.scan_chunk(buf, pos, end, lineno, base, hot, stats)
                    lineno += scanner.last_lines
                    examined += scanner.last_yielded
            carry = data[last_nl + 1:]
            offset = segments[-1][3] + last_nl + 1
        if carry:
            lineno += 1
            examined += 1
            text = decode(carry[:MAX_LINE_BYTES])
            yield RawLine(lineno, offset, text)
            offset += len(carry)
    finally:
        # Also when the chunks end in an exception (a truncated compressed stream).
        stats["lines"] = lineno
        stats["bytes"] = offset
        stats["examined"] = examined


# Smaller pieces (the line a chunk boundary cut, a short prefix) are scanned where they are needed:
# only whole chunks go to the scan-ahead process, so either side's next piece is a chunk.
AHEAD_PIECE_BYTES = 64 << 10


def _new_scanner(needles, raw_only, focus, skipper, ahead, recorder) -> "_LineWalker":
    scanner = make_scanner(needles, raw_only)
    if skipper is not None:
        scanner.focus, scanner.skipper = focus, skipper
    scanner.recorder = recorder
    if ahead is not None:
        ahead.start()  # now: an input shorter than the prefix never forks
        scanner.ahead = ahead
    return scanner


def needle_lines(chunks: Iterable[bytes], needles: tuple[bytes, ...],
                 lines_passed: list[int] | None = None) -> Iterator[RawLine]:
    """Only the lines holding one of `needles`, with exact numbers and offsets: what a re-read
    of a window wants (analyze.py's liveness windows keep the signals of metrics lines). None of
    iter_lines' other reads: no traceback context, no clocks of skipped lines, not blind to the
    users' text (the caller splits, and so masks, each line it gets: a needle in a prompt costs
    one read). A line longer than MAX_LINE_BYTES is its first MAX_LINE_BYTES, cut as iter_lines
    cuts it, and holds a needle only there. A find per needle and line: no scanner to build for
    a window of a few MB. `lines_passed` gets the count of whole lines read, at the end."""
    lineno = 0  # the complete lines passed
    pos = 0  # the stream offset of the next chunk's first byte
    carry, carry_at = b"", 0  # the line a chunk boundary cut, and its stream offset
    cut = False  # carry is an over-long line's kept head; the rest is dropped up to its newline
    for data in chunks:
        if cut:
            nl = data.find(b"\n")
            if nl < 0:
                pos += len(data)
                continue
            line = _needle_line(carry, 0, len(carry), lineno, carry_at, needles, cut=True)
            if line is not None:
                yield line
            lineno += 1
            pos += nl + 1
            data, carry, carry_at, cut = data[nl + 1:], b"", pos, False
        buf = carry + data if carry else data
        base = carry_at  # the stream offset of buf[0]
        pos += len(data)
        last_nl = buf.rfind(b"\n")
        if last_nl >= 0:
            end = last_nl + 1
            find, count = buf.find, buf.count
            at = 0  # lines are counted up to here
            for s in _needle_line_starts(buf, end, needles):
                lineno += count(b"\n", at, s)
                at = s
                e = find(b"\n", s, end)
                yield _needle_line(buf, s, e, lineno, base, (), cut=e - s > MAX_LINE_BYTES)
            lineno += count(b"\n", at, end)
            carry, carry_at = buf[end:], base + end
        else:
            carry = buf
        if len(carry) > MAX_LINE_BYTES:
            carry, cut = carry[:MAX_LINE_BYTES], True
    if carry:
        line = _needle_line(carry, 0, len(carry), lineno, carry_at, needles, cut=cut)
        if line is not None:
            yield line
    if lines_passed is not None:
        lines_passed.append(lineno)


def _needle_line_starts(buf: bytes, end: int, needles: tuple[bytes, ...]) -> list[int]:
    """Sorted starts of the lines of buf[:end] (whole lines) holding a needle where kept."""
    starts: set[int] = set()
    find, rfind = buf.find, buf.rfind
    for needle in needles:
        i = find(needle, 0, end)
        while i >= 0:
            s = rfind(b"\n", 0, i) + 1
            e = find(b"\n", i, end)
            if e - s > MAX_LINE_BYTES and i + len(needle) > s + MAX_LINE_BYTES:
                i = find(needle, i + 1, end)  # beyond the part of an over-long line that is kept
                continue
            starts.add(s)
            i = find(needle, e + 1, end)
    return sorted(starts)


def _needle_line(buf: bytes, s: int, e: int, lineno: int, base: int, needles: tuple[bytes, ...],
                 cut: bool = False) -> RawLine | None:
    """The line buf[s:e] (the `lineno`+1-th), if it holds a needle (none given: it does)."""
    kept = buf[s:min(e, s + MAX_LINE_BYTES)]
    if needles and not any(n in kept for n in needles):
        return None
    return RawLine(lineno + 1, base + s, decode(kept) + " …[line cut]" if cut else decode(kept))


def utf16_encoding(first: bytes) -> str | None:
    """UTF-16 (a Windows shell's `>` redirect): by its BOM, or by NUL bytes in every other place."""
    sample = first[:4096]
    # A BOM alone is not enough (binary junk can start with FF FE): log text in UTF-16 is mostly
    # ASCII, so every other byte is NUL.
    if first.startswith((b"\xff\xfe", b"\xfe\xff")) and sample.count(0) >= 0.25 * len(sample):
        return "utf-16"
    if len(sample) >= 64:
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        if odd > 0.4 * len(sample) / 2 and even < 0.05 * len(sample) / 2:
            return "utf-16-le"
        if even > 0.4 * len(sample) / 2 and odd < 0.05 * len(sample) / 2:
            return "utf-16-be"
    return None


def _transcoded(first: bytes, rest: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    decoder = codecs.getincrementaldecoder(encoding)("replace")
    yield decoder.decode(first).lstrip("\ufeff").encode("utf-8")
    for data in rest:
        yield decoder.decode(data).encode("utf-8")
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail.encode("utf-8")


def normalize_newlines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """UTF-16 becomes UTF-8 and a BOM is dropped; old-Mac CR-only files become LF files; CRLF and
    tqdm's embedded CRs are left to split."""
    it = iter(chunks)
    first = next(it, b"")
    encoding = utf16_encoding(first)
    if encoding is not None:
        it = _transcoded(first, it, encoding)
        first = next(it, b"")
    elif first.startswith(b"\xef\xbb\xbf"):
        first = first[3:]
    cr_only = b"\n" not in first and b"\r" in first
    if first:
        yield first.replace(b"\r", b"\n") if cr_only else first
    for data in it:
        yield data.replace(b"\r", b"\n") if cr_only else data


# -- the bulk scanner ------------------------------------------------------------------------------
#
# Only the lines holding one of the needles (structure, rule prefilter tokens of line rules,
# liveness, version and lifecycle tokens: `analyze.needles_for`) reach Python, plus every line
# while a traceback is open (narrowed to its process when known). A scanner only says where the
# needle lines start: Hyperscan's multi-literal matcher (one SIMD pass for every needle), else a
# numpy table of 2-byte anchor halves (one vectorized lookup per chunk), else one `bytes.find`
# pass per needle. One walker turns those starts into lines with exact numbers, offsets, context
# flags and clocks, so every scanner yields the same lines.

# Lines holding these start a traceback (or are the exception line a region opens with when the
# rest was lost: `ValueError: …` alone); the CONTEXT_LINES before each are read too, because the
# rebuilder takes the record or `Process X:` / `Exception in thread` line before it as context.
CONTEXT_NEEDLES = (b"most recent call", b"terminate called", b"Fatal Python", b"Error", b"Exception", b"Interrupt")
CONTEXT_LINES = 3
DENSE_HIT_BYTES = 64  # hits this close together (bytes per hit) may be every line: counted first
# Re-choose anchors when more than this many lines per chunk were candidates but held no needle.
_RETUNE_FALSE_HITS = 64


class _LineWalker:
    """Yields a chunk's needle lines (and, while `hot()`, every line) with exact line numbers,
    offsets, context flags and clocks. Subclasses only say where the needle lines start."""

    def __init__(self, needles: tuple[bytes, ...]):
        self.needles = needles
        self.last_lines = 0
        self.last_yielded = 0
        self.focus = None
        self.skipper = None
        self.heads: list[int] | None = None  # traceback heads' line starts, when hit_starts knows them
        self.blind_to_user_text: bool | None = None  # no needle can form in a blanked prompt (worked out once)
        self.tail_clock: _TailClock | None = None  # the last timestamp of the chunks scanned so far
        self.bytes_walked = 0  # what the chunks walked so far held: whether lines are long
        self.lines_walked = 0
        self.ahead = None  # scan_ahead.ScanAhead: another process's read_starts, taken instead
        self.recorder = None  # in that process: which pieces to scan, where their results go
        self.pieces = 0  # chunks scanned so far: both processes number them alike

    def hit_starts(self, buf: bytes, begin: int, end: int, stats: dict) -> list[int]:
        """Sorted start offsets of the lines in buf[begin:end] holding a needle."""
        raise NotImplementedError

    def focus_hits(self, buf: bytes, needles: tuple[bytes, ...], begin: int, end: int) -> list[int] | None:
        """Sorted offsets of every focus needle in buf[begin:end] in one pass, or None: the walker
        then finds each needle on its own."""
        return None

    def prefix_reads(self, buf: bytes, begin: int, end: int, lines: int) -> set[int]:
        """The starts of the lines among the first `lines` of buf[begin:end] that the bulk scan
        would read: needle lines and the context lines before a traceback head."""
        stop, find = begin, buf.find
        for _ in range(lines):
            if stop >= end:
                break
            stop = find(b"\n", stop, end) + 1
        part = buf[begin:stop]
        starts = self.starts_for(part, 0, len(part), {})
        wanted = set(starts) | _context_starts(part, starts, 0, self.heads)
        self.heads = None
        return {begin + s for s in wanted}

    def scan_chunk(self, buf: bytes, begin: int, end: int, lineno: int, offset: int, hot,
                   stats) -> Iterator[RawLine]:
        """The lines to read of buf[begin:end] (whole lines; offset: the stream offset of
        buf[0]); sets last_lines (their count) when exhausted."""
        prev_tail = self.tail_clock
        # The chunk's last timestamp is the clock for the next chunk's first read line, if that
        # line has none of its own and none precedes it in its chunk: searched only then.
        self.tail_clock = _TailClock(buf[max(begin, end - TAIL_WINDOW):end], prev_tail)
        starts = self.starts_for(buf, begin, end, stats)
        return self._walk(buf, begin, end, lineno, offset, hot, starts, prev_tail)  # no extra generator hop

    def starts_for(self, buf: bytes, begin: int, end: int, stats: dict) -> list[int]:
        """read_starts(), or what the scan-ahead process found for the same piece (and the
        scanner state it left), or, in that process, read_starts() sent on."""
        ahead, claims = self.ahead, self.recorder
        if ahead is None and claims is None:
            return self.read_starts(buf, begin, end, stats)
        if end - begin < AHEAD_PIECE_BYTES:  # the line a chunk boundary cut, the prefix: here
            if claims is not None:
                self.heads = []
                return []
            return self.read_starts(buf, begin, end, stats)
        piece = self.pieces
        self.pieces += 1
        if ahead is not None:
            record = ahead.take(piece, buf, begin, end)
            if record is not None:
                _, _, starts, heads, candidates, state = record
                self.heads = starts if heads is True else heads
                if candidates:
                    stats["candidates"] = stats.get("candidates", 0) + candidates
                self.set_state(state)
                return starts
            if ahead.stopped is not None:
                self.ahead = None
        if claims is None:
            return self.read_starts(buf, begin, end, stats)
        if not claims.claim(piece):
            self.heads = []
            return []  # the main process scans this one
        from vcrash.scan_ahead import token

        before = stats.get("candidates", 0)
        starts = self.read_starts(buf, begin, end, stats)
        heads = True if self.heads is starts else self.heads
        claims.send((piece, token(buf, begin, end), starts, heads, stats.get("candidates", 0) - before, self.state()))
        return starts

    def state(self):
        """What read_starts changes in this scanner besides heads (marshal-able)."""
        return None

    def set_state(self, state) -> None:
        pass

    def read_starts(self, buf: bytes, begin: int, end: int, stats: dict) -> list[int]:
        """hit_starts(), blind to the prompts and outputs that request log records quote:
        analysis masks them (split/user_text.py), so a line whose every needle lies in one is
        read as a line without needles would be, i.e. not at all."""
        from vcrash.split import user_text  # here: the split package reads this module's RawLine

        if self.blind_to_user_text is None:
            self.blind_to_user_text = _no_needle_holds_a_mask(self.needles, user_text)
        if self.blind_to_user_text and any(buf.find(gate, begin, end) >= 0 for gate in user_text.GATE_BYTES):
            buf = user_text.blanked(buf, begin, end, MAX_LINE_BYTES)
        return self.hit_starts(buf, begin, end, stats)

    def _walk(self, buf: bytes, begin: int, end: int, lineno: int, offset: int, hot, starts: list[int],
              prev_tail: "_TailClock | None") -> Iterator[RawLine]:
        if len(starts) * DENSE_HIT_BYTES >= end - begin and len(starts) == buf.count(b"\n", begin, end):
            context_starts: set[int] = set()  # every line holds a needle: none is only context
        else:
            context_starts = _context_starts(buf, starts, begin, self.heads)
        if context_starts:
            starts = sorted(context_starts.union(starts))
        k, nhits = 0, len(starts)
        pos, li = begin, 0  # the current line's start and its index in the chunk
        next_unread, last_end = begin, begin  # where the line after the last yielded one starts; its end
        focus, skipper = self.focus, self.skipper
        find, rfind = buf.find, buf.rfind
        if self.lines_walked:
            sparse = self.bytes_walked >= SPARSE_LINE_BYTES * self.lines_walked
        else:  # the first chunk: a sample of it
            sample = min(end, begin + _SPARSE_PIECE)
            sparse = sample - begin >= SPARSE_LINE_BYTES * max(1, buf.count(b"\n", begin, sample))
        count = buf.count if not sparse else lambda _nl, start, stop: _sparse_count(buf, start, stop)
        yielded = 0
        next_at: dict[bytes, int] = {}  # focus needle -> its next offset (end: none) from where searched
        # The focus needles' offsets in buf[focus_from:focus_to] (None: found one by one).
        focus_set, focus_list, fi, focus_from, focus_to = None, None, 0, begin, begin
        window = FOCUS_FIRST
        while pos < end:
            if hot is None or not hot():
                while k < nhits and starts[k] < pos:
                    k += 1
                if k >= nhits:
                    self.last_lines = li + count(b"\n", pos, end)
                    self.last_yielded = yielded
                    self.bytes_walked += end - begin
                    self.lines_walked += self.last_lines
                    return
                li += count(b"\n", pos, starts[k])
                pos = starts[k]
            elif focus is not None:
                wanted = focus()
                while k < nhits and starts[k] < pos:
                    k += 1
                if wanted is not None and not (k < nhits and starts[k] == pos):
                    # Something is open, but only in streams these needles identify: the lines
                    # up to the next one holding one of them (or a needle line) only count toward
                    # idle flushing, passed over in bulk.
                    limit = starts[k] if k < nhits else end
                    nearest = limit
                    if focus_list is not None and wanted == focus_set:
                        while fi < len(focus_list) and focus_list[fi] < pos:
                            fi += 1
                    if wanted != focus_set or focus_list is not None and fi >= len(focus_list) and focus_to < end \
                            and pos > focus_from:
                        # A window at a time from here, no further than the next needle line:
                        # bytes are searched about once, however often the focus changes. The
                        # window starts small (the stream's next line is usually near) and
                        # doubles while this focus finds nothing.
                        window = FOCUS_FIRST if wanted != focus_set else min(window * 2, FOCUS_WINDOW)
                        focus_from, focus_to = pos, min(limit, pos + window)
                        focus_set, focus_list, fi = wanted, self.focus_hits(buf, wanted, pos, focus_to), 0
                    if focus_list is not None:
                        hit = focus_list[fi] if fi < len(focus_list) else focus_to
                        if hit < nearest:
                            nearest = hit
                    else:
                        for needle in wanted:
                            i = next_at.get(needle, -1)
                            if i < pos:  # not searched yet, or passed: search once more from here
                                i = find(needle, pos, end)
                                next_at[needle] = i = end if i < 0 else i
                            if i < nearest:
                                nearest = i
                    target = rfind(b"\n", pos, nearest) + 1 if nearest < limit else limit
                    if target > pos:
                        # Idle checks inside the stretch may close regions and narrow the focus:
                        # the loop looks at the target line again with the focus then.
                        lines = count(b"\n", pos, target)
                        skipper.skip(lines)
                        pos, li = target, li + lines
                        continue
            e = find(b"\n", pos, end)
            if e - pos > MAX_LINE_BYTES:
                text = decode(buf[pos:pos + MAX_LINE_BYTES]) + " …[line cut]"
            else:
                text = decode(buf[pos:e])
            clock = None
            # Lines were skipped, so the clock may have moved in them; a line with a timestamp of
            # its own near its start sets the clock itself.
            if pos > next_unread and _STAMP.search(buf, pos, min(e, pos + STAMP_REACH)) is None:
                clock = _clock_before(buf, pos, last_end)
                if clock is None and next_unread == begin and prev_tail is not None:
                    clock = prev_tail.value()  # the last timestamp of the chunks before
            yield RawLine(lineno + li + 1, offset + pos, text, pos in context_starts, clock)
            yielded += 1
            last_end = e
            pos = next_unread = e + 1
            li += 1
        self.last_lines = li
        self.last_yielded = yielded
        self.bytes_walked += end - begin
        self.lines_walked += li


# Lines this long on average or longer: their newlines are counted by finding them (glibc's memchr,
# vectorized) rather than by bytes.count's byte-by-byte loop. On a server log (~150 bytes a line)
# that is 2-3x faster; on 2-byte lines 10x slower, so the lines walked so far decide (the first
# chunk: a sample of it).
SPARSE_LINE_BYTES = 64
_SPARSE_PIECE = 64 << 10  # bytes copied at a time (a bigger copy is a fresh mapping, page faults and all)


def _has_newlines(buf, start: int, stop: int, wanted: int) -> bool:
    """Are there `wanted` newlines in buf[start:stop]? Found one by one up to `wanted` (a few
    hundred), not counted over the whole chunk."""
    find = buf.find
    for _ in range(wanted):
        i = find(b"\n", start, stop)
        if i < 0:
            return False
        start = i + 1
    return True


def _sparse_count(buf, start: int, stop: int) -> int:
    """buf.count(b"\n", start, stop), faster where newlines are far apart: what a replace drops."""
    if stop - start < 4096:
        return buf.count(b"\n", start, stop)
    n = 0
    for i in range(start, stop, _SPARSE_PIECE):
        j = min(i + _SPARSE_PIECE, stop)
        n += j - i - len(buf[i:j].replace(b"\n", b""))
    return n


class _TailClock:
    """The last timestamp-shaped line of a chunk's tail, else of the chunks before it; searched
    on first use (rarely needed: only for a read line with no timestamp before it in its own
    chunk). An unused chain keeps at most TAIL_CHAIN tails: then its newest link is resolved,
    which usually finds a stamp in that tail and lets the older ones go."""

    __slots__ = ("tail", "before", "depth", "_value", "_known")

    def __init__(self, tail: bytes, before: "_TailClock | None"):
        self.tail, self.before, self._value, self._known = tail, before, None, False
        self.depth = 1 if before is None or before._known else before.depth + 1
        if self.depth > TAIL_CHAIN:
            before.value()
            self.depth = 1

    def value(self) -> str | None:
        if not self._known:
            self._value = _clock_before(self.tail, len(self.tail), 0)
            if self._value is None and self.before is not None:
                self._value = self.before.value()
            self._known, self.tail, self.before = True, b"", None
        return self._value


TAIL_CHAIN = 8
FOCUS_WINDOW = 64 << 10
FOCUS_FIRST = 4 << 10


def _needle_lines(buf: bytes, begin: int, end: int, needles: tuple[bytes, ...]) -> set[int]:
    """prefix_reads() for a few lines, without a scanner: their needle and context lines."""
    starts, pos, find = [], begin, buf.find
    while pos < end:
        nl = find(b"\n", pos, end)
        nl = end if nl < 0 else nl
        line = buf[pos:nl]
        if any(n in line for n in needles):
            starts.append(pos)
        pos = nl + 1
    return set(starts) | _context_starts(buf, starts, begin)


def _context_starts(buf: bytes, starts: list[int], begin: int, heads: list[int] | None = None) -> set[int]:
    """The CONTEXT_LINES lines before each traceback head (within the chunk) that are not
    needle lines themselves: the rebuilder takes the record or `Process X:` line before a
    traceback as its context. `heads`: the head lines' starts when the scanner knows them."""
    found: set[int] = set()
    prev_head = -1
    find, rfind = buf.find, buf.rfind
    for s in (heads if heads is not None else starts):
        if heads is None:
            line = buf[s:find(b"\n", s)]
            for needle in CONTEXT_NEEDLES:
                if needle in line:
                    break
            else:
                continue
        p = s
        # Lines before the previous head are in its own context already.
        for _ in range(CONTEXT_LINES):
            if p <= begin:
                break
            i = rfind(b"\n", begin, p - 1)
            p = i + 1 if i >= 0 else begin
            if p <= prev_head:
                break
            found.add(p)
        prev_head = s
    if found:
        found.difference_update(starts)
    return found


# Hit lines per chunk that only the users' text made hits, from which chunks are blanked before
# their scan (and records per chunk below which that stops).
BLANK_FIRST_RECORDS = 16
DENSE_GATE_CHECK = 2000  # hit lines per chunk past which the chunk is searched for gates once first
BLANK_FIRST_BYTES = 64 << 10  # what a chunk must span to decide it


def _no_needle_holds_a_mask(needles: tuple[bytes, ...], user_text) -> bool:
    """Blanked and masked text hold the same needles only if none holds MASK or BLANK."""
    known = _MASK_FREE.get(needles)
    if known is None:
        masks = (user_text.MASK.encode(), bytes((user_text.BLANK,)))
        known = _MASK_FREE.put(needles, not any(m in n for n in (*needles, *CONTEXT_NEEDLES) for m in masks))
    return known


_MASK_FREE: Memo[bool] = Memo(64)


def _starts_of(buf: bytes, ends: list[int], begin: int, end: int) -> list[int]:
    """Line starts for match end offsets (sorted) within buf[begin:end], each newline searched
    only once: a line with many matches, or a very long one, costs one pass."""
    starts: list[int] = []
    line_start, searched = begin, begin
    rfind = buf.rfind
    for t in ends:
        if t <= begin:
            continue
        if t > end:
            break
        nl = rfind(b"\n", searched, t)
        if nl >= 0:
            line_start = nl + 1
        searched = t
        if not starts or starts[-1] != line_start:
            starts.append(line_start)
    return starts


class _FindScanner(_LineWalker):
    """One `bytes.find` pass per needle (no compiled matcher and no numpy)."""

    def hit_starts(self, buf: bytes, begin: int, end: int, stats: dict) -> list[int]:
        hits: list[int] = []
        find = buf.find
        for needle in self.needles:
            i = find(needle, begin, end)
            while i >= 0:
                hits.append(i + len(needle))
                i = find(needle, i + 1, end)
        hits.sort()
        return _starts_of(buf, hits, begin, end)


# Compiled Hyperscan databases by their literals (read-only, so shared by every scanner).
_HS_DATABASES: Memo[object] = Memo(256)


class _HyperScanner(_LineWalker):
    """Every needle at once with Hyperscan's multi-literal matcher (SIMD, near memory speed):
    only lines holding a needle ever reach Python."""

    def __init__(self, needles: tuple[bytes, ...], hyperscan, raw_only: frozenset[bytes] = frozenset()):
        super().__init__(needles)
        # The traceback heads under their own ids where no needle is the same literal (a shorter
        # needle may stand for them); one that is reports both (one callback a head line, not two).
        self.hyperscan = hyperscan
        extra_heads = tuple(h for h in CONTEXT_NEEDLES if h not in needles)
        from vcrash.split import user_text  # here: the split package reads this module's RawLine

        self._user_text = user_text
        # What a match of each id is: 0 a needle, 1 a head only, 2 a needle that is a head, 3 a
        # needle that only a line without a level needs.
        self._hit_kind = tuple(2 if n in CONTEXT_NEEDLES else 3 if n in raw_only else 0 for n in needles) \
            + (1,) * len(extra_heads)
        from vcrash.split.quiet import ROUTINE_SHAPE, routine_record

        self._routine_record, self._routine_shape = routine_record, ROUTINE_SHAPE.fullmatch
        self.db = self._database(tuple(needles) + extra_heads, saved=True)
        self.blind_to_user_text = _no_needle_holds_a_mask(needles, user_text)  # memoized: many scanners a run
        # Blank the users' text before scanning (not after), while request records with needles in
        # it are many: a prompt full of crash words costs a callback per word otherwise.
        self._blank_first = False
        self._gate_db = self._gate_scratch = None  # made when blanking first begins
        self.scratch = hyperscan.Scratch(self.db)  # per scanner: a scratch serves one scan at a time
        self._focus_scratch: Memo[object] = Memo(64)  # focus needles -> their database's scratch here

    def _database(self, literals: tuple[bytes, ...], saved: bool = False):
        """Compiled once per process (liveness windows re-read with the same needles); `saved`:
        the pack's own needles, kept compiled on disk between runs (a focus's pids are not)."""
        db = _HS_DATABASES.get(literals)
        if db is None:
            if saved:
                db = block_database(self.hyperscan, list(literals), literal=True)
            else:
                db = self.hyperscan.Database(mode=self.hyperscan.HS_MODE_BLOCK)
                db.compile(expressions=list(literals), ids=list(range(len(literals))), elements=len(literals),
                           flags=0, literal=True)
            _HS_DATABASES.put(literals, db)
        return db

    def hit_starts(self, buf: bytes, begin: int, end: int, stats: dict) -> list[int]:
        ends: list[int] = []
        head_ends: list[int] = []
        add, add_head, kind = ends.append, head_ends.append, self._hit_kind

        raw_ends: list[int] = []
        add_raw = raw_ends.append

        def on_match(i, _from, to, _flags, _ctx):
            # A head line also holds a needle (the head itself, or a shorter one inside it).
            k = kind[i]
            if k == 3:
                add_raw(to)
                return
            if k != 1:
                add(to)
            if k:
                add_head(to)

        blank_first = self._blank_first
        gates = 0
        if blank_first:
            seen, gates = self._blanked(buf, begin, end)
        else:
            seen = buf
        self.db.scan(seen, match_event_handler=on_match, scratch=self.scratch)
        ends.sort()  # Hyperscan reports by end offset; sorting a sorted list is one pass
        head_ends.sort()
        stats["candidates"] = stats.get("candidates", 0) + len(ends)
        starts = _starts_of(buf, ends, begin, end)
        if raw_ends:
            starts = self._with_unleveled(buf, begin, end, starts, raw_ends)
        # Every hit a head (a run of bare headers): the same lines.
        heads = starts if head_ends == ends else _starts_of(buf, head_ends, begin, end)
        if blank_first:
            if end - begin >= BLANK_FIRST_BYTES:  # not on the line a chunk boundary cut
                self._blank_first = gates >= BLANK_FIRST_RECORDS
        elif self.blind_to_user_text and (starts or heads):
            starts, heads = self._blind_to_user_text(buf, begin, end, starts, heads)
        self.heads = heads
        return starts

    def read_starts(self, buf: bytes, begin: int, end: int, stats: dict) -> list[int]:
        return self.hit_starts(buf, begin, end, stats)  # blind to users' text in its own way

    def state(self):
        return self._blank_first

    def set_state(self, state) -> None:
        self._blank_first = state

    def _with_unleveled(self, buf: bytes, begin: int, end: int, starts: list[int], raw_ends: list[int]) -> list[int]:
        """starts, plus the lines holding only needles that a line without a level needs,
        unless the line is a routine record (split/quiet.py): nothing reads those."""
        raw_ends.sort()
        known = set(starts)
        lines = [s for s in _starts_of(buf, raw_ends, begin, end) if s not in known]
        if not lines:
            return starts
        added = []
        routine, shape, find = self._routine_record, self._routine_shape, buf.find
        for s in lines:
            e = find(b"\n", s, end)
            e = end if e < 0 else e
            if shape(buf, s, e) is not None:
                continue  # the common routine record (its other needles, if any, made it a start)
            if e - s > MAX_LINE_BYTES or not routine(decode(buf[s:e])):
                added.append(s)
        return sorted(known.union(added)) if added else starts

    def _blanked(self, buf: bytes, begin: int, end: int) -> tuple[bytes | bytearray, int]:
        """user_text.blanked(buf), and how many gates the chunk holds."""
        user_text = self._user_text
        gates: list[int] = []
        add, length = gates.append, user_text.GATE_LENGTH
        if self._gate_db is None:
            self._gate_db = self._database(user_text.GATE_BYTES, saved=True)
            self._gate_scratch = self.hyperscan.Scratch(self._gate_db)
        self._gate_db.scan(buf, match_event_handler=lambda _i, _f, to, _fl, _c: add(to - length),
                           scratch=self._gate_scratch)
        gates.sort()
        return user_text.blanked(buf, begin, end, MAX_LINE_BYTES, gates), len(gates)

    def _blind_to_user_text(self, buf: bytes, begin: int, end: int, starts: list[int],
                            heads: list[int]) -> tuple[list[int], list[int]]:
        """The starts and heads a scan of user_text.blanked(buf) would give: each hit line that
        holds a record's gate is scanned again alone, blanked (only those lines pay)."""
        user_text = self._user_text
        gates = user_text.GATE_BYTES
        find = buf.find
        if len(starts) + len(heads) > DENSE_GATE_CHECK and all(find(g, begin, end) < 0 for g in gates):
            return starts, heads  # a crowd of hit lines: one search of the chunk for the gates first
        hit_lines = set(starts).union(heads) if heads is not starts else set(starts)
        drop_start: set[int] = set()
        drop_head: set[int] = set()
        kind = self._hit_kind
        prompt_gate, output_gate = gates
        for s in hit_lines:
            e = find(b"\n", s, end)
            e = end if e < 0 else e
            if find(b"t: ", s, e) < 0 or find(prompt_gate, s, e) < 0 and find(output_gate, s, e) < 0:
                continue  # (both gates end in "t: ")
            line = buf[s:e]
            seen = user_text.blanked(line, 0, len(line), MAX_LINE_BYTES)
            if seen is line:
                continue
            kinds: set[int] = set()
            self.db.scan(seen, match_event_handler=lambda i, _f, _t, _fl, _c: kinds.add(kind[i]), scratch=self.scratch)
            if not kinds & {0, 2} and not (3 in kinds and not self._routine_record(decode(line))):
                drop_start.add(s)
            if not kinds & {1, 2}:
                drop_head.add(s)
        if end - begin >= BLANK_FIRST_BYTES:
            self._blank_first = len(drop_start) >= BLANK_FIRST_RECORDS
        if drop_start:
            starts = [s for s in starts if s not in drop_start]
        if drop_head:
            heads = [h for h in heads if h not in drop_head]
        return starts, heads

    def focus_hits(self, buf: bytes, needles: tuple[bytes, ...], begin: int, end: int) -> list[int]:
        if (end - begin) * len(needles) <= FOCUS_FIND_BYTES and needles not in _HS_DATABASES:
            # A small window of a new focus (a stream's next line is usually near): a find per
            # needle costs microseconds, compiling a database for this log's pids ~0.25 ms.
            return _found_in(buf, needles, begin, end)
        db = self._database(needles)
        scratch = self._focus_scratch.get(needles)
        if scratch is None:
            scratch = self._focus_scratch.put(needles, self.hyperscan.Scratch(db))
        found: list[int] = []
        add, lengths = found.append, [len(n) - begin for n in needles]

        def on_match(i, _from, to, _flags, _ctx):
            add(to - lengths[i])

        db.scan(buf[begin:end], match_event_handler=on_match, scratch=scratch)
        found.sort()
        return found


def _found_in(buf: bytes, needles: tuple[bytes, ...], begin: int, end: int) -> list[int]:
    """Sorted offsets of every occurrence of the needles in buf[begin:end] (ends inside)."""
    found: list[int] = []
    add, find = found.append, buf.find
    for needle in needles:
        i = find(needle, begin, end)
        while i >= 0:
            add(i)
            i = find(needle, i + 1, end)
    found.sort()
    return found


# Window bytes times needles below which a focus window is searched with `bytes.find`.
FOCUS_FIND_BYTES = 64 << 10


class _PairScanner(_LineWalker):
    """Candidate lines for a set of needles in one table lookup per 2 bytes (needs numpy)."""

    def __init__(self, needles: tuple[bytes, ...], np):
        super().__init__(needles)
        self.np = np
        self.table = None
        self.retunes = 0

    def _tune(self, buf: bytes, end: int) -> None:
        np = self.np
        n = end - (end & 1)
        even = np.frombuffer(buf, dtype="<u2", count=n // 2)
        odd = np.frombuffer(buf, dtype="<u2", offset=1, count=(end - 1) // 2)
        freq = np.bincount(even, minlength=65536) + np.bincount(odd, minlength=65536)
        table = np.zeros(65536, dtype=np.bool_)
        grams4, grams3 = set(), set()
        for needle in self.needles:
            width = 4 if len(needle) >= 4 else 3
            best = None
            for i in range(len(needle) - width + 1):
                a = needle[i] | (needle[i + 1] << 8)
                b = needle[i + 1] | (needle[i + 2] << 8)
                score = int(freq[a]) + int(freq[b])
                if best is None or score < best[0]:
                    best = (score, a, b, needle[i:i + width])
            table[best[1]] = True
            table[best[2]] = True
            gram = int.from_bytes(best[3], "little")
            (grams4 if width == 4 else grams3).add(gram)
        self.table = table
        self.grams4 = np.zeros(1 << 20, dtype=np.bool_) if grams4 else None
        self.grams3 = np.zeros(1 << 20, dtype=np.bool_) if grams3 else None
        for grams, bits in ((grams4, self.grams4), (grams3, self.grams3)):
            if grams:
                bits[self._hash(np.array(sorted(grams), dtype=np.uint32))] = True

    def _hash(self, values):
        """A 20-bit multiplicative hash of 32-bit words: set membership without a sort."""
        np = self.np
        return (values * np.uint32(2654435761)) >> np.uint32(12)

    def _confirm(self, arr, cand):
        """Candidate even offsets whose anchor 4-gram (3-gram) really starts at p or p - 1."""
        np = self.np
        last = len(arr) - 1
        p = cand * 2
        b0 = arr[p].astype(np.uint32)
        b1 = arr[p + 1].astype(np.uint32)
        b2 = arr[np.minimum(p + 2, last)].astype(np.uint32)
        b3 = arr[np.minimum(p + 3, last)].astype(np.uint32)
        bm = arr[np.maximum(p - 1, 0)].astype(np.uint32)
        at_p3 = b0 | (b1 << 8) | (b2 << 16)
        at_m3 = bm | (b0 << 8) | (b1 << 16)
        ok = np.zeros(len(p), dtype=np.bool_)
        h = self._hash
        if self.grams4 is not None:
            ok |= self.grams4.take(h(at_p3 | (b3 << 24)))
            ok |= self.grams4.take(h(at_m3 | (b2 << 24))) & (p > 0)
        if self.grams3 is not None:
            ok |= self.grams3.take(h(at_p3))
            ok |= self.grams3.take(h(at_m3)) & (p > 0)
        return p[ok]

    def hit_starts(self, buf: bytes, begin: int, end: int, stats: dict) -> list[int]:
        np = self.np
        arr = np.frombuffer(buf, dtype=np.uint8, count=end)
        nl = np.flatnonzero(arr == 10)  # buf[end - 1] is a newline, so the last entry is end - 1
        if self.table is None:
            self._tune(buf, end)
        even = np.frombuffer(buf, dtype="<u2", count=end // 2)
        cand = np.flatnonzero(self.table.take(even))
        starts: list[int] = []
        if not cand.size:
            return starts
        pos = self._confirm(arr, cand)
        pos = pos[pos >= begin]
        line_idx = np.unique(np.searchsorted(nl, pos)) if pos.size else pos
        needles = self.needles
        false_hits = 0
        for li in line_idx.tolist():
            s = int(nl[li - 1]) + 1 if li else 0
            line = buf[s:int(nl[li])]
            for needle in needles:
                if needle in line:
                    starts.append(s)
                    break
            else:
                false_hits += 1
        if (false_hits > _RETUNE_FALSE_HITS or cand.size > 8 * max(len(line_idx), 1) + 4096) \
                and self.retunes < 16:
            self.retunes += 1
            self._tune(buf, end)
        stats["false_hits"] = stats.get("false_hits", 0) + false_hits
        stats["candidates"] = stats.get("candidates", 0) + int(cand.size)
        return starts


# The shapes of the timestamps the splitter reads (vLLM/ISO, syslog, c10); a skipped stretch is
# searched back this far for the last one.
_STAMP = re.compile(rb"\d\d-\d\d[ T]\d\d:\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|[IWEF]\d{3,4} \d\d:\d\d:\d\d")
CLOCK_NEAR_LINES = 8
_TIME_OF_DAY = rb"[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"  # how every _STAMP ends
_STAMP_AT_END = re.compile(rb"(?:" + _STAMP.pattern + rb")$")  # with endpos: a stamp ending right there
STAMP_MAX_LEN = 16
STAMP_REACH = 160  # a line's own timestamp lies within its first bytes (behind tags and prefixes)
TAIL_WINDOW = 64 << 10


def _clock_before(buf: bytes, s: int, not_before: int) -> str | None:
    """The text of the last line with a timestamp's shape in buf[not_before:s]: a few lines
    back one by one (the usual case), then one search over the stretch (uvicorn access lines
    carry no timestamp, so the last one can be far back)."""
    end = s - 1  # the newline that ends the line before
    for _ in range(CLOCK_NEAR_LINES):
        if end <= not_before:
            return None
        start = max(buf.rfind(b"\n", not_before, end) + 1, not_before)
        if _STAMP.search(buf, start, end) is not None:
            return decode(buf[start:end])
        end = start - 1
    # Windows growing backwards: the cost follows the distance to the last stamp, not the stretch.
    hi, width = end, 1 << 12
    while hi > not_before:
        lo = max(not_before, hi - width)
        last = _last_stamp_end(buf, lo, hi)
        if last is not None:
            # Stamps never span lines: the line the last one ends in is the line it lies in.
            start = max(buf.rfind(b"\n", not_before, last - 1) + 1, not_before)
            stop = buf.find(b"\n", last, s)
            return decode(buf[start:stop if stop >= 0 else s])
        if lo == not_before:
            break
        hi, width = lo + 32, width * 4  # overlap a stamp's length: one cut at the edge is found next
    return None


def _last_stamp_end(buf: bytes, lo: int, hi: int) -> int | None:
    """Where the last timestamp-shaped text in buf[lo:hi] ends (Hyperscan: ~40x faster than
    the re module over access-log stretches without stamps)."""
    scan = _stamp_scan()
    if scan is None:
        last = None
        for last in _STAMP.finditer(buf, lo, hi):
            pass
        return last.end() if last is not None else None
    ends: list[int] = []
    scan(buf[lo:hi], ends.append)
    # Every stamp ends in HH:MM:SS: the latest such end that closes a whole stamp is the answer.
    for end in sorted(ends, reverse=True):
        if _STAMP_AT_END.search(buf, max(lo, lo + end - STAMP_MAX_LEN), lo + end) is not None:
            return lo + end
    return None


_STAMP_LOCAL = threading.local()  # a Hyperscan scratch serves one scan at a time


def _stamp_scan():
    """A function scanning bytes for _STAMP and passing each match's end on, or None."""
    if os.environ.get("VCRASH_SCANNER", "") not in ("", "hyperscan"):
        return None
    scan = getattr(_STAMP_LOCAL, "scan", False)
    if scan is False:
        scan = None
        try:
            import hyperscan
        except ImportError:
            hyperscan = None
        if hyperscan is not None:
            # Only the time of day: the whole stamp compiles 40x slower (~20 ms a process).
            db = _HS_DATABASES.get(_TIME_OF_DAY)
            if db is None:
                db = _HS_DATABASES.put(_TIME_OF_DAY, block_database(hyperscan, [_TIME_OF_DAY]))
            scratch = hyperscan.Scratch(db)

            def scan(data: bytes, found: Callable[[int], None]) -> None:
                db.scan(data, match_event_handler=lambda _i, _f, to, _fl, _c: found(to), scratch=scratch)
        _STAMP_LOCAL.scan = scan
    return scan


def make_scanner(needles: tuple[bytes, ...], raw_only: frozenset[bytes] = frozenset()) -> _LineWalker:
    """Hyperscan where it is installed, else numpy's pair table (every needle needs a 3-byte
    anchor), else one find() pass per needle. VCRASH_SCANNER=hyperscan|pairs|find picks one."""
    choice = os.environ.get("VCRASH_SCANNER", "")
    if choice in ("", "hyperscan"):
        try:
            import hyperscan
        except ImportError:
            hyperscan = None
        if hyperscan is not None:
            return _HyperScanner(needles, hyperscan, raw_only)
    if choice in ("", "hyperscan", "pairs") and not any(len(n) < 3 for n in needles):
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy comes with pandas
            np = None
        if np is not None:
            return _PairScanner(needles, np)
    return _FindScanner(needles)

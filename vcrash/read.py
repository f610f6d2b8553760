"""Stage 1, read: inputs (files, dirs, globs, stdin, compressed) -> raw lines with positions.

Nothing here loads a whole file: input is consumed in binary chunks, decoded leniently, and
split into lines. The fast path (`iter_lines` with needles) skips routine lines in bulk: it
searches each chunk for a few byte needles and only yields the lines that contain one, unless
the caller says something is open (`hot()`), in which case every line is yielded.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import lzma
import os
import stat
import sys
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterable, Iterator

CHUNK_SIZE = 1 << 20
# A longer line is cut: the rest is skipped up to the next newline (memory stays bounded).
MAX_LINE_BYTES = 256 * 1024
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".gz", ".zst", ".bz2", ".xz", ".jsonl", ".json")


class InputError(Exception):
    """An input that cannot be read; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class Source:
    path: str  # filesystem path, or "-" for stdin
    display: str  # the name used in reports

    @property
    def is_stdin(self) -> bool:
        return self.path == "-"


@dataclass(slots=True)
class RawLine:
    lineno: int  # 1-based line of the raw input
    offset: int  # byte offset of the line start in the decompressed stream
    text: str


def expand_inputs(args: Iterable[str]) -> list[Source]:
    """Files, directories (recursively, log-like files only), globs and '-' -> sources."""
    sources: list[Source] = []
    seen: set[str] = set()

    def add(path: str) -> None:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            sources.append(Source(path, path))

    for arg in args:
        if arg == "-":
            sources.append(Source("-", "<stdin>"))
            continue
        if os.path.isdir(arg):
            found = _walk_dir(arg)
            for path in found:
                add(path)
            continue
        if os.path.exists(arg) or os.path.islink(arg):
            add(arg)
            continue
        if glob.has_magic(arg):
            matches = sorted(glob.glob(arg, recursive=True))
            if not matches:
                raise InputError(f"no file matches {arg!r}")
            for path in matches:
                if os.path.isdir(path):
                    for inner in _walk_dir(path):
                        add(inner)
                else:
                    add(path)
            continue
        raise InputError(f"no such file or directory: {arg}")
    return sources


def _walk_dir(root: str) -> list[str]:
    # followlinks=False: a symlink loop cannot make this walk forever.
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
        dirnames.sort()
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            if name.endswith(LOG_SUFFIXES) or "." not in name:
                path = os.path.join(dirpath, name)
                # Only regular files: a FIFO with no writer would block forever, and a device,
                # socket or dangling symlink is not a log.
                try:
                    if not stat.S_ISREG(os.stat(path).st_mode):
                        continue
                except OSError:
                    continue
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
    else:
        try:
            st = os.stat(source.path)
            if stat.S_ISDIR(st.st_mode):
                raise InputError(f"{source.display}: is a directory")
            raw = open(source.path, "rb")
        except InputError:
            raise
        except OSError as exc:
            raise InputError(f"cannot read {source.display}: {exc.strerror or exc}") from None
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
    peekable = _Peekable(raw)
    kind = detect_compression(peekable.peek(6))
    if kind == "gzip":
        stream: BinaryIO = gzip.GzipFile(fileobj=peekable)  # type: ignore[arg-type]
    elif kind == "bz2":
        stream = bz2.BZ2File(peekable)  # type: ignore[arg-type]
    elif kind == "xz":
        stream = lzma.LZMAFile(peekable)  # type: ignore[arg-type]
    elif kind == "zstd":
        import zstandard

        stream = zstandard.ZstdDecompressor().stream_reader(peekable, read_across_frames=True)  # type: ignore[assignment]
    else:
        stream = peekable  # type: ignore[assignment]
    return stream, kind, size


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


def iter_chunks(stream: BinaryIO, display: str, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """Binary chunks; a damaged compressed stream ends with what was recovered plus a warning."""
    # read1 returns what one decompression step produced, so a truncated stream loses at most
    # that step instead of the whole chunk being assembled when the damage is hit.
    read = getattr(stream, "read1", None) or stream.read
    while True:
        try:
            data = read(chunk_size)
        except (EOFError, OSError, lzma.LZMAError, ValueError) as exc:
            # Truncated gzip/xz/bz2 or a corrupt zstd frame: keep what was read.
            raise TruncatedInput(f"{display}: compressed stream damaged or truncated ({_short(exc)})") from None
        except Exception as exc:  # zstandard raises its own ZstdError
            raise TruncatedInput(f"{display}: compressed stream damaged or truncated ({_short(exc)})") from None
        if not data:
            return
        yield data


class TruncatedInput(Exception):
    """The input ended early; everything before the damage was processed."""


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:120]


def decode(data: bytes) -> str:
    return data.decode("utf-8", "replace").replace("\x00", "")


def iter_lines(
    chunks: Iterable[bytes],
    needles: tuple[bytes, ...] = (),
    hot: Callable[[], bool] | None = None,
    full_prefix_lines: int = 0,
    stats: dict | None = None,
) -> Iterator[RawLine]:
    """Split binary chunks into lines.

    Without needles every line is yielded. With needles, a line is yielded only when it holds
    one of them, lies within the first `full_prefix_lines`, or `hot()` is true when the scan
    reaches it; the rest are counted, never decoded. Line numbers and offsets stay exact.
    """
    lineno = 0
    offset = 0  # offset of buf[0] in the stream
    carry = b""
    cut_until_newline = False
    fast = bool(needles)
    stats = stats if stats is not None else {}
    examined = 0
    for data in chunks:
        if cut_until_newline:
            nl = data.find(b"\n")
            if nl < 0:
                offset += len(data)
                continue
            offset += nl + 1
            data = data[nl + 1 :]
            cut_until_newline = False
        buf = carry + data if carry else data
        last_nl = buf.rfind(b"\n")
        if last_nl < 0:
            # No complete line yet: keep accumulating, but never beyond the line cap.
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
        carry = buf[last_nl + 1 :]
        end = last_nl + 1
        pos = 0
        if fast and lineno >= full_prefix_lines:
            hits = _needle_hits(buf, end, needles)
        else:
            hits = None
        hit_index = 0
        while pos < end:
            want_all = (
                hits is None
                or lineno < full_prefix_lines
                or (hot is not None and hot())
            )
            if not want_all:
                # Jump to the next line holding a needle.
                while hit_index < len(hits) and hits[hit_index] < pos:
                    hit_index += 1
                if hit_index >= len(hits):
                    lineno += buf.count(b"\n", pos, end)
                    pos = end
                    break
                start = buf.rfind(b"\n", pos, hits[hit_index]) + 1
                if start > pos:
                    lineno += buf.count(b"\n", pos, start)
                    pos = start
            nl = buf.find(b"\n", pos, end)
            line = buf[pos:nl]
            lineno += 1
            examined += 1
            if len(line) > MAX_LINE_BYTES:
                text = decode(line[:MAX_LINE_BYTES]) + " …[line cut]"
            else:
                text = decode(line)
            yield RawLine(lineno, offset + pos, text)
            pos = nl + 1
        offset += end
    if carry:
        lineno += 1
        examined += 1
        text = decode(carry[:MAX_LINE_BYTES])
        yield RawLine(lineno, offset, text)
        offset += len(carry)
    stats["lines"] = lineno
    stats["bytes"] = offset
    stats["examined"] = examined


def normalize_newlines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Old-Mac CR-only files become LF files; CRLF and tqdm's embedded CRs are left to split."""
    it = iter(chunks)
    first = next(it, b"")
    cr_only = b"\n" not in first and b"\r" in first
    if first:
        yield first.replace(b"\r", b"\n") if cr_only else first
    for data in it:
        yield data.replace(b"\r", b"\n") if cr_only else data


def _needle_hits(buf: bytes, end: int, needles: tuple[bytes, ...]) -> list[int]:
    hits: list[int] = []
    for needle in needles:
        find = buf.find
        i = find(needle, 0, end)
        while i >= 0:
            hits.append(i)
            i = find(needle, i + 1, end)
    hits.sort()
    return hits

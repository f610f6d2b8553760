"""Inputs named by URL (`s3://`, `gs://`, `http(s)://`, any fsspec protocol), read through fsspec.

fsspec and the protocol's package (s3fs, gcsfs, aiohttp) are optional: they are imported only
when a URL is given, and a missing one is a one-line error naming the extra to install.
Credentials come from each filesystem's usual environment and config files; vcrash never takes
them as options, and every name or message that can reach a report or stderr goes through
`public()` / `scrub()` first (userinfo and query strings carry secrets: `user:pass@`, presigned
`?X-Amz-Signature=`).

A prefix is listed in two steps so that a large one can be listed by many machines: `plan()`
makes one request at the prefix itself and returns the objects found there plus one `ListJob`
per sub-folder; `run_list_job()` lists one sub-folder recursively and runs anywhere (a Dask
worker, or here for the local engine). Whether an object is a log is decided by its first bytes
when it is scanned (`sniff()`), not while listing, so a listing stays one request per page.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from typing import BinaryIO

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")
_QUERY = re.compile(r"(://[^\s?#]*)[?#][^\s'\"]*")
# Environment variables whose values are secrets wherever they appear in a message.
_SECRET_ENV = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|ACCESS_KEY|SESSION|API_KEY|PRIVATE", re.I)
_MIN_SECRET_LEN = 6
BLOCK_SIZE = 8 << 20  # bytes fetched per ranged request while streaming an object
PACKAGE_FOR = {"s3": "vcrash[s3]", "s3a": "vcrash[s3]", "gs": "vcrash[gcs]", "gcs": "vcrash[gcs]",
               "http": "vcrash[dask] (aiohttp)", "https": "vcrash[dask] (aiohttp)"}


class RemoteError(Exception):
    """A URL input that cannot be listed or opened; the message is one scrubbed line."""


def is_url(arg: str) -> bool:
    return bool(_URL.match(arg))


def protocol(url: str) -> str:
    m = _URL.match(url)
    return m.group(1).lower() if m else "file"


def local_path(url: str) -> str | None:
    """The local path a `file://` URL names (read like any local path); None for other URLs."""
    if protocol(url) != "file":
        return None
    rest = url[len("file://"):]
    return rest[len("localhost"):] if rest.startswith("localhost/") else rest


def public(url: str) -> str:
    """The URL as shown in reports: without userinfo, and a query string reduced to `?…`."""
    url = _USERINFO.sub("", url)
    return _QUERY.sub(lambda m: m.group(1) + "?…", url)


def scrub(text: str) -> str:
    """A message with URL secrets and the values of credential variables removed."""
    text = public(text)
    for name, value in os.environ.items():
        if _SECRET_ENV.search(name) and len(value) >= _MIN_SECRET_LEN and value in text:
            text = text.replace(value, "<redacted>")
    return text


def _first_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return scrub(f"{type(exc).__name__}: {msg[0]}" if msg else type(exc).__name__)


def filesystem(url: str):
    """(fsspec filesystem, path inside it) for a URL; a missing package is a RemoteError."""
    try:
        import fsspec
    except ImportError:
        raise RemoteError(f"reading {public(url)} needs fsspec: pip install 'vcrash[dask]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError:
        extra = PACKAGE_FOR.get(protocol(url), "the fsspec package for " + protocol(url) + "://")
        raise RemoteError(f"reading {protocol(url)}:// needs {extra}: pip install '{extra.split()[0]}'") from None
    except (ValueError, TypeError) as exc:
        raise RemoteError(f"{public(url)}: {_first_line(exc)}") from None


# --------------------------------------------------------------------------- listing


@dataclass(frozen=True)
class Found:
    """An object a listing found: its URL (for opening) and its public name (for reports)."""

    url: str
    display: str


@dataclass(frozen=True)
class ListJob:
    """List one sub-folder of a prefix recursively (picklable: it runs on a worker)."""

    folder_url: str  # the sub-folder, with its protocol
    base: str  # the prefix path the user gave (globs: the part before the first wildcard)
    pattern: str | None  # glob regex over paths inside the filesystem, or None: every object
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


def _has_magic(path: str) -> bool:
    return any(ch in path for ch in "*?[")


def _glob_base(path: str) -> str:
    head = []
    for part in path.split("/"):
        if _has_magic(part):
            break
        head.append(part)
    return "/".join(head)


def _reason(path: str, base: str, job: ListJob) -> str | None:
    """Why a listed object is not read (None: read it); the same rules as a local walk."""
    name = path.rsplit("/", 1)[-1]
    rel = path[len(base):].lstrip("/") if path.startswith(base) else path
    for pat in job.exclude:
        if fnmatch.fnmatchcase(rel, pat) or fnmatch.fnmatchcase(name, pat):
            return f"excluded by --exclude {pat}"
    included = any(fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p) for p in job.include)
    if job.include and not included:
        return "not matched by --include"
    if name.startswith(".") and not included:
        return "hidden file"
    return None


def _keep(fs, path: str, job: ListJob, found: list[Found], skipped: list[tuple[str, str]]) -> None:
    if job.pattern is not None and not re.match(job.pattern, path):
        return
    url = fs.unstrip_protocol(path) if not is_url(path) else path
    display = public(url)
    why = _reason(path, job.base, job)
    if why:
        skipped.append((display, why))
    else:
        found.append(Found(url, display))


def run_list_job(job: ListJob) -> tuple[list[Found], list[tuple[str, str]]]:
    """Every object under one sub-folder: (objects to read, (name, reason) of those passed over)."""
    fs, folder = filesystem(job.folder_url)
    found: list[Found] = []
    skipped: list[tuple[str, str]] = []
    try:
        paths = fs.find(folder)
    except Exception as exc:  # one unreadable sub-folder is a skipped entry, as in a local walk
        return [], [(public(job.folder_url), f"unreadable folder: {_first_line(exc)}")]
    for path in sorted(paths):
        _keep(fs, path, job, found, skipped)
    return found, skipped


def plan(url: str, include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()
         ) -> tuple[list[Found], list[ListJob], list[tuple[str, str]], bool]:
    """One request at `url`: (objects found there, sub-folders to list, skipped, named_object).
    `named_object` is true when the URL names one object (read as named, never sniffed)."""
    fs, path = filesystem(url)
    magic = _has_magic(path) and protocol(url) not in ("http", "https")
    base = _glob_base(path) if magic else path.rstrip("/")
    job = ListJob(url, base, None, include, exclude)
    if magic:
        from fsspec.utils import glob_translate

        pattern = glob_translate(path)
        job = ListJob(url, base, getattr(pattern, "pattern", pattern), include, exclude)
    try:
        if not magic and not path.endswith("/"):
            info = fs.info(path)
            if info.get("type") != "directory":
                return [Found(url, public(url))], [], [], True
        entries = fs.ls(base, detail=True)
    except FileNotFoundError:
        raise RemoteError(f"no such object or prefix: {public(url)}") from None
    except RemoteError:
        raise
    except Exception as exc:
        raise RemoteError(f"cannot list {public(url)}: {_first_line(exc)}") from None
    found: list[Found] = []
    skipped: list[tuple[str, str]] = []
    jobs: list[ListJob] = []
    for entry in sorted(entries, key=lambda e: e["name"]):
        name = entry["name"].rstrip("/")
        if name == base:
            continue
        if entry.get("type") == "directory":
            jobs.append(ListJob(fs.unstrip_protocol(name), job.base, job.pattern, include, exclude))
        else:
            _keep(fs, name, job, found, skipped)
    if magic and not found and not jobs:
        raise RemoteError(f"no object matches {public(url)}")
    return found, jobs, skipped, False


# --------------------------------------------------------------------------- reading


class _Reader:
    """An fsspec file whose failures are OSErrors with a scrubbed one-line message."""

    def __init__(self, raw, display: str):
        self._raw = raw
        self._display = display

    def read(self, n: int = -1) -> bytes:
        try:
            return self._raw.read(n)
        except Exception as exc:
            raise OSError(f"{_first_line(exc)}") from None

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._raw.seek(pos, whence)

    def close(self) -> None:
        try:
            self._raw.close()
        except Exception:
            pass


def open_url(url: str, display: str) -> tuple[BinaryIO, int | None]:
    """Open an object for streaming: (reader, size or None). Errors are one scrubbed line."""
    try:
        fs, path = filesystem(url)
        raw = fs.open(path, "rb", block_size=BLOCK_SIZE, cache_type="readahead")
    except RemoteError as exc:
        from vcrash.read import InputError

        raise InputError(str(exc)) from None
    except FileNotFoundError:
        from vcrash.read import InputError

        raise InputError(f"cannot read {display}: no such object") from None
    except Exception as exc:
        from vcrash.read import InputError

        raise InputError(f"cannot read {display}: {_first_line(exc)}") from None
    size = getattr(raw, "size", None)
    return _Reader(raw, display), size if isinstance(size, int) else None  # type: ignore[return-value]


SNIFF_BYTES = 1024


def sniff(url: str) -> str | None:
    """Why a listed object is not a log (binary content), or None. A read error is None: opening
    it again reports it as an unreadable row."""
    from vcrash.read import detect_compression, looks_like_text, utf16_encoding

    try:
        fs, path = filesystem(url)
        head = fs.cat_file(path, start=0, end=SNIFF_BYTES)
    except Exception:
        return None
    if not head or detect_compression(head) or utf16_encoding(head):
        return None
    return None if looks_like_text(head) else "binary content (not text or a known compression)"

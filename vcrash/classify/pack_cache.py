"""The bundled rule files' parsed TOML, kept in the cache folder between runs.

Parsing the pack's ~80 TOML files is ~20 ms of every run's start-up (a 1-line log takes ~0.16 s
in all), paid again by every scan worker. The tables are plain data: one marshal file holds them,
named by a digest of every file's name and bytes (and the Python version, whose marshal format
it is), so an edited, added or removed rule never reads a stale copy. VCRASH_CACHE_DIR moves the
folder, VCRASH_NO_CACHE=1 turns it off (vcrash/cache.py); any failure only costs the parse.
"""

from __future__ import annotations

import hashlib
import marshal
import sys
from pathlib import Path

from vcrash import cache

MAX_SAVED = 4  # packs kept (a source checkout's edits each make one)


def cache_path(blobs: list[tuple[str, bytes]]) -> Path | None:
    folder = cache.cache_dir()
    if folder is None:
        return None
    h = hashlib.sha256(repr(sys.version_info[:2]).encode())
    for name, data in blobs:
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return folder / f"pack-{h.hexdigest()[:32]}.marshal"


def load(path: Path | None, names: list[str]) -> dict[str, dict] | None:
    """The saved tables by file name, when the file holds one for every name."""
    if path is None:
        return None
    try:
        tables = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(tables, dict) or any(not isinstance(tables.get(n), dict) for n in names):
        return None
    return tables


def save(path: Path | None, tables: dict[str, dict]) -> None:
    if path is None:
        return
    try:
        data = marshal.dumps(tables)
    except ValueError:  # a TOML date or time: not marshal's
        return
    cache.save(path, data, keep=MAX_SAVED)

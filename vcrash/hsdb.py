"""Hyperscan databases for the pack's fixed needle sets, kept compiled on disk between runs.

Every run that reads a log of a few MB or more compiles the same databases (the bulk scanner's
needles, the literal gates of the rules and the observer): ~5 ms of a 20 MB log's ~75 ms, paid
again by every process. A database serializes to a few tens of KB, and loading one takes ~10 us.
The file name is a digest of the expressions, their flags, the Hyperscan version and the
machine, so a changed pack, a new Hyperscan or another CPU kind never reads a stale one; a file
that does not load is compiled again and rewritten. Needle sets made from one log (the focus on
its open streams' pids) are never saved. VCRASH_CACHE_DIR moves the folder; VCRASH_NO_CACHE=1
turns it off (vcrash/cache.py). Any failure to read or write it only costs the compile.
"""

from __future__ import annotations

import os
from pathlib import Path

from vcrash.cache import cache_dir, save


def block_database(hyperscan, expressions: list[bytes], flags: int = 0, literal: bool = False):
    """A block-mode database matching `expressions` (ids 0..n-1), loaded from the cache folder
    when an earlier run saved it, else compiled (and saved)."""
    folder = cache_dir()
    path = None
    if folder is not None:
        import hashlib  # here: a small log never builds a database, and start-up is paid by every run

        key = hashlib.sha256(repr((getattr(hyperscan, "__version__", ""), _machine(), expressions, flags,
                                   literal)).encode()).hexdigest()[:32]
        path = folder / f"hs-{key}.db"
        try:
            return hyperscan.loadb(path.read_bytes(), mode=hyperscan.HS_MODE_BLOCK)
        except Exception:  # absent, unreadable, truncated or made for another platform
            pass
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    kwargs = {"literal": True} if literal else {}
    db.compile(expressions=list(expressions), ids=list(range(len(expressions))), elements=len(expressions),
               flags=flags, **kwargs)
    if path is not None:
        _save(path, hyperscan.dumpb(db))
    return db


def _machine() -> str:
    if hasattr(os, "uname"):
        return os.uname().machine
    import platform

    return platform.machine()


MAX_SAVED = 64  # databases kept; past it the least recently written go (a folder that never grows)


def _save(path: Path, data: bytes) -> None:
    save(path, data, keep=MAX_SAVED)

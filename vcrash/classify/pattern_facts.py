"""What a bundled pattern's shape says, kept between runs: whether it is a plain string test,
the words every match holds, and the longest text `re` may search (vcrash/classify/bounded.py).

Working these out parses each pattern in pure Python: ~0.25 ms a pattern, ~7 ms of a 20 MB
log's run for the few dozen that its lines reach, paid again by every process. They depend
only on the pattern and on the code that reads it, so they are kept in the cache folder under a
digest of that code and of the interpreter; a file that is damaged, or made by other code, is
never read. The compiled `re` form is not kept (a compile from the kept regex opcodes is quick,
vcrash/re_cache.py), only its text limit.
"""

from __future__ import annotations

import atexit
import marshal
import sys
import zlib

from vcrash.cache import cache_dir, save

_KEEP_FILES = 4  # one per vcrash version and interpreter in use
MAX_PATTERNS = 4096

_known: dict | None = None  # pattern -> (literal, required, max_length), as kept
_new: dict = {}
_path = None


def facts(pattern: str, work_out) -> tuple:
    """(literal spec or None, required words or None, `re` text limit or None) of `pattern`;
    `work_out(pattern)` makes them where none are kept."""
    global _known
    if _known is None:
        _known = _load()
    kept = _known.get(pattern)
    if not (isinstance(kept, tuple) and len(kept) == 3):
        kept = work_out(pattern)
        if len(_known) < MAX_PATTERNS:
            _known[pattern] = _new[pattern] = kept
    return kept


def _digest() -> str:
    """The code that reads patterns, and the interpreter whose parser it uses."""
    import hashlib

    from vcrash.classify import bounded, rules

    h = hashlib.sha256(sys.version.encode())
    for module in (bounded, rules, sys.modules[__name__]):
        try:
            with open(module.__file__, "rb") as fh:
                h.update(fh.read())
        except (OSError, TypeError):
            return ""
    return h.hexdigest()[:24]


def _load() -> dict:
    global _path
    folder = cache_dir()
    digest = _digest() if folder is not None else ""
    if not digest:
        return {}
    _path = folder / f"patterns-{digest}.marshal"
    atexit.register(_save)
    return _read(_path)


def _read(path) -> dict:
    try:
        data, check = marshal.loads(path.read_bytes())
        if check == zlib.crc32(data):
            kept = marshal.loads(data)
            if isinstance(kept, dict):
                return kept
    except Exception:  # absent, unreadable or damaged: worked out again
        pass
    return {}


def _save() -> None:
    if not _new or _path is None:
        return
    merged = _read(_path)  # another run may have added its own meanwhile
    merged.update(_known or {})
    if len(merged) > MAX_PATTERNS:
        merged = dict(list(merged.items())[:MAX_PATTERNS])
    try:
        data = marshal.dumps(merged)
        save(_path, marshal.dumps((data, zlib.crc32(data))), keep=_KEEP_FILES)
    except Exception:  # a cache that cannot be written only costs the work next time
        pass
    _new.clear()

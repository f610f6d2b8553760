"""Compiled stdlib regexes kept between CLI runs.

vcrash's modules compile ~150 patterns at import and the first lines of a log a few dozen more
(the bounded forms of rule patterns, redaction, the observer's gates); CPython's `re` parses and
compiles each in pure Python, 20–30 ms of every run. The compiler's output (the opcode list that
`_sre.compile` takes) depends only on the pattern, its flags and the interpreter, so it is kept
in the cache folder under a name made from the interpreter's version and `_sre`'s magic number,
and later runs skip the parser and compiler. Only the CLI installs it (a library caller's `re` is
left alone); anything unexpected (another interpreter's internals, a damaged file) only costs the
ordinary compile.
"""

from __future__ import annotations

import atexit
import marshal
import sys
import zlib
from array import array

from vcrash.cache import cache_dir, save

MAX_PATTERNS = 4096  # entries kept: past it, new patterns are compiled each run as before
MAX_PATTERN_CHARS = 20000  # a longer pattern (a user rule's) is not worth a place in the file
_KEEP_FILES = 4  # one per interpreter in use

_cache: dict = {}
_new: dict = {}
_installed = False


def _file_name() -> str | None:
    try:
        import _sre

        v = sys.version_info
        return (f"re-{sys.implementation.cache_tag}-{v.major}.{v.minor}.{v.micro}{v.releaselevel[0]}{v.serial}"
                f"-{_sre.MAGIC}-{_sre.CODESIZE}.marshal")
    except (ImportError, AttributeError):
        return None


def install() -> bool:
    """Route `re`'s compiler through the kept opcode lists; False where this interpreter's
    internals are not the ones it was written for (nothing is changed then)."""
    global _installed
    if _installed:
        return True
    try:
        import _sre
        import re._compiler as compiler
        import re._parser as parser
    except ImportError:
        return False
    if not all(hasattr(m, n) for m, n in ((compiler, "compile"), (compiler, "_code"), (parser, "parse"),
                                             (_sre, "compile"))):
        return False
    folder, name = cache_dir(), _file_name()
    if folder is None or name is None:
        return False
    path = folder / name
    try:
        loaded = marshal.loads(path.read_bytes())
        if isinstance(loaded, dict):
            _cache.update(loaded)
    except Exception:  # absent, unreadable or damaged: start empty
        pass
    original = compiler.compile

    def compile_kept(p, flags=0):
        if not isinstance(p, (str, bytes)) or len(p) > MAX_PATTERN_CHARS:
            return original(p, flags)
        flags = int(flags)
        key = (p, flags)
        kept = _cache.get(key)
        if kept is not None:
            try:
                final_flags, code, groups, groupindex, indexgroup, check = kept
                if check == _check(key, final_flags, code, groups, groupindex, indexgroup):
                    return _sre.compile(p, final_flags, array("I", code).tolist(), groups, groupindex, indexgroup)
            except Exception:  # not what this interpreter expects: compile it again
                pass
            _cache.pop(key, None)  # damaged, or another format: compiled and kept anew
        parsed = parser.parse(p, flags)
        code = compiler._code(parsed, flags)
        groupindex = dict(parsed.state.groupdict)
        indexgroup = [None] * parsed.state.groups
        for group_name, i in groupindex.items():
            indexgroup[i] = group_name
        final_flags = int(flags | parsed.state.flags)
        compiled = _sre.compile(p, final_flags, code, parsed.state.groups - 1, groupindex, tuple(indexgroup))
        if len(_cache) + len(_new) < MAX_PATTERNS:
            try:
                entry = (final_flags, array("I", [int(op) for op in code]).tobytes(), parsed.state.groups - 1,
                         groupindex, tuple(indexgroup))
                _new[key] = (*entry, _check(key, *entry))
            except (OverflowError, TypeError):
                pass
        return compiled

    compiler.compile = compile_kept
    atexit.register(_save, path)
    _installed = True
    return True


def _check(key, final_flags, code, groups, groupindex, indexgroup) -> int:
    """A checksum of an entry with its key: a file damaged so that it still unmarshals (a flipped
    byte) must never give a pattern that matches otherwise than its source."""
    fields = repr((key, final_flags, groups, sorted(groupindex.items()), indexgroup)).encode("utf-8", "surrogatepass")
    return zlib.crc32(code, zlib.crc32(fields))


def _save(path) -> None:
    if not _new:
        return
    merged = {}
    try:  # another run may have added its own meanwhile
        merged.update(marshal.loads(path.read_bytes()))
    except Exception:
        pass
    merged.update(_cache)
    merged.update(_new)
    if len(merged) > MAX_PATTERNS:
        merged = dict(list(merged.items())[:MAX_PATTERNS])
    try:
        save(path, marshal.dumps(merged), keep=_KEEP_FILES)
    except Exception:  # a cache that cannot be written only costs the compile next time
        pass
    _new.clear()

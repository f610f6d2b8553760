"""A routine record: what the splitter makes one vLLM record line with a DEBUG, INFO or WARNING
level, whose message opens no traceback region. A pure function of the text.

Some of the bulk scan's needles only matter on lines without a level: "aborted", "core dumped",
"out of memory" say a process died when a shell, Slurm or the kernel wrote them, but the engine logs
`Aborted request chatcmpl-….` at INFO for every client that went away. A line whose every
needle is such a word and which is a routine record is read by nothing (is_error_line needs no
level or ERROR/CRITICAL), so the bulk scan may pass it over. Every test here is one the splitter
or the rebuilder makes (or stricter): a line that fails any is read as before.
"""

from __future__ import annotations

import re

from vcrash.rebuild import grammar as g
from vcrash.split import _TAGGED
from vcrash.split.headers import VLLM_HEADER, first_level_word_at, parse_header
from vcrash.split.reflow import looks_joined
from vcrash.split.tags import Tag, strip_tags
from vcrash.split.user_text import masked
from vcrash.split.wrappers import strip_ansi, strip_outer

ROUTINE_LEVELS = ("DEBUG", "INFO", "WARNING")
_TAGGED_PREFIX = "("
_UNTAGGED_STARTS = tuple(f"{level} " for level in ROUTINE_LEVELS)
# First characters of a message that a region may open with (rebuild/stream.py _begin).
_OPENERS = ("T", "+", "F", "t", "^", "~", "r")


def routine_record(text: str) -> bool:
    text = strip_ansi(masked(text))  # in Splitter.split's order
    # What Splitter._split would change or split: control characters (ANSI, CR, tabs), markdown
    # escapes, a caret-notation CR, several process tags, outer wrappers, JSON, a ^C echo.
    if not text.isprintable() or "\\" in text or "[]" in text or "](" in text or text.endswith("^M") \
            or text.count("pid=") > 1:
        return False
    text, facts = strip_outer(text)  # a container runtime's timestamp, a compose service's gutter
    if text.startswith(("^C", "{")) or text.lstrip().startswith("{") or text.endswith("cluster]"):
        return False
    payload = _routine_payload(text, "timestamp" in facts)
    if payload is None or looks_joined(payload):
        return False
    return not _may_open_a_region(payload)


def _routine_payload(text: str, after_timestamp: bool) -> str | None:
    """The message of a routine vLLM record (Splitter._plain's first branch, or its untagged
    header), else None."""
    if text.startswith(_TAGGED_PREFIX):
        m = _TAGGED.match(text)
        h = VLLM_HEADER.match(text, m.end()) if m is not None else None
        if h is None or not first_level_word_at(text, h.start("level")) or h.group("level") not in ROUTINE_LEVELS:
            return None
        return text[h.end():]
    if not text.startswith(_UNTAGGED_STARTS) or strip_tags(text, Tag()) != text:
        return None
    header = parse_header(text, after_timestamp=after_timestamp)
    if header is None or header.kind != "vllm" or header.level not in ROUTINE_LEVELS:
        return None
    return text[header.end:]


def _may_open_a_region(payload: str) -> bool:
    """Could StreamMachine._begin open a region on this message? (A superset of its tests.)"""
    stripped = payload.lstrip()
    c = stripped[:1]
    if c in _OPENERS or c == "(" or "most recent call last" in payload:
        return True
    return c.isalpha() and g.exception_line(payload) is not None


# The common routine record, as one anchored pattern on a line's bytes (~1 us, where
# routine_record() takes ~6): a tagged INFO record, after a container runtime's timestamp or not,
# whose message starts with a word that opens nothing and then holds only printable ASCII
# without backslashes, brackets, parentheses, carets or '=' (no markdown escape, no inner tag, no
# second pid=). A line it matches is a routine record unless it holds another needle (two
# 'File "'s make it a joined traceback), which the bulk scan reads anyway (tests/test_quiet.py
# holds it to routine_record()).
_SAFE = rb"[ !\"#$%&'*+,./0-9:;<>?@A-Z_`a-z{|}~-]"
ROUTINE_SHAPE = re.compile(
    rb"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z )?(?:\x1b\[[0-9;]*m)?\([A-Za-z0-9_]+ pid=\d+\)"
    rb"(?:\x1b\[[0-9;]*m)? INFO \d\d-\d\d \d\d:\d\d:\d\d \[[A-Za-z0-9_.]+:\d+\] [A-EG-SU-Za-qsu-z0-9]"
    rb"[A-Za-z0-9_.-]* " + _SAFE + rb"*+")

"""A bundled pattern that is a plain string is tested as one (classify/rules.literal_test): its
answer must be the regex's on every text, anchors and a final newline included."""

import re
from pathlib import Path

import pytest
import regex

from vcrash.classify.rules import LazyPattern, load_pack, literal_test

ROOT = Path(__file__).resolve().parents[1]


def _texts() -> list[str]:
    texts = set()
    for path in sorted((ROOT / "samples").rglob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            texts.update((line, line.strip(), line + "\n"))
            m = re.search(r'File "([^"]+)", line \d+, in (\S+)', line)
            if m:  # what frame patterns are tested against
                texts.update((f"{m.group(1)}:{m.group(2)}", f"{m.group(1)}:{m.group(2)}\n"))
    return sorted(texts)


TEXTS = _texts()


def _bundled_patterns() -> list[str]:
    patterns = set()
    for rule in load_pack().rules:
        for p in [rule.exception_message, rule.context, rule.message_anywhere, *rule.frames_any, *rule.lines_any]:
            if isinstance(p, LazyPattern):
                patterns.add(p.pattern)
    return sorted(patterns)


def _agrees(pattern: str, texts) -> None:
    test = literal_test(pattern)
    if test is None:
        return
    compiled = regex.compile(pattern, regex.V0)
    extra = [""]
    for literal in test.literals:  # each string the pattern spells, and near misses of it
        extra += [literal, literal + "\n", "x" + literal, literal + "x", literal + "\n\n", literal[1:], literal[:-1]]
    for text in [*texts, *extra]:
        assert test(text) == (compiled.search(text) is not None), (pattern, text)


def test_half_the_pack_is_literal():
    patterns = _bundled_patterns()
    assert sum(literal_test(p) is not None for p in patterns) >= len(patterns) // 3


@pytest.mark.parametrize("pattern", _bundled_patterns())
def test_bundled_literal_agrees_with_regex(pattern):
    _agrees(pattern, TEXTS)


@pytest.mark.parametrize("pattern", ["x$", "^x", "^x$", "^$", "", "a\\.py", "a\\$", "a\\\\$", ":f$", "naïve"])
def test_edge_literals_agree(pattern):
    _agrees(pattern, ["x", "x\n", "xx", "a.py", "a$", "a\\", "a\\$", "m:f", "m:f\n", "m:f\n\n", "naïve"])


@pytest.mark.parametrize("pattern", ["a|b", "^(?:a|bc)$", "x(?:a|b)?y", ":_?f$", "(a|b)(c|d)", "^a(?:b(?:c|d)?)?", "a|",
                                     "\\(x\\)|y", "a\\|b"])
def test_grouped_literals_agree(pattern):
    texts = ["a", "b", "bc", "xy", "xay", "xby", "m:_f", "m:f\n", "ac", "bd", "ab", "abc", "abd", "(x)", "y", "a|b",
             "z", ""]
    _agrees(pattern, texts)
    assert literal_test(pattern) is not None


@pytest.mark.parametrize("pattern", ["\\d+", "(?i)abc", "a.b", "a\\sb", "\\1", "[ab]", "a{2}", "a\\nb", "^a|b",
                                     "a|b$", "(?=a)", "(?P<n>a)", "a+", "(a|b)*", "a??", "(a", "a)",
                                     "(?:a|b|c|d)(?:a|b|c|d)(?:a|b)"])
def test_syntax_is_not_literal(pattern):
    assert literal_test(pattern) is None

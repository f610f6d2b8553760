"""A bundled pattern may search a short text on the stdlib `re` (classify/bounded.py): only where
its worst case is small, and always with regex's answer (the match's span included)."""

import time

import pytest
import regex

from vcrash.classify.bounded import STEP_BUDGET, bounded, worst_case
from vcrash.classify.rules import LazyPattern

from test_literal_patterns import TEXTS, _bundled_patterns


@pytest.mark.parametrize("pattern, cost", [
    ("abc", (0, 1)),
    ("\\d+", (1, 1)),
    ("a.{0,80}b", (0, 81)),
    ("\\S+ x \\S+", (2, 1)),
    ("(?:ab|c|d)e", (0, 3)),
    ("(?i)engine ?core (?:failed|did not) within \\d+", (1, 2 * 2)),
    ("(?=\\w+)x", (1, 1)),
    ("a++b", (0, 1)),
])
def test_worst_case_of_a_shape(pattern, cost):
    assert worst_case(pattern) == cost


@pytest.mark.parametrize("pattern", [
    "(a+)+b",  # nested repeat: exponential
    "(a|ab)*c",  # a repeated choice
    "(\\w+\\s?)+$",
    "(a)\\1",  # backreference
    "(a)?(?(1)b|c)",
    "[[:digit:]]+",  # regex reads a POSIX class, re a nested set (a FutureWarning)
    "\\p{L}+",  # regex only
    "a{e<=1}",  # regex's fuzzy match, literal text to re
    "(?r)abc",
    "(",
])
def test_shapes_left_to_regex(pattern):
    assert bounded(pattern) is None


def test_text_limit_follows_the_degree():
    assert bounded("\\d+").max_length == int(STEP_BUDGET ** 0.5)
    assert bounded("abc").max_length == STEP_BUDGET
    assert bounded("\\S+ \\S+ \\S+").max_length == int(STEP_BUDGET ** 0.25)


def test_a_long_text_goes_to_regex():
    pattern = LazyPattern("x\\d+y")
    limit = bounded(pattern.pattern).max_length
    assert pattern.search("a x12y b").span() == (2, 6)
    assert "compiled" not in pattern.__dict__  # answered by re
    long = "a" * limit + " x12y"
    assert pattern.search(long, timeout=0.25).span() == (limit + 1, limit + 5)
    assert "compiled" in pattern.__dict__


def test_partial_search_goes_to_regex():
    pattern = LazyPattern("out of memory")
    m = pattern.search("CUDA out of mem", partial=True)
    assert m is not None and m.partial


def test_worst_case_within_budget_is_fast():
    # The worst shape of its degree at its text limit: every start backtracks through the text.
    pattern = LazyPattern("a\\d+\\d+b")
    text = "a" + "1" * (bounded(pattern.pattern).max_length - 2)
    start = time.perf_counter()
    assert pattern.search(text) is None
    assert "compiled" not in pattern.__dict__
    assert time.perf_counter() - start < 2.0  # ~10 ms; a loaded CI machine gets leeway


@pytest.mark.parametrize("pattern", _bundled_patterns())
def test_bundled_pattern_agrees_with_regex(pattern):
    quick = bounded(pattern)
    if quick is None:
        return
    slow = regex.compile(pattern, regex.V0)
    for text in TEXTS:
        if len(text) > quick.max_length:
            continue
        a, b = quick.compiled.search(text), slow.search(text)
        assert (a and a.span()) == (b and b.span()), (pattern, text)


def test_nearly_every_bundled_pattern_is_bounded():
    patterns = _bundled_patterns()
    assert sum(bounded(p) is not None for p in patterns) >= 0.9 * len(patterns)

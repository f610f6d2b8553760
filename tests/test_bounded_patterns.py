"""A bundled pattern may search a short text on the stdlib `re` (classify/bounded.py): only where
its worst case is small, and always with regex's answer (the match's span included)."""

import time

import pytest
import regex

from vcrash.classify.bounded import STEP_BUDGET, bounded, required_literals, worst_case
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
    ("x(?:\\.\\d+)?s", (1, 2)),  # an optional copy of a body that splits: its cost, or none
    ("(?:a|bc){0,3}d", (0, 4 * 2 ** 3)),
])
def test_worst_case_of_a_shape(pattern, cost):
    assert worst_case(pattern) == cost


@pytest.mark.parametrize("pattern", [
    "(a+)+b",  # nested repeat: exponential
    "(a|ab)*c",  # a repeated choice
    "(\\w+\\s?)+$",
    "(?:\\w+\\s?){4}$",  # more copies of a body that splits than are priced
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
    assert bounded("abc").max_length == STEP_BUDGET + 2
    assert bounded("\\S+ \\S+ \\S+").max_length == int(STEP_BUDGET ** 0.25) + 4


def test_the_pinned_part_of_a_match_is_not_free_text():
    # A match takes at least 42 characters: only what is beyond them can split.
    pattern = "CUDA error \\([^()\\n]{1,300}:\\d+\\): an illegal memory access"
    free = int((STEP_BUDGET / 300) ** 0.5)
    assert bounded(pattern).max_length == free + 42 - 1
    # Inside a lookaround a repeat is not held by what the pattern consumes: no credit.
    assert bounded("(?=\\w+x)abcdef\\d+").max_length == int(STEP_BUDGET ** (1 / 3))


def test_a_text_shorter_than_any_match_never_imports_regex():
    pattern = LazyPattern("Didn't receive health check response for .{1,300}? after \\d+(?:\\.\\d+)?s, marking")
    assert pattern.search("(APIServer pid=1) WARNING the health check timed out after 5s", timeout=0.25) is None
    assert "compiled" not in pattern.__dict__


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


@pytest.mark.parametrize("pattern, required", [
    ("No available block found in \\d+ seconds?", ("No available block found in ",)),
    ("(?:CUDA|HIP) out of memory", (" out of memory",)),
    ("x(?:Cuda|CUDA)y", ("uda", "UDA")),  # no run of MIN_RUN: the choice's (the parser took the "C" out)
    ("CUDA out of memory|HIP error: out of memory", ("CUDA out of memory", "HIP error: out of memory")),
    ("a\\d+|\\S+", None),  # an alternative with no plain run
    ("(?i)EngineCore timeout", None),  # case-blind
    ("a{e<=1}", None),  # regex's fuzzy match
    ("^(?!No valid)\\S", None),
])
def test_required_literals_of_a_shape(pattern, required):
    assert required_literals(pattern) == required


def test_a_text_without_the_required_words_is_answered_at_once():
    pattern = LazyPattern("Worker \\S+ pid \\d+ died, exit code: -?\\d+")
    assert pattern.search("x" * 100_000 + " pid 12 exit code: 1") is None
    assert "compiled" not in pattern.__dict__ and "_quick" not in pattern.__dict__


def test_a_patterns_shape_is_kept_between_runs(tmp_path, monkeypatch):
    from vcrash.classify import pattern_facts, rules

    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(pattern_facts, "_known", None)
    monkeypatch.setattr(pattern_facts, "_new", {})
    worked = []

    def work_out(pattern):
        worked.append(pattern)
        return rules._pattern_facts(pattern)

    pattern = "Worker \\S+ pid \\d+ died, exit code: -?\\d+"
    first = pattern_facts.facts(pattern, work_out)
    assert first == (None, (" died, exit code: ",), first[2]) and first[2] > 0
    pattern_facts._save()
    (saved,) = tmp_path.glob("patterns-*.marshal")
    monkeypatch.setattr(pattern_facts, "_known", None)  # the next run
    assert pattern_facts.facts(pattern, work_out) == first and worked == [pattern]
    # A damaged file is never read: worked out again.
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0xFF
    saved.write_bytes(bytes(data))
    monkeypatch.setattr(pattern_facts, "_known", None)
    assert pattern_facts.facts(pattern, work_out) == first and worked == [pattern, pattern]


@pytest.mark.parametrize("pattern", _bundled_patterns())
def test_bundled_pattern_search_is_regexs(pattern):
    # Every path of LazyPattern.search (required words, re, regex) against regex itself.
    lazy, slow = LazyPattern(pattern), regex.compile(pattern, regex.V0)
    for text in TEXTS:
        a, b = lazy.search(text, timeout=1.0), slow.search(text)
        assert (a and a.span()) == (b and b.span()), (pattern, text)

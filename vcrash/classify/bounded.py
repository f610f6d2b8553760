"""A bundled pattern on the stdlib `re`, for texts short enough that its worst case is small.

User rules' patterns run on the `regex` module under a timeout. The bundled pack's are ours, but
importing `regex` costs ~6 ms of a run that tests a handful of them. The worst case of a
backtracking search follows from the pattern's shape: every start position, times the ways its
repeats can split the text. Only the text beyond the pattern's shortest match is free to split
(a 60-character message pins 60 of a 63-character line), so that is the length that counts.
Where that product, for the text at hand, stays under a budget, the search cannot hang, and
`re` (already loaded) gives the same answer. Nested repeats and
backreferences (exponential cases) never run here, nor does anything `re` reads differently.
"""

from __future__ import annotations

import functools
import re
import warnings

try:  # the parser behind re.compile (private; its absence only turns this path off)
    from re import _constants as _c, _parser as _p
except ImportError:  # pragma: no cover - Python < 3.11
    _p = _c = None

# Backtracking steps a search may take in the worst case (~10 ms of sre at its slowest).
STEP_BUDGET = 1_000_000
MAX_COPIES = 3  # `(?:\.\d+)?`: a repeat of at most this many copies of a body that can split

_SIMPLE = None if _c is None else {_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN, _c.AT, _c.CATEGORY}
_REPEATS = None if _c is None else {_c.MAX_REPEAT, _c.MIN_REPEAT}


class _Unbounded(Exception):
    """A shape whose worst case grows faster than any fixed power of the text's length."""


def worst_case(pattern: str) -> tuple[int, int] | None:
    """(degree, factor): a search's steps are at most factor × n^(degree + 1) for a text of n
    characters (n start positions; each unbounded repeat can take any of n lengths, a bounded
    one `{lo,hi}` hi-lo+1; a few copies of a body that splits, the body's cost per copy). None:
    a nested repeat, a repeated alternation, a backreference, or a pattern `re` cannot parse."""
    tree = _parsed(pattern)
    if tree is None:
        return None
    try:
        return _sequence(tree)
    except (_Unbounded, RecursionError):
        return None


@functools.lru_cache(maxsize=512)
def _parsed(pattern: str):
    """`re`'s parse tree of the pattern, or None: unparsable, or read with a warning (a syntax
    `regex` reads otherwise, such as a POSIX class). Kept: each check reads it (read only)."""
    if _p is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return _p.parse(pattern)
    except (re.error, FutureWarning, DeprecationWarning, RecursionError, OverflowError):
        return None


def _sequence(items) -> tuple[int, int]:
    degree, factor = 0, 1
    for op, av in items:
        d, f = _item(op, av)
        degree, factor = degree + d, factor * f
    return degree, factor


def _item(op, av) -> tuple[int, int]:
    if op in _SIMPLE:
        if op == _c.LITERAL and av in (ord("{"), ord("}")):
            raise _Unbounded  # a brace `re` took literally may be regex syntax (`{e<=1}`): not ours
        return 0, 1
    if op in _REPEATS:
        lo, hi, sub = av
        if _contains_choice(sub):
            if hi > MAX_COPIES:
                raise _Unbounded  # (a+)+, (a|ab)*: exponential
            # At most hi copies in a row, each splitting as the body does: a sequence of them.
            d, f = _sequence(sub)
            return d * hi, (hi - lo + 1) * f ** hi
        if hi == _c.MAXREPEAT:
            return 1, 1
        return 0, hi - lo + 1
    if op == getattr(_c, "POSSESSIVE_REPEAT", None):
        return 0, 1  # never gives back what it took
    if op == _c.SUBPATTERN:
        return _sequence(av[3])
    if op == getattr(_c, "ATOMIC_GROUP", None):
        return _sequence(av)
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return _sequence(av[1])
    if op == _c.BRANCH:
        costs = [_sequence(alt) for alt in av[1]]
        return max(d for d, _ in costs), sum(f for _, f in costs)
    raise _Unbounded  # GROUPREF, GROUPREF_EXISTS and anything newer


def required_literals(pattern: str) -> tuple[str, ...] | None:
    """Strings of which every match of the pattern holds one: the longest run of plain
    characters (a message's words between its repeats), or one per alternative of a choice
    (`CUDA out of memory|HIP out of memory`). A text with none of them cannot match, which a
    substring test tells faster than either engine. None: no such strings (a case-blind
    pattern, a class or repeat in every place)."""
    tree = _parsed(pattern)
    if tree is None or tree.state.flags & re.IGNORECASE:
        return None
    try:
        return _requirement(tree)
    except _Unbounded:
        return None


MIN_RUN = 4  # a run this long is a better gate than a choice's strings


def _requirement(items) -> tuple[str, ...] | None:
    best, run, choice = "", [], None
    for op, av in _required_items(items):
        if op == _c.LITERAL:
            if av in (ord("{"), ord("}")):
                raise _Unbounded  # a brace `re` took literally may be regex syntax (`{e<=1}`)
            run.append(chr(av))
            continue
        if len(run) > len(best):
            best = "".join(run)
        run = []
        if op == _c.BRANCH and choice is None:
            alternatives = [_requirement(alt) for alt in av[1]]
            if all(alternatives):
                choice = tuple(dict.fromkeys(s for alt in alternatives for s in alt))
    if len(run) > len(best):
        best = "".join(run)
    if best and (len(best) >= MIN_RUN or choice is None):
        return (best,)
    return choice


def _required_items(items):
    """The sequence's items, plain groups opened (their items are required too)."""
    for op, av in items:
        if op == _c.SUBPATTERN and not av[1] and not av[2]:  # no flags added or removed
            yield from _required_items(av[3])
        else:
            yield op, av


def _pinned_width(pattern: str) -> int:
    tree = _parsed(pattern)
    return 0 if tree is None or _repeats_in_lookaround(tree) else tree.getwidth()[0]


def _repeats_in_lookaround(items) -> bool:
    """A lookaround that holds a repeat (a fixed one costs a fixed number of steps)."""
    for op, av in items:
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            if _contains_choice(av[1]):
                return True
            continue
        if op in _REPEATS and _repeats_in_lookaround(av[2]):
            return True
        if op == _c.SUBPATTERN and _repeats_in_lookaround(av[3]):
            return True
        if op == getattr(_c, "ATOMIC_GROUP", None) and _repeats_in_lookaround(av):
            return True
        if op == getattr(_c, "POSSESSIVE_REPEAT", None) and _repeats_in_lookaround(av[2]):
            return True
        if op == _c.BRANCH and any(_repeats_in_lookaround(alt) for alt in av[1]):
            return True
    return False


def _contains_choice(items) -> bool:
    """Whether a repeat's body can match in more than one way by itself."""
    for op, av in items:
        if op in _REPEATS or op == _c.BRANCH or op == getattr(_c, "POSSESSIVE_REPEAT", None):
            return True
        if op == _c.SUBPATTERN and _contains_choice(av[3]):
            return True
        if op == getattr(_c, "ATOMIC_GROUP", None) and _contains_choice(av):
            return True
        if op in (_c.ASSERT, _c.ASSERT_NOT) and _contains_choice(av[1]):
            return True
        if op not in _SIMPLE and op not in (_c.SUBPATTERN, _c.ASSERT, _c.ASSERT_NOT,
                                            getattr(_c, "ATOMIC_GROUP", None)):
            return True
    return False


class BoundedPattern:
    """A pattern compiled by `re`, and the longest text its search is allowed on."""

    __slots__ = ("compiled", "max_length")

    def __init__(self, compiled: re.Pattern, max_length: int) -> None:
        self.compiled, self.max_length = compiled, max_length


def bounded(pattern: str) -> BoundedPattern | None:
    """The `re` form of a pattern and its text limit, or None: `regex` only."""
    cost = worst_case(pattern)
    if cost is None:
        return None
    degree, factor = cost
    free = int((STEP_BUDGET / factor) ** (1 / (degree + 1)))
    if free < 1:
        return None
    # A match takes at least `pinned` characters, so of a text n long only n - pinned + 1
    # start positions can begin one, and any repeat can take only that many lengths. Repeats
    # inside lookarounds are not pinned by what the pattern consumes: none there, or no credit.
    pinned = _pinned_width(pattern)
    max_length = free + pinned - 1 if pinned else free
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compiled = re.compile(pattern)
    except (re.error, FutureWarning, DeprecationWarning, RecursionError, OverflowError):
        return None
    return BoundedPattern(compiled, max_length)

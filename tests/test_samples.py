"""Every sample under samples/ against the whole rule pack (the same check as `vcrash rules test`)."""

from pathlib import Path

import pytest

from vcrash.classify.match import Matcher
from vcrash.classify.rules import load_pack
from vcrash.harness import discover, parse_sample, run_sample

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
PACK = load_pack()
MATCHER = Matcher(PACK)


@pytest.mark.parametrize("path", discover(SAMPLES), ids=lambda p: str(p.relative_to(SAMPLES)))
def test_sample(path):
    result = run_sample(parse_sample(path), PACK, MATCHER)
    assert result.ok, "; ".join(result.problems)


def test_every_bundled_rule_has_a_positive_sample():
    expected = {rid for p in discover(SAMPLES) for rid in parse_sample(p).expect}
    missing = sorted(r.id for r in PACK.rules if r.id not in expected)
    assert not missing, f"rules without a positive sample: {missing}"

"""The damage harness: every sample, damaged the ways users paste logs (`vcrash/damage.py`),
still gives its rule, or, where the damage took the evidence away, a finding that is neither
silent nor a symptom. Known misses are listed in tests/data/damage_known_misses.txt and fail
when they start passing (strict xfail), so the list only ever shrinks."""

from pathlib import Path

import pytest

from vcrash.classify.match import Matcher
from vcrash.classify.rules import load_pack
from vcrash.damage import DAMAGES, SAME, damageable
from vcrash.harness import analyze_lines, discover, parse_sample

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()
MATCHER = Matcher(PACK)
KINDS = {r.id: r.kind for r in PACK.rules}
KNOWN_MISSES = {tuple(line.split()) for line in (ROOT / "tests/data/damage_known_misses.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")}
SAMPLES = [parse_sample(p) for p in discover(ROOT / "samples")]
CASES = [(d, s) for d in DAMAGES for s in SAMPLES if damageable(s) and d.apply(s) is not None]


def _params():
    for damage, sample in CASES:
        rel = str(sample.path.relative_to(ROOT))
        marks = [pytest.mark.xfail(strict=True, reason="known miss")] if (damage.name, rel) in KNOWN_MISSES else []
        yield pytest.param(damage, sample, id=f"{damage.name}:{rel[len('samples/'):]}", marks=marks)


@pytest.mark.parametrize("damage,sample", list(_params()))
def test_damaged_sample(damage, sample):
    report = analyze_lines(str(sample.path), damage.apply(sample), PACK, MATCHER)
    want = sample.expect[0]
    assert report.diagnoses, f"{damage.name}: silent (expected {want})"
    primary = report.diagnoses[0]
    assert primary.rule.kind != "symptom" or KINDS[want] == "symptom", \
        f"{damage.name}: a symptom ({primary.rule.id}) as primary, expected {want}"
    if damage.expect == SAME:
        assert primary.rule.id == want, f"{damage.name}: {primary.rule.id}, expected {want}"


def test_every_damage_applies_to_some_sample():
    assert {d.name for d, _ in CASES} == {d.name for d in DAMAGES}


def test_known_misses_name_real_cases():
    names = {(d.name, str(s.path.relative_to(ROOT))) for d, s in CASES}
    assert KNOWN_MISSES <= names, sorted(KNOWN_MISSES - names)

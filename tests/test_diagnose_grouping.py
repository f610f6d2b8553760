"""build_diagnoses ranks each match before it makes a Diagnosis for it: the diagnosis kept for
each (input, run, rule) and its count must be those of making one for every match and keeping
the best-ranked (the first of equals)."""

import random

from vcrash.classify.diagnose import Diagnosis, MatchedTraceback, build_diagnoses
from vcrash.classify.rules import load_pack
from vcrash.rebuild.model import ExceptionInfo, Traceback

PACK = load_pack()


def every_match_made(matches, last_epoch):
    """The reference: a Diagnosis for every match; the best-ranked of each key counts them all."""
    best = {}
    for m in matches:
        key = (m.input_index, m.epoch, m.rule.id)
        diag = Diagnosis(m.rule, m.input, m.input_index, m.stream_id, m.traceback.role, m.line, m.epoch,
                         traceback=m.traceback, strength=m.strength)
        diag.run_age = max(last_epoch[m.input_index] - m.epoch, 0)
        kept = best.get(key)
        if kept is None:
            best[key] = diag
        elif diag.sort_key() < kept.sort_key():
            diag.occurrences += kept.occurrences
            best[key] = diag
        else:
            kept.occurrences += 1
    return best


def summary(diag):
    return (diag.rule.id, diag.input_index, diag.epoch, diag.stream_id, diag.role, diag.line, diag.strength,
            diag.occurrences, diag.traceback.corrupted)


def test_best_ranked_match_of_each_key_is_kept_whatever_the_order():
    rules = [PACK.rules[0], PACK.rules[1]]
    roles = ["engine-core", "api-server", "worker", "main"]
    rng = random.Random(3)
    matches = []
    for i in range(600):
        exc = ExceptionInfo(rng.choice(["ValueError", "RuntimeError"]), rng.choice(["a", "b", "c"]))
        start = rng.randrange(5000)
        tb = Traceback(f"tb{i}", "x.log", f"x.log:P:{rng.randrange(40)}", rng.choice(roles), start, start + 3,
                       exceptions=[exc], corrupted=rng.random() < 0.3)
        rule = rng.choice(rules)
        matches.append(MatchedTraceback.of(tb, rule, exc, rng.randrange(2), rng.randrange(3),
                                           rng.choice(["exact", "loose", "frames"])))
    last_epoch = {0: 2, 1: 2}

    class Runs:
        pass

    runs = Runs()
    runs.last_epoch = last_epoch
    for seed in range(5):
        random.Random(seed).shuffle(matches)
        expected = sorted(map(summary, every_match_made(matches, last_epoch).values()))
        got = sorted(map(summary, build_diagnoses(iter(matches), [], runs)))
        assert got == expected
        assert sum(d[7] for d in got) == len(matches)

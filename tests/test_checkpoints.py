"""The fast path's clock checkpoints stay bounded on out-of-order times, and a window read
from them never starts later than it would from every checkpoint."""

import random

from vcrash.checkpoints import Checkpoints


def test_a_checkpoint_only_where_the_time_changes():
    cps = Checkpoints()
    for lineno, time in enumerate(["10:00:00", "10:00:00", "10:00:01", "10:00:01", "10:00:00"], 1):
        cps.note(lineno, lineno * 100, time)
    assert list(cps) == [(1, 100, "10:00:00"), (3, 300, "10:00:01"), (5, 500, "10:00:00")]
    assert cps[-1] == (5, 500, "10:00:00") and len(cps) == 3


def test_shuffled_times_stay_under_the_cap_and_keep_the_first_checkpoint():
    rng = random.Random(3)
    cps = Checkpoints(cap=64)
    for lineno in range(1, 10_000):
        cps.note(lineno, lineno * 80, f"{rng.randrange(60):02d}")
        assert len(cps) <= 64
    assert cps[0] == (1, 80, cps[0][2])
    lines = [cp[0] for cp in cps]
    assert lines == sorted(lines)


def test_a_thinned_window_starts_no_later_than_the_full_one():
    rng = random.Random(5)
    times = [f"{min(59, max(0, i // 40 + rng.randrange(-3, 4))):02d}" for i in range(2400)]
    times[100:103] = ["x", "y", "y"]  # a time that repeats right after a thinning
    full, thin = Checkpoints(cap=1 << 20), Checkpoints(cap=16)
    for lineno, time in enumerate(times, 1):
        full.note(lineno, lineno * 10, time)
        thin.note(lineno, lineno * 10, time)
    assert len(thin) < len(full)
    assert set(thin) <= set(full)

    def window_start(cps, end_line, before):
        # revisit_liveness_windows' choice: the last checkpoint before the evidence at or
        # before the wanted time, else the first
        start = 0
        for i, (line, _offset, time) in enumerate(cps):
            if line >= end_line:
                break
            if time <= before:
                start = i
        return cps[start][0]

    for _ in range(300):
        end_line, before = rng.randrange(2, 2400), f"{rng.randrange(60):02d}"
        assert window_start(thin, end_line, before) <= window_start(full, end_line, before)

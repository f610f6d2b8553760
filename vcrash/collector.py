"""The garbage collector's pace for a whole run of the CLI.

Python collects its youngest generation every 700 net new container objects. A log of 100 K
processes keeps thousands of machines, stream records and buffers alive while it allocates a
few per line, so those collections (and the older generations' that follow them) took 1.1-1.7 s
of a 12-15 s run, re-scanning objects that live for thousands of lines. The pipeline makes
almost no reference cycles: collecting less often cost 1-7 MB of peak memory on those logs
(bench/README.md, stop 25).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # net new container objects between young collections (Python's: 700)


def pace_for_batch_run() -> None:
    """For the CLI's own process (and scan workers): a library caller's interpreter is left alone."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)

"""In-process timings of `analyze()` (and the JSON report), without the interpreter's start-up.

    python3 bench/inproc.py LOG [LOG ...] [--runs 10] [--tree DIR]

For each log: the first run in a fresh process (cold: imports of the scanner, first compiles,
first-touch memory), then `--runs` more (warm), as CPU seconds (process_time, less sensitive
to a busy VM than wall time) with their minimum and median. `--tree DIR` times another source
tree (a `git worktree add /tmp/start COMMIT`), for A/B runs in the same minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.tree))
    from vcrash.analyze import analyze
    from vcrash.classify.rules import load_pack
    from vcrash.collector import pace_for_batch_run
    from vcrash.read import expand_inputs
    from vcrash.redact import Redactor
    from vcrash.report import render_json

    pace_for_batch_run()
    pack = load_pack()
    for log in args.logs:
        times = []
        for _ in range(args.runs + 1):
            start = time.process_time()
            report = analyze(expand_inputs([log]), pack)
            with open(os.devnull, "w") as out:
                render_json(report, out, Redactor())
            times.append(time.process_time() - start)
        cold, warm = times[0], times[1:]
        print(f"{os.path.basename(log)} ({args.tree}): cold {cold * 1000:.1f} ms, warm min "
              f"{min(warm) * 1000:.1f} ms, median {statistics.median(warm) * 1000:.1f} ms ({args.runs} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

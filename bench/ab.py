"""A/B of source trees on the same inputs, runs alternating so both see the VM in the same state.

    python3 bench/ab.py --trees /tmp/start . --rounds 16 --over-one-line LOG
    python3 bench/ab.py --trees /tmp/start . --rounds 2 LOG [LOG ...]

Each round runs `python -m vcrash analyze LOG -f json` once per tree (a fresh process, started in
the tree's folder so that its own `vcrash` is imported); medians of wall seconds, and of CPU
seconds from wait4. `--over-one-line LOG`: each round also runs a 1-line log, and the figure is
the LOG's time over it (issue 12's "20 MB over a 1-line run"). Make worktrees with
`git worktree add /tmp/start COMMIT` and compile their bytecode (`python3 -m compileall -q vcrash`)
first, as the README's install does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ONE_LINE = "(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"


def run(tree: str, log: str) -> tuple[float, float]:
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen([sys.executable, "-m", "vcrash", "analyze", log, "-f", "json"], cwd=tree,
                                stdout=devnull, stderr=devnull)
        _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*")
    ap.add_argument("--trees", nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--over-one-line", metavar="LOG")
    args = ap.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees]
    with tempfile.TemporaryDirectory(prefix="vcrash-ab-") as tmp:
        if args.over_one_line:
            one = Path(tmp) / "one.log"
            one.write_text(ONE_LINE)
            walls: dict[tuple, list] = {(t, k): [] for t in trees for k in ("one", "log")}
            cpus: dict[tuple, list] = {(t, k): [] for t in trees for k in ("one", "log")}
            for _ in range(args.rounds):
                for tree in trees:
                    for kind, log in (("one", str(one)), ("log", args.over_one_line)):
                        wall, cpu = run(tree, log)
                        walls[(tree, kind)].append(wall)
                        cpus[(tree, kind)].append(cpu)
            for tree in trees:
                a, b = statistics.median(walls[(tree, "one")]), statistics.median(walls[(tree, "log")])
                ca, cb = statistics.median(cpus[(tree, "one")]), statistics.median(cpus[(tree, "log")])
                print(f"{tree}: 1-line {a * 1000:.1f} ms, {Path(args.over_one_line).name} {b * 1000:.1f} ms, "
                      f"over the 1-line run {(b - a) * 1000:.1f} ms; CPU over it {(cb - ca) * 1000:.1f} ms "
                      f"({args.rounds} rounds)")
        for log in args.logs:
            results: dict[str, list] = {t: [] for t in trees}
            for _ in range(args.rounds):
                for tree in trees:
                    results[tree].append(run(tree, log))
            for tree in trees:
                wall = statistics.median(r[0] for r in results[tree])
                cpu = statistics.median(r[1] for r in results[tree])
                print(f"{Path(log).name} {tree}: {wall:.3f} s wall, {cpu:.3f} s CPU "
                      f"{[round(r[0], 2) for r in results[tree]]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

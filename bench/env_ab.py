"""A/B of environment settings on the same inputs: analyze() timed inside fresh processes.

    python3 bench/env_ab.py --env VCRASH_SCAN_AHEAD=0 --env VCRASH_SCAN_AHEAD=1 --rounds 10 LOG [LOG ...]
    python3 bench/env_ab.py --env PYTHONPATH=/tmp/start --env PYTHONPATH=$PWD --rounds 40 LOG  (two trees)

Each round starts one process per setting, alternating, so both see the VM in the same state.
The process imports vcrash and loads the rule pack untimed, then times `analyze()` and the JSON
report (wall seconds): the interpreter's start-up, which varies by tens of milliseconds from one
run to the next on a shared VM, is left out, and what a setting changes inside the run (a fork,
a second process's reading) is kept. Prints the median and range per setting.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMED = r"""
import os, sys, time
from vcrash.analyze import analyze
from vcrash.classify.rules import load_pack
from vcrash.read import expand_inputs
from vcrash.redact import Redactor
from vcrash.report import render_json
pack = load_pack()
start = time.perf_counter()
report = analyze(expand_inputs([sys.argv[1]]), pack)
with open(os.devnull, "w") as out:
    render_json(report, out, Redactor())
print(time.perf_counter() - start)
"""


def timed(log: str, setting: str) -> float:
    name, _, value = setting.partition("=")
    # PYTHONPATH=TREE times another source tree (a `git worktree add`): run from a folder of
    # neither, so that the tree named is the one imported.
    cwd = tempfile.gettempdir() if name == "PYTHONPATH" else ROOT
    done = subprocess.run([sys.executable, "-c", TIMED, log], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, **{name: value}))
    if done.returncode != 0:
        raise SystemExit(f"{log} with {setting}: {done.stderr.strip()[-500:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--env", action="append", required=True, metavar="NAME=VALUE")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    for log in args.logs:
        times: dict[str, list[float]] = {s: [] for s in args.env}
        for _ in range(args.rounds):
            for setting in args.env:
                times[setting].append(timed(log, setting))
        shown = ", ".join(f"{s}: {statistics.median(v) * 1000:.1f} ms [{min(v) * 1000:.1f}-{max(v) * 1000:.1f}]"
                          for s, v in times.items())
        print(f"{Path(log).name}: {shown} ({args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

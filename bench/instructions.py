"""Instructions, not seconds: source trees compared on the same inputs under valgrind's callgrind.

    python3 bench/instructions.py LOG [LOG ...] --trees /tmp/start .

This VM's wall-clock times swing by up to ~40% from one minute to the next, which hides a 3%
change even in alternating runs (bench/ab.py). The number of instructions a run executes does
not swing: each `vcrash analyze LOG -f json` runs once per tree under `valgrind --tool=callgrind`
(~100x slower: use inputs that take a second or less natively), and the figure is its total
instruction count, and that count less a 1-line run's (the start-up every run pays). Needs
valgrind (`apt-get install valgrind`); the interpreter is the one running this script, called
directly (a pyenv shim is a shell script that valgrind would measure instead).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ONE_LINE = "(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"


def instructions(tree: str, log: str) -> int:
    with tempfile.TemporaryDirectory(prefix="vcrash-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                              os.path.realpath(sys.executable), "-m", "vcrash", "analyze", log, "-f", "json"],
                             cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    m = re.search(r"Collected : (\d+)", run.stderr)
    if m is None:
        raise SystemExit(f"callgrind gave no count for {log} in {tree}:\n{run.stderr[-2000:]}")
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--trees", nargs="+", required=True)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vcrash-one-line-") as tmp:
        one = Path(tmp) / "one.log"
        one.write_text(ONE_LINE)
        base = {tree: instructions(tree, str(one)) for tree in args.trees}
        for tree in args.trees:
            print(f"{tree}: 1-line {base[tree] / 1e6:,.1f} M instructions", flush=True)
        for log in args.logs:
            counts = {tree: instructions(tree, log) for tree in args.trees}
            first = counts[args.trees[0]] - base[args.trees[0]]
            for tree in args.trees:
                over = counts[tree] - base[tree]
                change = f" ({(over - first) / first:+.1%})" if tree != args.trees[0] and first else ""
                print(f"{Path(log).name} {tree}: {counts[tree] / 1e6:,.1f} M, {over / 1e6:,.1f} M over the "
                      f"1-line run{change}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

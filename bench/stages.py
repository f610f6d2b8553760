"""Where one `analyze()` run's time goes, stage by stage, in a fresh process.

    python3 bench/stages.py LOG [LOG ...]

Wraps the pipeline's stages with wall-clock timers (the process's first run: imports of the
scanner, first compiles and the scan-ahead fork are in it, as in a real run) and prints, per
log, milliseconds for: the lines coming out of `iter_lines` (reading, scanning and walking; the
consumer's time left out), the reads from disk, `read_starts` in this process, waiting for the
scan-ahead child (`take`) and its fork, counting newlines, the per-line path (`feed`), the
windows read again after the pass, building the report (its diagnoses apart as well), and
the JSON report. The timers cost a few percent.
Set VCRASH_SCAN_AHEAD=0 to see the same run in one process.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vcrash.analyze as pipeline  # noqa: E402
from vcrash import read, scan_ahead  # noqa: E402
from vcrash.classify.rules import load_pack  # noqa: E402
from vcrash.redact import Redactor  # noqa: E402
from vcrash.report import render_json  # noqa: E402

spent: Counter = Counter()


def timed(owner, name: str, key: str | None = None) -> None:
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[key or name] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def timed_lines(inner):
    def wrapper(*args, **kwargs):
        lines = inner(*args, **kwargs)
        while True:
            start = time.perf_counter()
            try:
                line = next(lines)
            except StopIteration:
                spent["iter_lines"] += time.perf_counter() - start
                return
            spent["iter_lines"] += time.perf_counter() - start
            yield line

    return wrapper


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    pipeline.iter_lines = timed_lines(pipeline.iter_lines)
    timed(read, "_read_into", "read from disk")
    timed(read, "_sparse_count", "count newlines")
    for scanner in (read._LineWalker, read._HyperScanner):
        if "read_starts" in vars(scanner):
            timed(scanner, "read_starts", "scan here")
    timed(scan_ahead.ScanAhead, "take", "wait for the child")
    timed(scan_ahead.ScanAhead, "start", "fork")
    timed(pipeline.InputAnalysis, "feed", "per-line path")
    for name in ("revisit_liveness_windows", "revisit_after_windows", "revisit_recoveries"):
        timed(pipeline, name, "windows read again")
    timed(pipeline, "build_report", "report")
    timed(pipeline, "build_diagnoses", "diagnoses (in the report)")
    pack = load_pack()
    for log in argv:
        spent.clear()
        start = time.perf_counter()
        report = pipeline.analyze(read.expand_inputs([log]), pack)
        analysed = time.perf_counter()
        with open(os.devnull, "w") as out:
            render_json(report, out, Redactor())
        spent["JSON report"] = time.perf_counter() - analysed
        total = time.perf_counter() - start
        parts = ", ".join(f"{k} {v * 1000:.1f}" for k, v in spent.items())
        print(f"{Path(log).name}: {total * 1000:.1f} ms in all; {parts} (ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

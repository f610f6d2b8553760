"""`vcrash scan` engines on 1,000 logs: local `--jobs 2` against `--engine dask` with 1 and 2 workers.

    python bench/scan_engines.py [--logs 1000] [--dir /tmp/vcrash-bench-fleet] [--repeat 3]

The logs are the samples/ tree cycled into `--logs` files (small logs, 0.3-25 KB: the case where
a per-task overhead shows most). Measured, medians of `--repeat`:

  cli      wall time of the whole command (`python -m vcrash scan DIR -f json`), start-up included
  startup  `--engine dask` on one tiny log: interpreter + LocalCluster start and stop
  in-proc  the scan alone, in one process: the local engine with one process (per-log cost c),
           and `DaskEngine.scan` on an already started LocalCluster of 1 and 2 workers
  overhead per task = (dask 1-worker scan time - serial scan time) / logs
  no-op    1,000 tasks that do nothing on the 1-worker cluster: Dask's own cost per task

and checks that every engine wrote the same JSON. The last lines estimate a 100-worker cluster
from c and the overhead (see bench/README.md for the reasoning).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_fleet(folder: Path, n: int) -> None:
    samples = sorted((ROOT / "samples").rglob("*.log"))
    if folder.exists() and len(list(folder.rglob("*.log"))) == n:
        return
    shutil.rmtree(folder, ignore_errors=True)
    for i in range(n):
        src = samples[i % len(samples)]
        dest = folder / f"host{i // 100:02d}" / f"{i:04d}-{src.parent.name}.log"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)


def cli(*args: str) -> tuple[float, str]:
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "vcrash", "scan", *args, "-f", "json"], cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"scan failed ({r.returncode}): {r.stderr.strip()}")
    return time.perf_counter() - started, r.stdout


def median_of(repeat: int, fn):
    times, out = [], None
    for _ in range(repeat):
        t, out = fn()
        times.append(t)
    return statistics.median(times), out


def in_process(folder: Path, repeat: int) -> dict:
    from vcrash.classify.rules import load_pack
    from vcrash.read import expand_inputs
    from vcrash.scan import run_scan
    from vcrash.scan_dask import DaskEngine

    sources = expand_inputs([str(folder)])
    pack = load_pack([])
    out = {}

    def serial():
        t = time.perf_counter()
        run_scan(sources, jobs=1)
        return time.perf_counter() - t, None

    out["serial"] = median_of(repeat, serial)[0]
    for workers in (1, 2):
        with DaskEngine(None, workers=workers) as engine:
            def on_cluster():
                t = time.perf_counter()
                engine.scan(sources, pack)
                return time.perf_counter() - t, None

            on_cluster()  # warm: the workers build their analysis state once per run
            out[f"dask{workers}"] = median_of(repeat, on_cluster)[0]
            if workers == 1:
                def noop_tasks():  # Dask's own cost per task, with no work in it
                    t = time.perf_counter()
                    engine.client.gather(engine.client.map(_noop, range(len(sources)), pure=False))
                    return time.perf_counter() - t, None

                out["noop"] = median_of(repeat, noop_tasks)[0]
    out["logs"] = len(sources)
    return out


def _noop(i: int) -> int:
    return i


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", type=int, default=1000)
    ap.add_argument("--dir", default="/tmp/vcrash-bench-fleet")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    folder = Path(args.dir)
    make_fleet(folder, args.logs)
    size = sum(p.stat().st_size for p in folder.rglob("*.log"))
    print(f"{args.logs} logs, {size / 1e6:.1f} MB, {os.cpu_count()} cores")

    local_t, local_json = median_of(args.repeat, lambda: cli(str(folder), "--jobs", "2"))
    d1_t, d1_json = median_of(args.repeat, lambda: cli(str(folder), "--engine", "dask", "--jobs", "1"))
    d2_t, d2_json = median_of(args.repeat, lambda: cli(str(folder), "--engine", "dask", "--jobs", "2"))
    tiny = ROOT / "tests/data/scan/healthy.log"
    start_t, _ = median_of(args.repeat, lambda: cli(str(tiny), "--engine", "dask", "--jobs", "2"))
    same = local_json == d1_json == d2_json
    print(f"cli  local --jobs 2        {local_t:6.2f} s")
    print(f"cli  dask, 1 worker        {d1_t:6.2f} s")
    print(f"cli  dask, 2 workers       {d2_t:6.2f} s")
    print(f"cli  dask start-up (1 log) {start_t:6.2f} s")
    print(f"same JSON from all three: {same}")

    ip = in_process(folder, args.repeat)
    n = ip["logs"]
    c = ip["serial"] / n
    overhead = (ip["dask1"] - ip["serial"]) / n
    print(f"in-proc serial (1 process) {ip['serial']:6.2f} s  -> per log c = {c * 1e3:.2f} ms")
    print(f"in-proc dask, 1 worker     {ip['dask1']:6.2f} s  -> overhead per task = {overhead * 1e3:.2f} ms")
    print(f"in-proc dask, 2 workers    {ip['dask2']:6.2f} s  -> speed-up over 1 worker {ip['dask1'] / ip['dask2']:.2f}x")
    noop = ip["noop"] / n
    print(f"in-proc dask no-op tasks   {ip['noop']:6.2f} s  -> Dask's own cost per task = {noop * 1e3:.2f} ms")
    # Paper, for 1 M logs like these on 100 workers: the work spreads (c + overhead per task,
    # divided by the workers); the scheduler handles every task itself, so its share does not.
    files, workers = 1_000_000, 100
    work = files * (c + overhead) / workers
    print(f"estimate {files:,} logs on {workers} workers: work {work / 60:.1f} min; scheduler floor "
          f"{files * noop / 60:.1f} min at the no-op cost measured here")
    if not same:
        raise SystemExit("engines disagree")


if __name__ == "__main__":
    main()

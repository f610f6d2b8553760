"""Benchmark `vcrash analyze` against grep on the same big log, in the same run.

    python bench/run.py [--log /tmp/vcrash-bench-1g.log] [--size 1G] [--runs 5] [--skip-scan]

For each run it times `grep -cE 'Traceback|Error' LOG` and `vcrash analyze LOG --format json`
back to back (the machine is shared, so the median of the runs is reported), measures each
child's peak RSS with wait4(), and checks that every traceback planted by bench/gen_log.py (the
`LOG.planted.json` sidecar) is in the JSON report, as a traceback or as one of its duplicates.
Then, when they exist: `vcrash scan DIR --jobs 1` vs `--jobs 2`, and small-log latency
(`vcrash analyze small.log`, target <= 0.3 s). Prints a summary and writes it as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VCRASH = [sys.executable, "-m", "vcrash"]


def run_timed(cmd: list[str], stdout=subprocess.DEVNULL, env=None) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()[:500]}")
    rss_mb = usage.ru_maxrss / 1024  # Linux: KiB
    return wall, rss_mb, proc.returncode


def ensure_log(path: str, size: str, seed: int = 1, crashes: int | None = None, mix: str = "default") -> dict:
    side = path + ".planted.json"
    if not (os.path.exists(path) and os.path.exists(side)):
        cmd = [sys.executable, os.path.join(HERE, "gen_log.py"), path, "--size", size, "--seed", str(seed),
               "--mix", mix]
        if crashes is not None:
            cmd += ["--crashes", str(crashes)]
        print(f"generating {path} ({size}) ...", file=sys.stderr)
        subprocess.run(cmd, check=True)
    with open(side) as fh:
        return json.load(fh)


def check_planted(report: dict, planted: list[dict]) -> tuple[int, list[dict]]:
    """Planted tracebacks found (as a traceback's first line or one of its duplicates)."""
    starts = {}
    for tb in report.get("tracebacks", []):
        starts[tb["start_line"]] = tb
        for dup in tb.get("duplicates", []):
            starts.setdefault(dup, tb)
    missing = [p for p in planted if p["line"] not in starts]
    return len(planted) - len(missing), missing


def median(xs):
    return statistics.median(xs) if xs else None


def bench_big(log: str, meta: dict, runs: int, extra: list[str]) -> dict:
    size = os.path.getsize(log)
    grep_t, vc_t, vc_rss, grep_rss = [], [], [], []
    found, missing, report = None, None, None
    for i in range(runs):
        # grep's output must go to a real file: with stdout on /dev/null GNU grep stops at the
        # first match (its output cannot be seen), which times nothing.
        with tempfile.TemporaryFile() as grep_out:
            g, grss, _ = run_timed(["grep", "-cE", "Traceback|Error", log], stdout=grep_out)
        with tempfile.TemporaryFile() as out:
            v, rss, rc = run_timed(VCRASH + ["analyze", log, "--format", "json"] + extra, stdout=out)
            out.seek(0)
            report = json.load(out)
        grep_t.append(g)
        grep_rss.append(grss)
        vc_t.append(v)
        vc_rss.append(rss)
        found, missing = check_planted(report, meta["planted"])
        print(f"  run {i + 1}: grep {g:.2f}s  vcrash {v:.2f}s  ratio {v / g:.2f}x  rss {rss:.0f} MB  "
              f"planted {found}/{len(meta['planted'])}", file=sys.stderr)
    lines = meta["lines"]
    inp = report["inputs"][0]
    return {
        "log": log, "bytes": size, "lines": lines, "runs": runs, "args": extra,
        "grep_s": grep_t, "vcrash_s": vc_t, "grep_median_s": median(grep_t), "vcrash_median_s": median(vc_t),
        "ratio_median": median([v / g for v, g in zip(vc_t, grep_t)]),
        "vcrash_MB_per_s": size / 1e6 / median(vc_t), "vcrash_lines_per_s": lines / median(vc_t),
        "grep_MB_per_s": size / 1e6 / median(grep_t),
        "peak_rss_MB_max": max(vc_rss), "grep_peak_rss_MB": max(grep_rss),
        "examined_lines": inp.get("examined_lines"), "report_lines": inp.get("lines"),
        "planted": len(meta["planted"]), "planted_found": found,
        "missing": missing[:20],
        "diagnoses": [(d["rule"], d["kind"], d["line"]) for d in report.get("diagnoses", [])],
    }


def has_scan() -> bool:
    proc = subprocess.run(VCRASH + ["scan", "--help"], capture_output=True)
    return proc.returncode == 0


def bench_scan(folder: str, runs: int) -> dict:
    res = {}
    for jobs in (1, 2):
        times = []
        for _ in range(runs):
            t, _, _ = run_timed(VCRASH + ["scan", folder, "--format", "json", "--jobs", str(jobs)])
            times.append(t)
        res[f"jobs{jobs}_s"] = times
        res[f"jobs{jobs}_median_s"] = median(times)
    res["speedup"] = res["jobs1_median_s"] / res["jobs2_median_s"]
    return res


def bench_small(small: str, runs: int) -> dict:
    times = []
    for _ in range(runs):
        t, rss, _ = run_timed(VCRASH + ["analyze", small, "--format", "text"])
        times.append(t)
    # the installed console script too (what a user runs)
    script = shutil.which("vcrash")
    stimes = []
    if script:
        for _ in range(runs):
            t, _, _ = run_timed([script, "analyze", small, "--format", "text"])
            stimes.append(t)
    return {"log": small, "bytes": os.path.getsize(small), "runs_s": times, "median_s": median(times),
            "console_script_median_s": median(stimes), "target_s": 0.3}


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", default="/tmp/vcrash-bench-1g.log")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--small", default="/tmp/vcrash-bench-small.log")
    ap.add_argument("--scan-dir", default="/tmp/vcrash-bench-scan")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--skip-scan", action="store_true")
    ap.add_argument("--scan-logs", type=int, default=4)
    ap.add_argument("--scan-size", default="8M")
    ap.add_argument("--out", default=None, help="write the summary JSON here")
    ap.add_argument("--extra", default="", help="extra analyze args, e.g. '--fast-path off'")
    ap.add_argument("--mix", default="default", help="gen_log.py --mix for the big log (a new --log path per mix)")
    args = ap.parse_args(argv)
    summary: dict = {"machine": machine()}
    if not args.skip_big:
        meta = ensure_log(args.log, args.size, mix=args.mix)
        summary["mix"] = args.mix
        print(f"big log: {args.log}", file=sys.stderr)
        summary["big"] = bench_big(args.log, meta, args.runs, args.extra.split())
    small_meta = ensure_log(args.small, "150K", seed=7, crashes=1)
    summary["small"] = bench_small(args.small, args.runs)
    if not args.skip_scan:
        if has_scan():
            os.makedirs(args.scan_dir, exist_ok=True)
            for i in range(args.scan_logs):
                path = os.path.join(args.scan_dir, f"server{i}.log")
                if not os.path.exists(path):
                    subprocess.run([sys.executable, os.path.join(HERE, "gen_log.py"), path, "--size", args.scan_size,
                                    "--seed", str(100 + i), "--crashes", "2"], check=True)
                    os.remove(path + ".planted.json")  # the scan must only see logs
            summary["scan"] = bench_scan(args.scan_dir, 3)
            summary["scan"]["logs"] = f"{args.scan_logs} x {args.scan_size}"
        else:
            summary["scan"] = "vcrash scan not available"
    del small_meta
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    big = summary.get("big")
    if big and big["planted_found"] != big["planted"]:
        print(f"MISSING planted tracebacks: {big['missing']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

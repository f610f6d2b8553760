"""Issue 12's per-size and hostile-shape figures in one command.

    python3 bench/shapes.py [--runs 5] [--out FILE]

Times `vcrash analyze FILE -f json` (a fresh process each run, medians; peak RSS from wait4)
on inputs it writes under a temporary folder:

- a 1-line log (the start-up floor) and a 20 MB server log made by gen_log.py, with grep's
  time on the same file: the goal is "time over the 1-line run <= 3x grep + 0.05 s";
- 1,000,000 bare `Traceback (most recent call last):` lines (goal <= 5 s);
- 100,000 processes, each with an open (cut) traceback (goal <= 10 s and <= 150 MB), written
  process by process, and the same written round robin (every header, then every frame);
- 100,000 processes, each with a 4-line open head of vLLM's engine-core traceback (real paths,
  line numbers that vary by process: ~37 MB, the size of issue 12's own input), process by
  process and round robin (goal <= 10 s and <= 150 MB);
- 100,000 processes writing 5-line traceback heads in waves of 20,000 (each line of a wave,
  then the next line): every head is cut twice, 300,000 tracebacks (goal <= 150 MB);
- 100,000 processes each writing a 3-line traceback head as headed ERROR records, all their lines
  shuffled together (each process's in order), the same head as raw tagged lines shuffled, and
  100,000 torch `[rankN]:` streams round robin (other forms of "100 K interleaved open
  tracebacks");
- 100,000 processes each writing a whole 6-line traceback round robin (every first line, then
  every second...), each process's tag in one of five forms: vLLM's plain and coloured tags,
  Ray's with an ip, behind `docker logs -t`'s time and behind CRI's (goal <= 10 s, <= 150 MB);
- a crash loop of 1,000 and of 4,000 server runs, each ending in a 24-frame fatal traceback
  printed twice (time should grow 4x: linear in size);
- the 20 MB log as .gz, .zst, .xz and .bz2 (time over the plain file's: decompression, and the
  windows read again after the bulk scan).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAIR_RUNS = 10


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one child process."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(cmd, stdout=devnull, stderr=devnull)
        _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024


# A fixed pure-Python loop, timed in a child: how fast this machine runs the interpreter, so that
# figures from two machine kinds (this project's VMs differ by up to 2x) can be set side by side.
REFERENCE_LOOP = "import time\nt = time.perf_counter()\ns = 0\nfor i in range(10_000_000):\n    s += i\nprint(time.perf_counter() - t)"


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), None) if Path("/proc/cpuinfo").exists() else None
    loops = [float(subprocess.run([sys.executable, "-c", REFERENCE_LOOP], capture_output=True, text=True,
                                  check=True).stdout) for _ in range(3)]
    return {"cpu": model, "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "reference_loop_s": round(statistics.median(loops), 3)}


def median_of(cmd: list[str], runs: int) -> dict:
    results = [timed(cmd) for _ in range(runs)]
    return {"median_s": round(statistics.median(r[0] for r in results), 3),
            "runs_s": [round(r[0], 3) for r in results],
            "peak_rss_MB": round(max(r[1] for r in results), 1)}


def input_paths(folder: Path) -> dict[str, Path]:
    return {"one-line": folder / "one.log", "20MB": folder / "server-20m.log",
            "1M-bare-headers": folder / "heads.log", "100K-open-tracebacks": folder / "open.log",
            "100K-round-robin": folder / "open-rr.log", "100K-waves": folder / "waves.log",
            "100K-4-line-heads": folder / "heads4.log", "100K-4-line-round-robin": folder / "heads4-rr.log",
            "100K-shuffled-records": folder / "shuffled.log", "100K-shuffled-raw": folder / "shuffled-raw.log",
            "100K-rank-round-robin": folder / "rank-rr.log", "100K-tag-forms-round-robin": folder / "forms-rr.log",
            "crash-loop-1K": folder / "loop-1k.log", "crash-loop-4K": folder / "loop-4k.log",
            **{f"20MB.{ext}": folder / f"server-20m.log.{ext}" for ext in COMPRESSED}}


COMPRESSED = ("gz", "zst", "xz", "bz2")


def compress(data: bytes, ext: str) -> bytes:
    import bz2
    import gzip
    import lzma

    if ext == "zst":
        import zstandard

        return zstandard.ZstdCompressor(level=3).compress(data)
    return {"gz": lambda d: gzip.compress(d, compresslevel=6), "xz": lambda d: lzma.compress(d, preset=1),
            "bz2": bz2.compress}[ext](data)


def write_inputs(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = input_paths(folder)
    paths["one-line"].write_text("(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server "
                                 "version 0.11.0\n")
    subprocess.run([sys.executable, str(HERE / "gen_log.py"), str(paths["20MB"]), "--size", "20M"],
                   check=True, capture_output=True)
    for ext in COMPRESSED:
        paths[f"20MB.{ext}"].write_bytes(compress(paths["20MB"].read_bytes(), ext))
    with open(paths["1M-bare-headers"], "w") as fh:
        fh.write("Traceback (most recent call last):\n" * 1_000_000)
    with open(paths["100K-open-tracebacks"], "w") as fh:
        for i in range(100_000):
            fh.write(f"(EngineCore_DP0 pid={1000 + i}) Traceback (most recent call last):\n")
            fh.write(f'(EngineCore_DP0 pid={1000 + i})   File "/x/vllm/a.py", line {i}, in f\n')
    with open(paths["100K-round-robin"], "w") as fh:
        # Every header first, then every frame: each header waits 100 K lines for its frame.
        for i in range(100_000):
            fh.write(f"(EngineCore_DP0 pid={1000 + i}) Traceback (most recent call last):\n")
        for i in range(100_000):
            fh.write(f'(EngineCore_DP0 pid={1000 + i})   File "/x/vllm/a.py", line {i}, in f\n')
    heads = [engine_core_head(1000 + i) for i in range(100_000)]
    with open(paths["100K-4-line-heads"], "w") as fh:
        for head in heads:
            fh.writelines(head)
    with open(paths["100K-4-line-round-robin"], "w") as fh:
        for k in range(4):
            fh.writelines(head[k] for head in heads)
    del heads
    with open(paths["100K-waves"], "w") as fh:
        for base in range(0, 100_000, 20_000):
            for step in range(5):
                for i in range(base, base + 20_000):
                    fh.write(wave_line(1000 + i, step))
    with open(paths["100K-shuffled-records"], "w") as fh:
        fh.writelines(shuffled_records(100_000))
    with open(paths["100K-shuffled-raw"], "w") as fh:
        fh.writelines(shuffled_records(100_000, headed=False))
    with open(paths["100K-rank-round-robin"], "w") as fh:
        for i in range(100_000):
            fh.write(f"[rank{i}]: Traceback (most recent call last):\n")
        for i in range(100_000):
            fh.write(f'[rank{i}]:   File "/x/vllm/a.py", line {i}, in f\n')
    with open(paths["100K-tag-forms-round-robin"], "w") as fh:
        for k in range(len(WHOLE_TRACEBACK)):
            fh.writelines(f"{tag_form(1000 + i, k)}{WHOLE_TRACEBACK[k]}\n" for i in range(100_000))
    for name, runs in (("crash-loop-1K", 1000), ("crash-loop-4K", 4000)):
        with open(paths[name], "w") as fh:
            for run in range(runs):
                fh.write(crash_loop_run(run))
    return paths


_CORE = "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py"
WHOLE_TRACEBACK = ["Traceback (most recent call last):", f'  File "{_CORE}", line 630, in run_engine_core',
                   "    engine_core.run_busy_loop()", f'  File "{_CORE}", line 808, in run_busy_loop',
                   "    self._process_engine_step()", "ValueError: No valid structured output parameter found"]


def tag_form(pid: int, line: int) -> str:
    """A process's tag in one of the forms logs carry it (by pid): vLLM's plain and SGR-coloured
    tags, Ray's with the node's ip, behind `docker logs -t`'s time, behind CRI's time and stream."""
    stamp = f"2026-12-06T10:{line:02d}:{pid % 60:02d}.{pid:06d}Z"
    return (f"(EngineCore_DP0 pid={pid}) ", f"\x1b[1;36m(EngineCore_DP0 pid={pid})\x1b[0;0m ",
            f"(RayWorkerWrapper pid={pid}, ip=10.0.{pid // 250 % 250}.{pid % 250}) ",
            f"{stamp} (EngineCore_DP0 pid={pid}) ", f"{stamp} stderr F (EngineCore_DP0 pid={pid}) ")[pid % 5]


def engine_core_head(pid: int) -> list[str]:
    """A cut engine-core traceback's first 4 lines behind the process tag (what 100 K processes
    leave when the log stops right after their frames)."""
    tag, core = f"(EngineCore_DP0 pid={pid}) ", "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py"
    return [tag + "Traceback (most recent call last):\n",
            tag + f'  File "{core}", line {600 + pid % 97}, in run_engine_core\n',
            tag + "    engine_core.run_busy_loop()\n",
            tag + f'  File "{core}", line {800 + pid % 31}, in run_busy_loop\n']


def wave_line(pid: int, step: int) -> str:
    """Line `step` of a process's traceback head: header, frame, code, frame, code."""
    tag = f"(EngineCore_DP0 pid={pid}) "
    if step == 0:
        return tag + "Traceback (most recent call last):\n"
    if step % 2:
        return tag + f'  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line {100 + step}, in run\n'
    return tag + "    engine_core.run_busy_loop()\n"


def shuffled_records(processes: int, seed: int = 12, headed: bool = True) -> list[str]:
    """Each process's header, frame and source line as vLLM ERROR records (or raw behind the
    process tag), every line of every process in random order (each process's own in order)."""
    rng = random.Random(seed)
    keyed = []
    for i in range(processes):
        head = f"(EngineCore_DP0 pid={1000 + i}) "
        if headed:
            head += f"ERROR 11-30 10:{i // 6000 % 60:02d}:{i // 100 % 60:02d} [core.py:710] "
        body = ["Traceback (most recent call last):",
                f'  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line {700 + i % 50}, '
                "in run_engine_core", "    engine_core.run_busy_loop()"]
        for key, text in zip(sorted(rng.random() for _ in body), body):
            keyed.append((key, head + text + "\n"))
    keyed.sort()
    return [line for _key, line in keyed]


def crash_loop_run(run: int) -> str:
    """One run of a crash loop: start-up, then the engine's fatal traceback twice (the logger's
    copy, every line headed, and the dying process's raw copy), 24 frames each."""
    api, engine = 500_000 + run, 1000 + run
    stamp = f"10-21 {9 + run // 3600 % 12:02d}:{run // 60 % 60:02d}:{run % 60:02d}"
    frames = []
    for depth in range(12):
        frames += [f'  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/mod{depth}.py", line '
                   f'{100 + depth}, in step{depth}', f"    return self.step{depth + 1}(batch)"]
    error = f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {run}.00 MiB."
    head = f"(EngineCore pid={engine}) ERROR {stamp} [core.py:1584] "
    lines = [f"(APIServer pid={api}) INFO {stamp} [api_server.py:1839] vLLM API server version 0.33.0",
             f"(EngineCore pid={engine}) INFO {stamp} [core.py:77] Initializing a V1 LLM engine (v0.33.0)",
             head + "EngineCore failed to start.", head + "Traceback (most recent call last):"]
    lines += [head + f for f in frames] + [head + error, "Process EngineCore:", "Traceback (most recent call last):"]
    lines += frames + [error]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--write-inputs", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.write_inputs:
        write_inputs(Path(args.write_inputs))
        return 0
    vcrash = [sys.executable, "-m", "vcrash", "analyze"]
    out: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="vcrash-shapes-") as tmp:
        # Written by a child: a child's peak RSS (wait4) starts at its parent's size at fork.
        subprocess.run([sys.executable, __file__, "--write-inputs", tmp], check=True)
        paths = input_paths(Path(tmp))
        # The 1-line and 20 MB runs alternate, so that both see the machine in the same state;
        # they are cheap, and their difference is small beside the VM's noise: at least 10 pairs.
        pair_runs = max(args.runs, PAIR_RUNS)
        pair = [timed(vcrash + [str(paths[name]), "-f", "json"]) for _ in range(pair_runs)
                for name in ("one-line", "20MB")]
        for k, name in enumerate(("one-line", "20MB")):
            results = pair[k::2]
            out[name] = {"median_s": round(statistics.median(r[0] for r in results), 3),
                         "runs_s": [round(r[0], 3) for r in results],
                         "peak_rss_MB": round(max(r[1] for r in results), 1)}
        for name, path in paths.items():
            if name not in out:
                out[name] = median_of(vcrash + [str(path), "-f", "json"], max(1, args.runs // 2))
            out[name]["bytes"] = path.stat().st_size
        for ext in COMPRESSED:  # the same log compressed: time over the plain file's run
            row = out[f"20MB.{ext}"]
            row["over_plain_s"] = round(row["median_s"] - out["20MB"]["median_s"], 3)
        out["crash-loop-4K"]["time_vs_1K"] = round(
            (out["crash-loop-4K"]["median_s"] - out["one-line"]["median_s"])
            / (out["crash-loop-1K"]["median_s"] - out["one-line"]["median_s"]), 2)  # 4.0 when linear
        grep = median_of(["grep", "-cE", "Traceback|Error", str(paths["20MB"])], pair_runs)
        over = out["20MB"]["median_s"] - out["one-line"]["median_s"]
        out["20MB"].update(grep_median_s=grep["median_s"], over_one_line_s=round(over, 3),
                           goal_over_s=round(3 * grep["median_s"] + 0.05, 3))
    out["goals"] = {"20MB": "over_one_line_s <= goal_over_s", "1M-bare-headers": "<= 5 s",
                    "100K-open-tracebacks": "<= 10 s, <= 150 MB", "100K-round-robin": "<= 10 s, <= 150 MB",
                    "100K-waves": "<= 150 MB", "100K-shuffled-records": "<= 10 s, <= 150 MB",
                    "100K-shuffled-raw": "<= 10 s, <= 150 MB",
                    "100K-rank-round-robin": "<= 10 s, <= 150 MB",
                    "100K-4-line-heads": "<= 10 s, <= 150 MB", "100K-4-line-round-robin": "<= 10 s, <= 150 MB",
                    "100K-tag-forms-round-robin": "<= 10 s, <= 150 MB",
                    "one-line": "<= 0.3 s", "crash-loop-4K": "time_vs_1K about 4 (linear in size)",
                    "20MB.gz": "no goal: over_plain_s is decompression and the re-read windows"}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Longer fuzz run of the parser and the redactor (not part of pytest).

    python bench/fuzz.py [--examples N] [--seconds S] [--shrink]

Runs the property tests of tests/test_property.py with many more examples (and, with --shrink,
lets hypothesis shrink a failure to a small log), then throws random bytes, mutated samples and
random redaction inputs at the pipeline, and folders of hostile entries (cut compressed
streams, long-window zstd, rotated names, shippers' multi-line records, symlinks out of the tree,
procfs links, FIFOs) at `scan`, planted stops (interrupts after or without a shutdown) at the
classifier, and random `-o` lists and rule selectors at the CLI. Exit status 1 on any failure; the failing input is
written to bench/fuzz-failures/.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
OUT = ROOT / "bench" / "fuzz-failures"


def save(name: str, lines: list[str], err: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}-{int(time.time() * 1000)}.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="replace")
    (path.with_suffix(".err")).write_text(err, encoding="utf-8")
    print(f"  failure saved to {path}")


def run_properties(examples: int, shrink: bool) -> int:
    os.environ["VCRASH_PROPERTY_EXAMPLES"] = str(examples)
    if shrink:
        os.environ["VCRASH_PROPERTY_SHRINK"] = "1"
    import pytest

    return pytest.main(["-q", "-p", "no:warnings", str(ROOT / "tests" / "test_property.py")])


def random_bytes_rounds(seconds: float, seed: int) -> int:
    import test_property as tp

    rnd = random.Random(seed)
    samples = [p for p in (ROOT / "samples").rglob("*.log")] if (ROOT / "samples").is_dir() else []
    bodies = [p.read_bytes().decode("utf-8", "replace").split("\n") for p in samples]
    deadline, rounds, failures = time.time() + seconds, 0, 0
    while time.time() < deadline:
        rounds += 1
        if bodies and rnd.random() < 0.7:
            lines = tp.mutate(rnd.choice(bodies), rnd, rnd.randint(1, 60))
        else:
            blob = bytes(rnd.randrange(256) for _ in range(rnd.randrange(4000)))
            lines = blob.decode("utf-8", "replace").split("\n")
        try:
            report, spans = tp.analyze_with_regions("fuzz.log", lines)
            tp.check_accounting(report, spans, lines)
            report.to_dict()
        except Exception:
            failures += 1
            save("pipeline", lines, traceback.format_exc())
    print(f"pipeline: {rounds} rounds, {failures} failures")
    return failures


def redaction_rounds(seconds: float, seed: int) -> int:
    from vcrash.redact import WITHHELD, Redactor

    r = Redactor()
    rnd = random.Random(seed)
    secret = "sk-fuzzSECRET0123456789abcdef"
    pieces = ["prompt: '", "'", '"', "\\", "Bearer ", "Cookie: ", "api_key=", "@", ".com", " ", "\n", "[", "]",
              "token=", "hf_", "x" * 50, "://u:p@h/", "eyJ", "password: "]
    deadline, rounds, failures = time.time() + seconds, 0, 0
    while time.time() < deadline:
        rounds += 1
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randrange(200)))
        pos = rnd.randrange(len(text) + 1)
        text = text[:pos] + " " + secret + " " + text[pos:]
        t = time.perf_counter()
        try:
            out = r.text(text)
            assert out == WITHHELD or "fuzzSECRET" not in out, out
            assert time.perf_counter() - t < 2, "slow"
        except Exception:
            failures += 1
            save("redact", [text], traceback.format_exc())
    print(f"redaction: {rounds} rounds, {failures} failures")
    return failures


PLANTED = (b"Traceback (most recent call last):\n"
           b'  File "/x/vllm/v1/engine/core.py", line 701, in run_engine_core\n'
           b"    engine_core.run_busy_loop()\n"
           b"ValueError: planted fuzz\n")


def _input_shapes(rnd: random.Random, body: bytes) -> dict[str, bytes]:
    """The input shapes of issue 13: cut compressed streams, long-window zstd, rotated names,
    a shipper's multi-line JSON record."""
    import bz2
    import gzip
    import io
    import json
    import lzma

    import zstandard

    cut = lambda data: data[: rnd.randrange(1, max(2, len(data)))]  # noqa: E731
    zparams = zstandard.ZstdCompressionParameters.from_level(3, window_log=31, enable_ldm=True)
    long_buf = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=zparams).stream_writer(long_buf, closefd=False) as w:
        w.write(body)
    record = {"log": body.decode("utf-8", "replace"), "stream": "stderr", "time": "2025-10-21T09:15:47Z"}
    return {
        "cut.log.gz": cut(gzip.compress(body)), "cut.log.xz": cut(lzma.compress(body)),
        "cut.log.bz2": cut(bz2.compress(body)), "cut.log.zst": cut(zstandard.ZstdCompressor().compress(body)),
        "long.log.zst": long_buf.getvalue(), "server.log.1": body, "worker-0": body,
        "shipped.log": json.dumps(record).encode() + b"\n",
    }


def input_rounds(seconds: float, seed: int) -> int:
    """Folders of hostile entries through `scan`: every entry is read or listed as skipped, a cut
    stream is never healthy, nothing outside the folder is read, and nothing hangs."""
    import tempfile

    from vcrash.read import expand_inputs
    from vcrash.scan import run_scan

    rnd = random.Random(seed)
    deadline, rounds, failures = time.time() + seconds, 0, 0
    while time.time() < deadline:
        rounds += 1
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "logs"
            root.mkdir()
            (Path(tmp) / "outside.log").write_bytes(PLANTED)
            body = b"".join(b"INFO %d\n" % i for i in range(rnd.randrange(2000))) + PLANTED
            shapes = _input_shapes(rnd, body)
            for name in rnd.sample(sorted(shapes), rnd.randint(1, len(shapes))):
                (root / name).write_bytes(shapes[name])
            (root / "leak.log").symlink_to(Path(tmp) / "outside.log")
            (root / "dangling.log").symlink_to(Path(tmp) / "gone.log")
            (root / "kmsg.log").symlink_to("/proc/kmsg")
            os.mkfifo(root / "pipe.log")
            try:
                skipped: list = []
                sources = expand_inputs([str(root)], skipped=skipped)
                listed = {s.path for s in sources} | {s.path for s in skipped}
                assert listed == {str(p) for p in root.iterdir()}, "an entry was dropped without a word"
                assert not {"leak.log", "kmsg.log", "pipe.log"} & {Path(s.path).name for s in sources}
                for res in run_scan(sources, jobs=1):
                    name = Path(res.path).name
                    if name.startswith("cut.") and res.status == "healthy":
                        assert res.lines == body.count(b"\n"), f"{name}: read in part, reported healthy"
                    if name in ("long.log.zst", "shipped.log", "server.log.1", "worker-0"):
                        assert res.status == "crashed", f"{name}: {res.status} {res.error or res.warning or ''}"
            except Exception:
                failures += 1
                save("inputs", [f"seed {seed} round {rounds}: {sorted(os.listdir(root))}"], traceback.format_exc())
    print(f"inputs: {rounds} rounds, {failures} failures")
    return failures


# A planned stop's shapes: the shutdown lines that may come before an interrupt, the exceptions
# a stop raises, and the process tags of the versions.
SHUTDOWN_LINES = ["INFO:     Shutting down", "INFO 10-02 09:17:31 [launcher.py:101] Shutting down FastAPI HTTP server.",
                  "INFO:     Finished server process [7225]",
                  "INFO 11-30 12:46:52 [launcher.py:254] [shutdown] API server: shutdown triggered"]
INTERRUPTS = ["KeyboardInterrupt", "asyncio.exceptions.CancelledError", "asyncio.CancelledError",
              "concurrent.futures._base.CancelledError"]
TAGS = ["", "(APIServer pid=7225) "]


def _stop_log(rnd: random.Random, clean: bool) -> list[str]:
    tag = rnd.choice(TAGS)
    lines = [tag + "INFO:     Started server process [7225]", tag + "INFO:     Application startup complete."]
    lines += [tag + f"INFO:     127.0.0.1:{rnd.randrange(1024, 65535)} - \"POST /v1/completions HTTP/1.1\" 200 OK"
              for _ in range(rnd.randrange(4))]
    if clean:
        lines += [tag + line for line in rnd.sample(SHUTDOWN_LINES, rnd.randint(1, len(SHUTDOWN_LINES)))]
    excs = [rnd.choice(INTERRUPTS) for _ in range(rnd.randint(1, 3))]
    for i, exc in enumerate(excs):
        if i:
            lines += [tag, tag + "During handling of the above exception, another exception occurred:", tag]
        lines += [tag + "Traceback (most recent call last):",
                  tag + '  File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run',
                  tag + "    return self._loop.run_until_complete(task)", tag + exc]
    return lines


def stop_rounds(seconds: float, seed: int) -> int:
    """An interrupt after a shutdown sequence or a requested stop is the note interrupted-shutdown;
    the same traceback while serving stays an error."""
    import test_property as tp

    rnd = random.Random(seed)
    deadline, rounds, failures = time.time() + seconds, 0, 0
    while time.time() < deadline:
        rounds += 1
        clean = rnd.random() < 0.5
        lines = _stop_log(rnd, clean)
        try:
            report, _ = tp.analyze_with_regions("stop.log", lines)
            rules = [d.rule.id for d in report.diagnoses]
            assert rules == (["interrupted-shutdown"] if clean else ["unclassified-crash"]), rules
        except Exception:
            failures += 1
            save("stop", lines, traceback.format_exc())
    print(f"planned stops: {rounds} rounds, {failures} failures")
    return failures


def cli_rounds(seconds: float, seed: int) -> int:
    """Random -o lists and rule selectors: at most one output on stdout or exit 2 with one line;
    a selector list either names rules or is refused; never a traceback."""
    import json
    import tempfile

    from typer.testing import CliRunner

    from vcrash.cli import app

    rnd = random.Random(seed)
    runner = CliRunner()
    formats = ["json", "jsonl", "markdown", "sarif", "junit", "github", "gitlab", "text"]
    selectors = ["structured-output", "engine-dead", "cuda-oom", "unclassified-crash", "engine", "nope", "cuda-",
                 "structured-output-no-valid-param", " ", ","]
    deadline, rounds, failures = time.time() + seconds, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        log.write_bytes(PLANTED)
        while time.time() < deadline:
            rounds += 1
            args = ["analyze", str(log)]
            to_stdout = 0
            for _ in range(rnd.randrange(4)):
                fmt = rnd.choice(formats)
                if rnd.random() < 0.5:
                    args += ["-o", fmt]
                    to_stdout += 1
                else:
                    args += ["-o", f"{fmt}={tmp}/out-{rnd.randrange(99)}"]
            if to_stdout == 0 or rnd.random() < 0.3:
                args += ["-f", "json"]
                to_stdout += 1
            for opt in ("--select", "--ignore"):
                if rnd.random() < 0.4:
                    args += [opt, ",".join(rnd.sample(selectors, rnd.randint(1, 3)))]
            try:
                res = runner.invoke(app, args)
                assert res.exit_code in (0, 1, 2), res.exit_code
                assert "Traceback" not in res.stderr, res.stderr
                if res.exit_code == 2:
                    assert res.stderr.count("\n") == 1 and res.stdout == "", res.stderr
                else:
                    assert to_stdout == 1, f"{to_stdout} outputs on stdout were accepted"
                    if "-f" in args:  # -f json is then the one stdout output
                        json.loads(res.stdout)
            except Exception:
                failures += 1
                save("cli", [" ".join(args)], traceback.format_exc())
    print(f"cli: {rounds} rounds, {failures} failures")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--shrink", action="store_true")
    args = ap.parse_args()
    print(f"seed {args.seed}")
    bad = run_properties(args.examples, args.shrink) != 0
    bad |= random_bytes_rounds(args.seconds, args.seed) > 0
    bad |= redaction_rounds(args.seconds / 2, args.seed) > 0
    bad |= input_rounds(args.seconds / 4, args.seed) > 0
    bad |= stop_rounds(args.seconds / 4, args.seed) > 0
    bad |= cli_rounds(args.seconds / 4, args.seed) > 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Follow mode: a writer process appends a crash log line by line at a realistic pace while
`vcrash analyze --follow` watches it (in-process and through the CLI)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from vcrash.classify.rules import load_pack
from vcrash.follow import follow
from vcrash.read import Source

ROOT_RULE = "structured-output-no-valid-param"
SITE = "/usr/local/lib/python3.12/dist-packages"

# vllm-log-facts §3.2: the structured-output crash of a 0.11 `vllm serve` (bold-cyan tags).
A = "\x1b[1;36m(APIServer pid=7)\x1b[0;0m "
E = "\x1b[1;36m(EngineCore_DP0 pid=311)\x1b[0;0m "
EH = E + "ERROR 10-21 09:15:47 [core.py:710] "
AH = A + "ERROR 10-21 09:15:47 [async_llm.py:480] "
HEALTHY = [
    A + "INFO 10-21 09:14:07 [api_server.py:1839] vLLM API server version 0.11.0",
    E + "INFO 10-21 09:14:19 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='/m'",
    E + "INFO 10-21 09:14:31 [default_loader.py:267] Loading weights took 9.87 seconds",
    A + "INFO:     Started server process [7]",
    A + "INFO:     Application startup complete.",
    A + 'INFO:     10.0.3.7:51822 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    A + "INFO 10-21 09:15:44 [loggers.py:123] Engine 000: Avg prompt throughput: 41.9 tokens/s, Avg generation "
        "throughput: 63.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit "
        "rate: 0.0%",
]
FRAMES = [
    f'  File "{SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core',
    "    engine_core.run_busy_loop()",
    f'  File "{SITE}/vllm/v1/engine/core.py", line 754, in _process_engine_step',
    "    outputs, model_executed = self.step_fn()",
    f'  File "{SITE}/vllm/v1/core/sched/scheduler.py", line 405, in schedule',
    "    if structured_output_req and structured_output_req.grammar:",
    f'  File "{SITE}/vllm/v1/structured_output/request.py", line 104, in get_structured_output_key',
    '    raise ValueError("No valid structured output parameter found")',
    "ValueError: No valid structured output parameter found",
]
CRASH = (
    [EH + "EngineCore encountered a fatal error.", EH + "Traceback (most recent call last):"]
    + [EH + f for f in FRAMES]
    + [AH + "AsyncLLM output_handler failed.", AH + "Traceback (most recent call last):",
       AH + f'  File "{SITE}/vllm/v1/engine/async_llm.py", line 439, in output_handler',
       AH + "    outputs = await engine_core.get_output_async()",
       AH + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
            "for the root cause.",
       A + 'INFO:     10.0.3.9:40110 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
       E + "Process EngineCore_DP0:", E + "Traceback (most recent call last):"]
    + [E + f for f in FRAMES]
)
# The dying engine writes nothing after its last line: only the idle flush can close it.
LOG = HEALTHY + CRASH
ROOT_LINE = len(HEALTHY) + 2  # the first traceback's "Traceback (most recent call last):"

WRITER = textwrap.dedent("""
    import sys, time, json
    path, delay, truncate_after = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    lines = json.loads(sys.stdin.read())
    out = open(path, "a", encoding="utf-8") if path != "-" else sys.stdout
    for i, line in enumerate(lines):
        if i == truncate_after:
            out.flush(); out.truncate(0); out.seek(0)
        out.write(line + "\\n"); out.flush()
        time.sleep(delay)
""")


def start_writer(path: str, lines=LOG, delay: float = 0.02, truncate_after: int = -1, stdout=None):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, str(delay), str(truncate_after)],
                            stdin=subprocess.PIPE, stdout=stdout, text=True)
    proc.stdin.write(json.dumps(lines))
    proc.stdin.close()
    return proc


@pytest.fixture(scope="module")
def pack():
    return load_pack([])


def _roots(report):
    return [d for d in report.diagnoses if d.rule.kind == "root"]


def test_until_first_stops_at_root_diagnosis(tmp_path, pack):
    log = tmp_path / "server.log"
    log.write_text("")
    writer = start_writer(str(log))
    t0 = time.monotonic()
    try:
        report = follow([Source(str(log), "server.log")], pack, until_first=True, idle_s=0.5, poll_s=0.05,
                        notify=open(os.devnull, "w"), stop=lambda: time.monotonic() - t0 > 15)
    finally:
        writer.wait(timeout=10)
    assert time.monotonic() - t0 < 10
    roots = _roots(report)
    assert roots and roots[0].rule.id == ROOT_RULE
    assert report.diagnoses[0].line == ROOT_LINE + len(FRAMES)  # the exception line
    tb = report.diagnoses[0].traceback
    assert tb is not None and tb.start_line == ROOT_LINE and not tb.corrupted


def test_idle_flush_closes_quiet_traceback(tmp_path, pack):
    """The raw copy ends the file with no line after it: it is closed by time, not by input."""
    log = tmp_path / "server.log"
    log.write_text("")
    writer = start_writer(str(log), delay=0.005)
    writer.wait(timeout=10)
    seen = []
    out = _Capture(seen)
    t0 = time.monotonic()
    report = follow([Source(str(log), "server.log")], pack, idle_s=0.3, poll_s=0.05, notify=out, live=False,
                    stop=lambda: time.monotonic() - t0 > 1.5)
    starts = {tb.start_line for tb in report.tracebacks} | {d for tb in report.tracebacks for d in tb.duplicates}
    raw_copy = len(LOG) - len(FRAMES)  # "Traceback" of the raw multiprocessing copy
    assert ROOT_LINE in starts and raw_copy in starts
    assert any(ROOT_RULE in line for line in seen), seen  # plain one-line notice on a non-tty


class _Capture:
    def __init__(self, sink):
        self.sink = sink

    def write(self, text):
        self.sink.append(text)

    def flush(self):
        pass

    def isatty(self):
        return False


def test_truncation_reopens_from_start(tmp_path, pack):
    log = tmp_path / "server.log"
    log.write_text("")
    # Ten healthy lines, then the file is truncated (copytruncate) and the crash is written anew.
    lines = HEALTHY + HEALTHY[:3] + LOG
    writer = start_writer(str(log), lines=lines, delay=0.01, truncate_after=len(HEALTHY) + 3)
    t0 = time.monotonic()
    try:
        report = follow([Source(str(log), "server.log")], pack, until_first=True, idle_s=0.3, poll_s=0.05,
                        notify=open(os.devnull, "w"), stop=lambda: time.monotonic() - t0 > 10)
    finally:
        writer.wait(timeout=10)
    roots = _roots(report)
    assert roots and roots[0].rule.id == ROOT_RULE
    assert roots[0].input.startswith("server.log#")  # the second generation of the file
    assert roots[0].traceback.start_line == ROOT_LINE


def test_rotation_reopens_new_file(tmp_path, pack):
    log = tmp_path / "server.log"
    log.write_text("\n".join(HEALTHY) + "\n")
    stop_at = [None]

    def rotate():
        time.sleep(0.4)
        os.rename(log, tmp_path / "server.log.1")
        log.write_text("")
        w = start_writer(str(log), delay=0.01)
        w.wait(timeout=10)
        stop_at[0] = time.monotonic() + 1.0

    th = threading.Thread(target=rotate)
    th.start()
    report = follow([Source(str(log), "server.log")], pack, idle_s=0.3, poll_s=0.05, notify=open(os.devnull, "w"),
                    stop=lambda: stop_at[0] is not None and time.monotonic() > stop_at[0])
    th.join()
    assert [i.path for i in report.inputs] == ["server.log", "server.log#2"]
    assert report.inputs[0].lines == len(HEALTHY)
    roots = _roots(report)
    assert roots and roots[0].rule.id == ROOT_RULE and roots[0].input == "server.log#2"


def _cli(*args):
    return [sys.executable, "-m", "vcrash", "analyze", *args]


def test_cli_until_first_json_exit_code(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    writer = start_writer(str(log))
    proc = subprocess.run(_cli("--follow", "--until-first", str(log), "--format", "json"), capture_output=True,
                          text=True, timeout=30)
    writer.wait(timeout=10)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["diagnoses"][0]["rule"] == ROOT_RULE
    assert f"[root] {ROOT_RULE}" in proc.stderr  # the plain notice (stderr is not a tty)


def test_cli_ctrl_c_prints_final_report(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(LOG) + "\n")
    proc = subprocess.Popen(_cli("--follow", str(log), "--format", "json"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    # Wait for the live notice of the root diagnosis, then interrupt like a user would.
    line = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if ROOT_RULE in line or not line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert ROOT_RULE in line, line + err
    assert proc.returncode == 1, err
    data = json.loads(out)
    assert data["diagnoses"][0]["rule"] == ROOT_RULE


def test_cli_follow_stdin_ends_with_input(tmp_path):
    writer = start_writer("-", delay=0.005, stdout=subprocess.PIPE)
    proc = subprocess.run(_cli("--follow", "-", "--format", "json"), stdin=writer.stdout, capture_output=True,
                          text=True, timeout=30)
    writer.wait(timeout=10)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["diagnoses"][0]["rule"] == ROOT_RULE


def test_follow_catches_up_with_the_fast_path(tmp_path, pack, monkeypatch):
    """An already big file is read like `analyze` reads it, then followed from its end."""
    import vcrash.follow as F

    monkeypatch.setattr(F, "FULL_PREFIX_LINES", 0)
    log = tmp_path / "server.log"
    routine = [HEALTHY[5]] * 3000  # access lines the fast path only counts
    log.write_text("\n".join(HEALTHY + routine) + "\n")
    writer_started = []

    def stop():
        if not writer_started:
            writer_started.append(start_writer(str(log), delay=0.005))
        return False

    t0 = time.monotonic()
    report = follow([Source(str(log), "server.log")], pack, until_first=True, idle_s=0.3, poll_s=0.05,
                    notify=open(os.devnull, "w"),
                    stop=lambda: stop() or time.monotonic() - t0 > 10)
    writer_started[0].wait(timeout=10)
    assert report.inputs[0].examined_lines < 1000  # the 3,000 routine lines were not read one by one
    roots = _roots(report)
    assert roots and roots[0].rule.id == ROOT_RULE
    assert roots[0].traceback.start_line == len(HEALTHY) + len(routine) + ROOT_LINE


def test_follow_catches_up_passing_over_aborted_requests(tmp_path, pack, monkeypatch):
    """Clients that went away (`Request <id> aborted.` at INFO) hold a word that only a line
    without a level needs: the catch-up read passes over them as `analyze` does."""
    import vcrash.follow as F

    monkeypatch.setattr(F, "FULL_PREFIX_LINES", 0)
    log = tmp_path / "server.log"
    aborted = [A + f"INFO 10-21 09:15:{i % 60:02d} [async_llm.py:447] Request chatcmpl-{i:032x} aborted."
               for i in range(3000)]
    log.write_text("\n".join(HEALTHY + aborted + LOG[len(HEALTHY):]) + "\n")
    report = follow([Source(str(log), "server.log")], pack, until_first=True, idle_s=0.3, poll_s=0.05,
                    notify=open(os.devnull, "w"), stop=lambda: True)
    assert report.inputs[0].examined_lines < 1000  # the 3,000 aborted requests were not read one by one
    roots = _roots(report)
    assert roots and roots[0].rule.id == ROOT_RULE
    assert roots[0].traceback.start_line == len(aborted) + ROOT_LINE


def test_cli_follow_compressed_file_is_read_once(tmp_path):
    import gzip

    log = tmp_path / "old.log.gz"
    with gzip.open(log, "wt") as fh:
        fh.write("\n".join(LOG) + "\n")
    proc = subprocess.run(_cli("--follow", str(log), "--format", "json"), capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["inputs"][0]["compression"] == "gzip" and data["inputs"][0]["lines"] == len(LOG)
    assert data["diagnoses"][0]["rule"] == ROOT_RULE


# -- the fast path of vcrash/read.py (owned by the same engineer as follow mode) ---------------

def _lines(data: bytes, needles, chunk: int, scanner: str, monkeypatch):
    from vcrash.read import iter_lines

    monkeypatch.setenv("VCRASH_SCANNER", scanner)
    chunks = [data[i:i + chunk] for i in range(0, len(data), chunk)]
    stats: dict = {}
    out = [(r.lineno, r.offset, r.text) for r in iter_lines(chunks, needles=needles, hot=lambda: False, stats=stats)
           if not r.context]
    return out, stats


@pytest.mark.parametrize("chunk", [1000, 4096, 1 << 20])
@pytest.mark.parametrize("scanner", ["hyperscan", "pairs"])
def test_bulk_scanners_yield_exactly_the_needle_lines(chunk, scanner, monkeypatch):
    import random

    import vcrash.read as R

    pytest.importorskip({"hyperscan": "hyperscan", "pairs": "numpy"}[scanner])

    rng = random.Random(chunk)
    needles = (b"most recent call", b"ERROR", b"WARN", b"took", b"throughput:", b"died unexpectedly", b"timed out")
    words = [b"alpha", b"token", b"tokens", b"to", b"ok", b"ERRO", b"WAR", b"throughput", b"di", b"ed",
             b"timed", b"out", b"\xff\xfe", b"caf\xc3\xa9"]
    lines = []
    for i in range(3000):
        parts = [rng.choice(words) for _ in range(rng.randint(0, 12))]
        if rng.random() < 0.05:
            parts.insert(rng.randint(0, len(parts)), rng.choice(needles))
        sep = b" " * rng.randint(1, 2)  # needles land at odd and even offsets
        line = sep.join(parts)
        if i % 997 == 5:
            line = b"x" * 5000 + b" took"  # a long line
        lines.append(line + (b"\r" if i % 7 == 0 else b""))
    data = b"\n".join(lines) + b"\n"
    expected = [(n + 1, sum(len(x) + 1 for x in lines[:n]), lines[n].decode("utf-8", "replace"))
                for n in range(len(lines)) if any(nd in lines[n] for nd in needles)]
    got, stats = _lines(data, needles, chunk, scanner, monkeypatch)
    found, _ = _lines(data, needles, chunk, "find", monkeypatch)
    assert got == expected == found
    kind = {"hyperscan": R._HyperScanner, "pairs": R._PairScanner}[scanner]
    monkeypatch.setenv("VCRASH_SCANNER", scanner)
    assert isinstance(R.make_scanner(needles), kind)
    assert stats["lines"] == len(lines) and stats["bytes"] == len(data)


def test_focus_hits_are_every_needle_occurrence(monkeypatch):
    """Hyperscan's one-pass focus search gives what a find() per needle gives (overlaps and
    needles inside needles included)."""
    import random

    import vcrash.read as R

    pytest.importorskip("hyperscan")
    rng = random.Random(3)
    needles = (b'File "', b"pid=1437", b":1437:", b'"process": 1437', b"pid=14")
    alphabet = [b"pid=1437", b":1437:", b"pid=14", b'File "', b"x", b"\n", b" ", b"1437", b'"process": 1437']
    buf = b"".join(rng.choice(alphabet) for _ in range(5000))
    monkeypatch.setenv("VCRASH_SCANNER", "hyperscan")
    scanner = R.make_scanner((b"ERROR",))
    for begin, end in [(0, len(buf)), (17, len(buf) - 5), (1000, 1001)]:
        expected = sorted(i for n in needles for i in range(begin, end - len(n) + 1) if buf.startswith(n, i))
        assert scanner.focus_hits(buf, needles, begin, end) == expected
        assert R._found_in(buf, needles, begin, end) == expected  # small windows of a new focus
    fresh = (b"pid=1437", b"x")  # no database yet: a small window is searched with find()
    assert R._found_in(buf, fresh, 0, 300) == scanner.focus_hits(buf, fresh, 0, 300)
    assert fresh not in R._HS_DATABASES


def test_clock_before_same_with_and_without_hyperscan(monkeypatch):
    """The last timestamped line before a read line, found by Hyperscan or by the re module."""
    import random

    import vcrash.read as R

    pytest.importorskip("hyperscan")
    rng = random.Random(5)
    shapes = [b"INFO 10-09 08:53:50 [core.py:1] step", b"Oct  9 08:53:50 host kernel: x", b"I1009 08:53:50.1 c10d",
              b'INFO:     10.0.0.1:5161 - "GET /health HTTP/1.1" 200 OK', b"12:34", b"10-09 08:5", b"", b"Traceback"]
    for _ in range(300):
        # Stamped lines are rare, so the search goes past the nearest lines into its windows.
        weights = [1, 1, 1, 30, 5, 5, 5, 5]
        lines = [rng.choices(shapes, weights)[0] + b" %d" % rng.randint(0, 99) for _ in range(rng.randint(1, 2000))]
        buf = b"\n".join(lines) + b"\n"
        s = rng.randint(1, len(buf))
        s = buf.rfind(b"\n", 0, s) + 1 if s < len(buf) else len(buf)
        not_before = rng.randint(0, s)
        monkeypatch.setenv("VCRASH_SCANNER", "find")
        plain = R._clock_before(buf, s, not_before)
        monkeypatch.setenv("VCRASH_SCANNER", "hyperscan")
        assert R._clock_before(buf, s, not_before) == plain


def test_fast_path_finds_every_planted_traceback(tmp_path, monkeypatch):
    """Generated log with crashes of every kind and prefix style: the fast path (read from line
    one) rebuilds the same tracebacks as a full read."""
    pytest.importorskip("numpy")
    import vcrash.analyze as A

    gen = os.path.join(os.path.dirname(__file__), "..", "bench", "gen_log.py")
    log = tmp_path / "gen.log"
    subprocess.run([sys.executable, gen, str(log), "--size", "1200K", "--crashes", "5"], check=True,
                   capture_output=True)
    planted = json.loads((tmp_path / "gen.log.planted.json").read_text())["planted"]
    monkeypatch.setattr(A, "FULL_PREFIX_LINES", 0)
    pack = load_pack([])
    src = [Source(str(log), "gen.log")]
    fast = A.analyze(src, pack, A.Options(fast=True))
    full = A.analyze(src, pack, A.Options(fast=False))
    assert fast.inputs[0].examined_lines < full.inputs[0].examined_lines / 5

    def shape(report):
        return [(tb.start_line, tb.end_line, tb.stream_id, tb.kind, sorted(tb.duplicates), tb.corrupted,
                 [e.type for e in tb.exceptions], tb.context) for tb in report.tracebacks]

    assert shape(fast) == shape(full)
    starts = {tb.start_line for tb in fast.tracebacks} | {d for tb in fast.tracebacks for d in tb.duplicates}
    assert [p for p in planted if p["line"] not in starts] == []
    assert [(d.rule.id, d.line) for d in fast.diagnoses if d.rule.kind == "root"] == \
        [(d.rule.id, d.line) for d in full.diagnoses if d.rule.kind == "root"]

    def liveness(report):
        return [(d.rule.id, d.line, d.liveness["verdict"], (d.liveness["last_progress"] or {}).get("line"))
                for d in report.diagnoses if d.liveness]

    # The fast path skips metrics lines and reads them back in the window before each timeout.
    assert liveness(fast) and liveness(fast) == liveness(full)


# -- a root that arrives after its symptom ------------------------------------------------------
# The engine's traceback is the last thing its process writes, so only the idle flush closes it;
# the API server's EngineDeadError is closed at once by the access line after it.
LATE_ROOT_LOG = HEALTHY + CRASH[:2 + len(FRAMES) + 6]
LATE_SYMPTOM_LINE = len(HEALTHY) + 2 + len(FRAMES) + 5  # the EngineDeadError line


def _notices(tmp_path, pack, **kw):
    log = tmp_path / "server.log"
    log.write_text("\n".join(LATE_ROOT_LOG) + "\n")
    seen: list[str] = []
    t0 = time.monotonic()
    report = follow([Source(str(log), "server.log")], pack, poll_s=0.05, notify=_Capture(seen), live=False,
                    stop=lambda: time.monotonic() - t0 > 3.0, **kw)
    return [line.rstrip("\n") for line in seen], report


def test_symptom_waits_for_the_root_that_explains_it(tmp_path, pack):
    seen, report = _notices(tmp_path, pack, idle_s=0.6)
    assert seen[0].startswith(f"vcrash: [root] {ROOT_RULE} at server.log:"), seen
    assert not any("[symptom]" in line for line in seen), seen
    assert any(line.startswith(f"vcrash: [caused by {ROOT_RULE}] engine-dead at server.log:{LATE_SYMPTOM_LINE}")
               for line in seen), seen
    assert [d.rule.id for d in report.diagnoses] == [ROOT_RULE]


def test_symptom_shown_before_its_root_is_corrected(tmp_path, pack):
    """No grace window: the symptom is shown at once, and corrected when its root arrives."""
    seen, report = _notices(tmp_path, pack, idle_s=0.6, grace_s=0.0)
    root_line = report.diagnoses[0].line
    assert seen[0].startswith(f"vcrash: [symptom] engine-dead at server.log:{LATE_SYMPTOM_LINE}"), seen
    correction = (f"vcrash: engine-dead at server.log:{LATE_SYMPTOM_LINE} is explained by {ROOT_RULE} "
                  f"at server.log:{root_line}")
    assert correction in seen, seen
    assert seen.index(correction) > next(i for i, line in enumerate(seen) if "[root]" in line)


def test_cli_until_first_on_stdin_exits_while_the_pipe_stays_open(tmp_path):
    """`kubectl logs -f POD | vcrash analyze --follow --until-first -`: the writer keeps its end
    open; vcrash must exit at the root, not at the end of stdin."""
    feeder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.stdout.write(sys.stdin.read()); sys.stdout.flush(); "
                               "time.sleep(120)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        feeder.stdin.write("\n".join(LATE_ROOT_LOG) + "\n")
        feeder.stdin.close()
        t0 = time.monotonic()
        proc = subprocess.run(_cli("--follow", "--until-first", "-", "--format", "json"), stdin=feeder.stdout,
                              capture_output=True, text=True, timeout=30)
        elapsed = time.monotonic() - t0
        assert feeder.poll() is None  # the pipe was still open when vcrash returned
    finally:
        feeder.kill()
        feeder.wait(timeout=10)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["diagnoses"][0]["rule"] == ROOT_RULE
    assert f"[root] {ROOT_RULE}" in proc.stderr
    assert elapsed < 15, elapsed  # the idle flush (2 s) and start-up, not the writer's 120 s

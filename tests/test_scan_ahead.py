"""The bulk scan run ahead in a second process (vcrash/scan_ahead.py) gives the report the main
process gives alone: on every sample read in small chunks (so that each is many pieces), with a
child slow enough that the main process takes pieces from it, with a child that dies, and with
one whose records no longer match the input."""

import os
import sys
import threading
import time
from pathlib import Path

import pytest

import vcrash.analyze as pipeline
from vcrash import forking, read, scan_ahead
from vcrash.classify.rules import load_pack
from vcrash.read import Source
from vcrash.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()
SAMPLES = sorted((ROOT / "samples").rglob("*.log"))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "fork"),
                                reason="scan-ahead forks, on Linux only")


@pytest.fixture
def small_pieces(monkeypatch):
    """Chunks of 1 KiB, every one of them a piece the child may scan, and the scan from line 1."""
    if threading.active_count() != 1:
        pytest.skip("another thread runs: scan-ahead never forks then")
    monkeypatch.setattr(read, "CHUNK_SIZE", 1024)
    monkeypatch.setattr(read, "AHEAD_PIECE_BYTES", 256)
    monkeypatch.setattr(pipeline, "FULL_PREFIX_LINES", 0)
    monkeypatch.setattr(pipeline, "CENSUS_MIN_BYTES", 0)
    monkeypatch.setattr(pipeline, "SPLIT_WINDOW_BYTES", 0)  # every window read again: half by the child
    runs: list[scan_ahead.ScanAhead] = []
    close = scan_ahead.ScanAhead.close

    def recorded_close(self):
        if self not in runs:
            runs.append(self)
        pid = self.pid
        close(self)
        if pid is not None:  # reaped: no zombie left behind
            with pytest.raises(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)

    monkeypatch.setattr(scan_ahead.ScanAhead, "close", recorded_close)
    return runs


def report(path: Path, ahead: bool, monkeypatch) -> dict:
    monkeypatch.setenv("VCRASH_SCAN_AHEAD", "1" if ahead else "0")
    return pipeline.analyze([Source(str(path), str(path))], PACK, pipeline.Options(fast=True)).to_dict(Redactor(True))


def test_every_sample_same_report_scanned_ahead(small_pieces, monkeypatch):
    answered = []
    answer = scan_ahead.ScanAhead.answer

    def counted_answer(self, asked):
        found = answer(self, asked)
        answered.append(found is not None)
        return found

    monkeypatch.setattr(scan_ahead.ScanAhead, "answer", counted_answer)
    early_used = []
    read_windows = pipeline._read_liveness_windows

    def counted_read(source, state, run):
        early = len(state.early_windows)
        read_windows(source, state, run)
        early_used.append(early - len(state.early_windows))  # asked during the pass, used here

    monkeypatch.setattr(pipeline, "_read_liveness_windows", counted_read)
    differ, pieces, taken = [], 0, 0
    for path in SAMPLES:
        alone = report(path, False, monkeypatch)
        assert not small_pieces, "VCRASH_SCAN_AHEAD=0 still forked"
        ahead = report(path, True, monkeypatch)
        for run in small_pieces:
            assert run.stopped is None, (path.name, run.stopped)
            pieces += run.taken + run.scanned_here
            taken += run.taken
        small_pieces.clear()
        if alone != ahead:
            differ.append(path.name)
    assert differ == []
    assert taken > 0 and pieces > 250, (taken, pieces)
    assert sum(answered) >= 10, answered  # windows (or their second halves) the child read
    assert sum(early_used) >= 3, early_used  # windows asked as their timeout was found


def slow_main_process(monkeypatch, seconds: float) -> None:
    """Every piece costs the main process `seconds` more before it asks for the child's record."""
    take = scan_ahead.ScanAhead.take

    def slow_take(self, *args):
        time.sleep(seconds)
        return take(self, *args)

    monkeypatch.setattr(scan_ahead.ScanAhead, "take", slow_take)


def test_a_child_ahead_scans_every_piece(small_pieces, monkeypatch):
    slow_main_process(monkeypatch, 0.002)  # the main process is the slow one: every record is ready in time
    path = a_big_sample()
    alone = report(path, False, monkeypatch)
    ahead = report(path, True, monkeypatch)
    assert ahead == alone
    (run,) = small_pieces
    assert run.stopped is None and run.scanned_here <= 1 < run.taken, (run.taken, run.scanned_here)


def a_big_sample() -> Path:
    return max(SAMPLES, key=lambda p: p.stat().st_size)


@pytest.fixture(scope="module")
def server_log(tmp_path_factory, gen_log) -> Path:
    """A generated server log with crashes: ~200 pieces of 1 KiB."""
    log = tmp_path_factory.mktemp("ahead") / "server.log"
    gen_log.main([str(log), "--size", "200K", "--crashes", "2", "--seed", "7", "--mix", "crash-worded-prompts"])
    return log


def test_a_slower_child_hands_pieces_to_the_main_process(small_pieces, server_log, monkeypatch):
    claim = scan_ahead._Claims.claim

    def slow_claim(self, piece):  # runs in the child (forked with this patch): 2 ms a piece it scans
        mine = claim(self, piece)
        if mine:
            time.sleep(0.002)
        return mine

    monkeypatch.setattr(scan_ahead._Claims, "claim", slow_claim)
    slow_main_process(monkeypatch, 0.0005)
    alone = report(server_log, False, monkeypatch)
    ahead = report(server_log, True, monkeypatch)
    assert alone["diagnoses"] and ahead == alone
    (run,) = small_pieces
    assert run.stopped is None and run.taken > 0 and run.scanned_here > 0, (run.taken, run.scanned_here)


@pytest.mark.parametrize("fault", ["dies", "wrong record", "passes over the rest"])
def test_the_main_process_scans_the_rest_when_the_child_fails(fault, small_pieces, monkeypatch):
    claim = scan_ahead._Claims.claim

    def failing_claim(self, piece):
        if piece >= 5 and fault == "passes over the rest":
            # As if the main process had marked them all: the child ends cleanly without them
            # (what a race over the last piece leaves).
            claim(self, piece)
            return False
        if piece == 5:
            if fault == "dies":
                os._exit(3)
            send = self.send
            self.send = lambda record: send((record[0], ("not", "this", "piece"), *record[2:]))
        return claim(self, piece)

    monkeypatch.setattr(scan_ahead._Claims, "claim", failing_claim)
    slow_main_process(monkeypatch, 0.002)  # the child is always ahead: it reaches piece 5 first
    path = a_big_sample()
    alone = report(path, False, monkeypatch)
    ahead = report(path, True, monkeypatch)
    assert ahead == alone
    (run,) = small_pieces
    if fault == "passes over the rest":
        assert run.stopped is None and run.scanned_here > 1, (run.stopped, run.scanned_here)
    else:
        expected = "ended early" if fault == "dies" else "changed"
        assert run.stopped is not None and expected in run.stopped, run.stopped
    assert 0 < run.taken <= 5  # pieces before 5 came from it, none after


def test_only_a_plain_big_file_on_two_cpus_is_scanned_ahead(monkeypatch):
    monkeypatch.delenv("VCRASH_SCAN_AHEAD", raising=False)
    assert not forking._cpus_in_use  # no in-process scan (`--jobs 1`) may leave it set
    big = scan_ahead.MIN_BYTES
    disk = Source("/var/log/server.log", "server.log")
    assert not scan_ahead.wanted(Source("-", "<stdin>"), None, big)  # stdin cannot be read twice
    assert not scan_ahead.wanted(Source("s3://bucket/server.log", "s3://bucket/server.log"), None, big)  # nor a download
    assert not scan_ahead.wanted(disk, "gzip", big)  # nor decompressed twice
    assert not scan_ahead.wanted(disk, None, None)  # a pipe or a device
    assert not scan_ahead.wanted(disk, None, big - 1)
    able = threading.active_count() == 1 and len(os.sched_getaffinity(0)) >= 2
    assert scan_ahead.wanted(disk, None, big) == able
    monkeypatch.setattr(forking, "_cpus_in_use", True)  # a `vcrash scan --jobs` worker
    assert not scan_ahead.wanted(disk, None, big)
    monkeypatch.setattr(forking, "_cpus_in_use", False)
    monkeypatch.setenv("VCRASH_SCAN_AHEAD", "0")
    assert not scan_ahead.wanted(disk, None, big)
    monkeypatch.setenv("VCRASH_SCAN_AHEAD", "1")
    assert scan_ahead.wanted(disk, None, 10) == (threading.active_count() == 1)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert not scan_ahead.wanted(disk, None, big)  # fork keeps one thread only
    finally:
        stop.set()
        worker.join()


def test_the_command_prints_the_same_report_either_way(server_log):
    """The real entry point, in its own process: the child writes nothing of its own to the
    report on stdout or to stderr."""
    import subprocess

    outputs = []
    for switch in ("1", "0"):
        done = subprocess.run([sys.executable, "-m", "vcrash", "analyze", str(server_log), "-f", "json"],
                              capture_output=True, env=dict(os.environ, VCRASH_SCAN_AHEAD=switch), cwd=ROOT)
        assert done.returncode in (0, 1), done.stderr
        outputs.append((done.stdout, done.stderr))
    assert outputs[0] == outputs[1]
    assert b'"diagnoses"' in outputs[0][0]


METRICS_LINE = ("(APIServer pid=7) INFO 10-21 09:16:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
                "{rate:.1f} tokens/s, Avg generation throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
                "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%\n")


def test_the_child_reads_a_window_half_only_where_it_needs_nothing_before_it(tmp_path):
    log = tmp_path / "server.log"
    lines = [METRICS_LINE.format(s=s, rate=10.0 + s) for s in range(4)]
    log.write_text("".join(lines))
    source = Source(str(log), str(log))
    found = pipeline._window_signals(source, "server.log", ("window", None, 0, log.stat().st_size))
    assert [(offset, fields[0], fields[-1]) for offset, fields in found] == \
        [(sum(map(len, lines[:i])), i + 1, 10.0 + i) for i in range(4)]  # lines counted from the half's start
    # A metrics line without a timestamp of its own takes the clock of the lines before: those
    # the first half holds, so the child leaves the half to the main process.
    untimed = "Engine 000: Avg prompt throughput: 9.0 tokens/s, Avg generation throughput: 5.0 tokens/s, " \
              "Running: 1 reqs, Waiting: 0 reqs\n"
    log.write_text(lines[0] + untimed + lines[1])
    assert pipeline._window_signals(source, "server.log", ("window", None, 0, log.stat().st_size)) is None


def test_a_window_half_the_child_leaves_is_read_here(small_pieces, server_log, monkeypatch):
    monkeypatch.setattr(pipeline, "_window_signals", lambda *args: None)  # bound into the child's `serve`
    answered = []
    answer = scan_ahead.ScanAhead.answer

    def recorded_answer(self, asked):
        found = answer(self, asked)
        answered.append(found)
        return found

    monkeypatch.setattr(scan_ahead.ScanAhead, "answer", recorded_answer)
    alone = report(server_log, False, monkeypatch)
    ahead = report(server_log, True, monkeypatch)
    assert ahead == alone
    assert answered and all(found is None for found in answered), answered


def test_a_replaced_timeout_copy_asks_for_its_window_once(monkeypatch):
    """The raw copy of a timeout traceback, emitted while the logger's copy that started before
    it is still open, then that copy, which replaces it: the window is asked for once, for the
    copy that stays, when no region that could replace it is open any more."""
    from vcrash.classify.match import Matcher

    state = pipeline.InputAnalysis(0, "server.log", Matcher(PACK))
    asked = []

    class Helper:
        def alive(self):
            return True

        def ask(self, request):
            asked.append(request)
            return len(asked)

    state.scan_ahead = Helper()
    state.checkpoints = pipeline.Checkpoints()
    state.checkpoints.note(1, 0, "10-21 09:00:00")
    monkeypatch.setattr(pipeline, "SPLIT_WINDOW_BYTES", 0)
    rule = next(r for r in PACK.rules if r.liveness)
    # What matching a timeout traceback does with its window (the rest is other tests').
    monkeypatch.setattr(state, "_on_traceback", lambda tb, kept, position: state._ask_window_early(tb, rule, position))

    class Evidence:
        def __init__(self, start_line, start_offset):
            self.start_line, self.start_offset, self.time = start_line, start_offset, "10-21 09:30:00"

    state.feed(5, 500, "(EngineCore_DP0 pid=7) ERROR 10-21 09:30:00 [core.py:1] Traceback (most recent call last):")
    state._on_traceback(Evidence(10, 1000), None, 0)  # the raw copy: the logger's is open since line 5
    assert asked == [] and len(state._planned_windows) == 1
    state.rebuilder.flush()  # the logger's copy closes ...
    state._on_replace(object(), Evidence(5, 500), None, 0)  # ... and takes the raw copy's place
    assert asked == [("window", None, 0, 500)] and state.early_windows == {(0, 500): 1}
    assert state._planned_windows == []


def test_the_child_takes_the_newest_request_waiting_first():
    import marshal

    read_end, write_end = os.pipe()
    try:
        for asked in (1, 2, 3):
            blob = marshal.dumps((asked, "window", None, 0, asked))
            os.write(write_end, scan_ahead._LENGTH.pack(len(blob)) + blob)
        requests = scan_ahead._requests_newest_first(read_end)
        assert next(requests)[0] == 3
        blob = marshal.dumps((4, "window", None, 0, 4))
        os.write(write_end, scan_ahead._LENGTH.pack(len(blob)) + blob)
        assert [next(requests)[0] for _ in range(3)] == [4, 2, 1]
        os.close(write_end)
        write_end = None
        assert list(requests) == []  # the main process closed the pipe
    finally:
        os.close(read_end)
        if write_end is not None:
            os.close(write_end)


def test_answers_read_while_waiting_for_another_are_kept(monkeypatch):
    run = scan_ahead.ScanAhead(lambda claims: None, 1)
    records = [("done",), ("answer", 2, ["second"]), ("answer", 1, ["first"])]
    monkeypatch.setattr(run, "_fd", 0)
    monkeypatch.setattr(run, "_next_record", lambda wait: records.pop(0) if records else None)
    assert run.answer(1) == ["first"]
    assert run.answer(2) == ["second"]  # read before the first, kept

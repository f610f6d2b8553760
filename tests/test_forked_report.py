"""A huge JSON list written from both ends (vcrash/report/forked.py) is the text that one process
writes alone: on every sample, on a log whose tracebacks go to the spool (two inputs, redacted),
into a file and into a StringIO, with either end slower, and with a child that fails or dies."""

import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import vcrash.analyze as pipeline
from vcrash.classify.rules import load_pack
from vcrash.read import Source
from vcrash.redact import Redactor
from vcrash.report import forked, render_json, write_to

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()
SAMPLES = sorted((ROOT / "samples").rglob("*.log"))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "fork"),
                                reason="the report forks on Linux only")


@pytest.fixture
def lists(monkeypatch):
    """Every SharedList made, checked reaped once written."""
    if threading.active_count() != 1:
        pytest.skip("another thread runs: the report never forks then")
    made: list[forked.SharedList] = []
    init, write_into = forked.SharedList.__init__, forked.SharedList.write_into

    def recorded_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    def checked_write_into(self, out):
        pid = self.pid
        write_into(self, out)
        if pid is not None:
            with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
                os.waitpid(pid, os.WNOHANG)

    monkeypatch.setattr(forked.SharedList, "__init__", recorded_init)
    monkeypatch.setattr(forked.SharedList, "write_into", checked_write_into)
    return made


def rendered(report, forked_on: bool, monkeypatch, tmp_path: Path | None = None, redact: bool = True) -> str:
    monkeypatch.setenv("VCRASH_FORKED_REPORT", "1" if forked_on else "0")
    if tmp_path is None:
        out = io.StringIO()
        render_json(report, out, Redactor(redact))
        return out.getvalue()
    path = tmp_path / f"report-{int(forked_on)}.json"
    write_to(str(path), lambda out: render_json(report, out, Redactor(redact)))
    return path.read_text(encoding="utf-8")


def first_difference(a: str, b: str) -> str | None:
    """Where two texts part (pytest's own diff of two long texts takes minutes)."""
    if a == b:
        return None
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at {at} of {len(a)}/{len(b)}: {a[max(at - 40, 0):at + 40]!r} vs {b[max(at - 40, 0):at + 40]!r}"


def test_every_sample_same_json_written_from_both_ends(lists, monkeypatch, tmp_path):
    differ = []
    for path in SAMPLES:
        report = pipeline.analyze([Source(str(path), str(path))], PACK)
        alone = rendered(report, False, monkeypatch, tmp_path)
        assert not lists, "VCRASH_FORKED_REPORT=0 still forked"
        both = rendered(report, True, monkeypatch, tmp_path)
        assert len(lists) == 1 and lists[0].failed is None, (path.name, lists and lists[0].failed)
        lists.clear()
        if alone != both:
            differ.append((path.name, first_difference(alone, both)))
    assert not differ, differ


def cut_heads_log(path: Path, processes: int, first_pid: int) -> None:
    """Processes that each leave a cut traceback: prompts' words in the frames' code (redacted),
    non-ASCII text in a message, so the encodings matter."""
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(processes):
            tag = f"(EngineCore_DP0 pid={first_pid + i}) "
            fh.write(tag + "Traceback (most recent call last):\n")
            fh.write(tag + f'  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line {100 + i % 7}, '
                     "in run_busy_loop\n")
            fh.write(tag + f"    self.step(api_key='sk-{i:08d}abcdefghijklmnop')  # café ✓\n")


@pytest.fixture(scope="module")
def spooled_report(tmp_path_factory):
    """Two inputs with 6,000 and 1,500 tracebacks: most of them spooled (the store keeps 2,000 as
    objects), batches across the objects' end and across the two inputs."""
    folder = tmp_path_factory.mktemp("forked")
    first, second = folder / "a.log", folder / "b.log"
    cut_heads_log(first, 6000, 1000)
    cut_heads_log(second, 1500, 90000)
    report = pipeline.analyze([Source(str(first), "a.log"), Source(str(second), "b.log")], PACK)
    assert len(report.tracebacks) == 7500
    return report


@pytest.mark.parametrize("to_file", [True, False], ids=["file", "stringio"])
@pytest.mark.parametrize("redact", [True, False], ids=["redacted", "raw"])
@pytest.mark.parametrize("batch", [512, 7], ids=["batches", "small-batches"])
def test_a_spooled_list_of_two_inputs_same_json(spooled_report, lists, monkeypatch, tmp_path, to_file, redact, batch):
    """Small batches: the two ends meet in the middle of the list, not where one of them began."""
    import vcrash.report

    monkeypatch.setattr(vcrash.report, "BATCH", batch)
    folder = tmp_path if to_file else None
    alone = rendered(spooled_report, False, monkeypatch, folder, redact)
    both = rendered(spooled_report, True, monkeypatch, folder, redact)
    assert lists[0].failed is None and lists[0].copied > 0  # the child wrote some of them
    assert first_difference(alone, both) is None
    assert len(json.loads(both)["tracebacks"]) == 7500
    assert ("sk-00000042" in both) is not redact


def items(batch: int) -> str:
    return ", ".join(f'"{batch}.{i}"' for i in range(3))


def whole(batches: int) -> str:
    return ",".join(items(b) for b in range(batches))


def written(batch_text, batches: int = 40) -> tuple[str, forked.SharedList]:
    out = io.StringIO()
    shared = forked.SharedList(batches, batch_text, out)
    shared.write_into(out)
    return out.getvalue(), shared


def in_child(parent: int) -> bool:
    return os.getpid() != parent


def test_a_slow_child_leaves_the_list_to_the_front(lists):
    parent = os.getpid()

    def text(batch):
        if in_child(parent):
            time.sleep(0.2)
        return items(batch)

    out, shared = written(text)
    assert first_difference(out, whole(40)) is None
    assert shared.failed is None and shared.copied <= 1


def test_a_fast_child_writes_most_of_the_list(lists):
    parent = os.getpid()

    def text(batch):
        if not in_child(parent):
            time.sleep(0.02)
        return items(batch)

    out, shared = written(text)
    assert first_difference(out, whole(40)) is None
    assert shared.failed is None and shared.copied >= 20


def test_ends_at_the_same_pace_meet_in_the_middle(lists):
    def text(batch):
        time.sleep(0.005)
        return items(batch)

    out, shared = written(text, 200)
    assert first_difference(out, whole(200)) is None
    assert shared.failed is None and 20 <= shared.copied <= 180


@pytest.mark.parametrize("how", ["raises", "killed"])
def test_a_failing_child_leaves_its_batches_to_the_front(lists, how):
    parent = os.getpid()

    def text(batch):
        if in_child(parent) and batch == 30:
            if how == "raises":
                raise RuntimeError("no")
            os.kill(os.getpid(), signal.SIGKILL)
        if not in_child(parent):
            time.sleep(0.01)  # the child reaches batch 30 before the front does
        return items(batch)

    out, shared = written(text)
    assert first_difference(out, whole(40)) is None
    assert shared.failed is not None and shared.copied == 0


def test_forked_only_for_a_huge_list_on_two_cpus(monkeypatch):
    from vcrash import forking

    monkeypatch.delenv("VCRASH_FORKED_REPORT", raising=False)
    able = threading.active_count() == 1 and len(os.sched_getaffinity(0)) >= 2
    assert not forked.wanted(forked.MIN_ITEMS - 1)
    assert forked.wanted(forked.MIN_ITEMS) == able
    monkeypatch.setattr(forking, "_cpus_in_use", True)  # a `vcrash scan --jobs` worker
    assert not forked.wanted(forked.MIN_ITEMS)
    monkeypatch.setattr(forking, "_cpus_in_use", False)
    monkeypatch.setenv("VCRASH_FORKED_REPORT", "0")
    assert not forked.wanted(forked.MIN_ITEMS)
    monkeypatch.setenv("VCRASH_FORKED_REPORT", "1")
    assert forked.wanted(1) == (threading.active_count() == 1)


@pytest.mark.parametrize("encoding", ["ascii", "utf-16"])
def test_an_output_in_another_encoding_gets_the_same_bytes(spooled_report, lists, monkeypatch, tmp_path, encoding):
    """Escaped where ASCII cannot say it; UTF-16 (a codec with state: a BOM) through the text layer."""
    written_bytes = []
    for forked_on in (False, True):
        monkeypatch.setenv("VCRASH_FORKED_REPORT", "1" if forked_on else "0")
        path = tmp_path / f"report-{int(forked_on)}.json"
        with open(path, "w", encoding=encoding, errors="backslashreplace", newline="") as out:
            render_json(spooled_report, out, Redactor(False))
        written_bytes.append(path.read_bytes())
    assert lists[0].failed is None and lists[0].copied > 0
    assert written_bytes[0] == written_bytes[1]


def test_without_a_temporary_file_the_front_writes_the_whole_list(lists, monkeypatch):
    """A TMPDIR that cannot be written: no child, every batch written here."""
    def no_file(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(forked.tempfile, "TemporaryFile", no_file)
    out, shared = written(lambda batch: items(batch))
    assert first_difference(out, whole(40)) is None
    assert shared.pid is None and "no temporary file" in shared.failed and shared.copied == 0

"""Finished tracebacks' cold fields spooled to disk past a budget: the report must not change."""

import copy
import io
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vcrash.analyze as pipeline
import vcrash.classify.matches as matches_module
import vcrash.rebuild.stream as rebuild_stream
from vcrash.classify.rules import load_pack
from vcrash.read import Source
from vcrash.rebuild.model import ExceptionInfo, Frame, Traceback
from vcrash.rebuild.store import SpooledTraceback, TracebackStore
from vcrash.redact import Redactor
from vcrash.report import render_text

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()
SAMPLES = sorted((ROOT / "samples").rglob("*.log"))


def report_of(path: Path, keep_in_memory: int, monkeypatch) -> tuple[dict, str]:
    with monkeypatch.context() as m:
        m.setattr(rebuild_stream, "KEEP_IN_MEMORY", keep_in_memory)
        m.setattr(matches_module, "KEEP_IN_MEMORY", keep_in_memory)
        report = pipeline.analyze([Source(str(path), str(path))], PACK)
        text = io.StringIO()
        render_text(report, text, Redactor(True))
        return report.to_dict(Redactor(True)), text.getvalue()


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.parent.name + "/" + p.name)
def test_sample_same_report_with_every_traceback_spooled(path, monkeypatch):
    in_memory = report_of(path, 10**9, monkeypatch)
    spooled = report_of(path, 0, monkeypatch)
    assert spooled[0] == in_memory[0]
    assert spooled[1] == in_memory[1]


def test_round_trip_keeps_every_field():
    exceptions = [
        ExceptionInfo("RuntimeError", "boom\nsecond line", None, [Frame("/x/vllm/a.py", 3, "f", "x = 1")],
                      native_frames=["#0 0x1 in c10::foo"], repeated_frames=7, line=12),
        ExceptionInfo("ValueError", "bad", "cause", [Frame("b.py", None, None)], group_path="1.2",
                      inferred=True),
        ExceptionInfo("<truncated>", "", "context", []),
    ]
    store = TracebackStore(keep_in_memory=1)
    first = Traceback("tb1", "in.log", "in.log:EngineCore:7", "engine-core", 10, 20, "python", exceptions,
                      True, "cut off", "ERROR engine failed", "log", 9, ("a prompt",), "EngineCore_DP0",
                      "11-30 10:00:00", "ERROR", True, [30], 4096, 11)
    second = Traceback("tb2", "in.log", "in.log:EngineCore:7", "engine-core", 30, 33, exceptions=exceptions[1:])
    kept = [copy.deepcopy(first), copy.deepcopy(second)]
    in_memory = Traceback("tb0", "in.log", "in.log:EngineCore:7", "engine-core", 1, 2)
    assert store.add(in_memory) is in_memory
    spooled = [store.add(first), store.add(second)]
    assert all(isinstance(tb, SpooledTraceback) for tb in spooled) and not kept[0].spooled
    # A new stand-in on each access unless pinned; the store lists every traceback in order.
    store.pin(spooled[0])
    assert store[1] is spooled[0] and store[-1] is not spooled[1] and store[-1] == spooled[1] and len(store) == 3
    assert list(store) == [in_memory, kept[0], kept[1]]
    assert spooled[1] == kept[1] and spooled[0] == kept[0] and kept[0] == spooled[0]
    assert spooled[1].exceptions == exceptions[1:] and spooled[0].exceptions[0].frames[0].code == "x = 1"
    assert spooled[0].to_dict() == kept[0].to_dict() and spooled[0].root == exceptions[-1]
    # Fields changed after it was spooled: a copy noted on it, a better role, a rewritten field.
    spooled[1].duplicates = [40]
    spooled[1].duplicates.append(50)
    spooled[1].role, spooled[1].time = "worker", "11-30 10:00:01"
    assert spooled[1].duplicates == [40, 50] and spooled[1].role == "worker"
    assert spooled[1].time == "11-30 10:00:01" and spooled[1].exceptions == exceptions[1:]
    assert spooled[0] == kept[0]  # the rewrite left the other record alone
    # A copy or a pickle (a scan's worker returning its result) carries the fields themselves.
    for clone in (pickle.loads(pickle.dumps(spooled[0])), copy.deepcopy(spooled[0])):
        assert type(clone) is Traceback and clone == kept[0] and type(clone.exceptions) is list
    # What a position gives after an earlier-starting copy replaced the traceback there.
    copy_first = copy.deepcopy(kept[0])
    copy_first.start_line = 5
    replaced = store.replace(1, copy_first)
    assert replaced is not spooled[0] and store[1] == copy_first and store[1] is not spooled[0]


def test_many_processes_spill_and_the_report_lists_them_all(tmp_path, monkeypatch):
    log = tmp_path / "many.log"
    with open(log, "w") as fh:
        for i in range(300):
            fh.write(f"(EngineCore_DP0 pid={1000 + i}) Traceback (most recent call last):\n")
            fh.write(f'(EngineCore_DP0 pid={1000 + i})   File "/x/vllm/a.py", line {i}, in f\n')
    monkeypatch.setattr(rebuild_stream, "KEEP_IN_MEMORY", 100)
    report = pipeline.analyze([Source(str(log), str(log))], PACK)
    spooled = [tb for tb in report.tracebacks if tb.spooled]
    assert len(report.tracebacks) == 300 and len(spooled) == 200
    assert [tb.exceptions[0].frames[0].line for tb in report.tracebacks] == list(range(300))
    assert report.diagnoses[0].occurrences == 300


def many_processes_log(path: Path) -> Path:
    """3,000 processes that each log a line, a busy API server, then every 7th process again
    (after its record was retired), the same on Ray's per-node streams, then every 11th again."""
    lines = [f"(EngineCore_DP0 pid={1000 + i}) INFO 11-30 10:00:00 [core.py:1] step {i}" for i in range(3000)]
    lines += [f"(RayWorkerWrapper pid={9000 + i}, ip=10.0.0.{i % 4}) INFO 11-30 10:00:00 [w.py:1] up"
              for i in range(200)]
    lines += ["(APIServer pid=1) INFO 11-30 10:00:01 [api.py:1] GET /health 200"] * 6000
    # The very same text again: a memo of parses must not hand back a retired record.
    lines += [lines[i] for i in range(0, 3000, 7)]
    lines += [f"(RayWorkerWrapper pid={9000 + i}, ip=10.0.0.{i % 4}) INFO 11-30 10:00:02 [w.py:1] again"
              for i in range(0, 200, 3)]
    # A third record for some: every record of a process is summed into its first.
    lines += ["(APIServer pid=1) INFO 11-30 10:00:03 [api.py:1] GET /health 200"] * 6000
    lines += [lines[i] for i in range(0, 3000, 11)]
    path.write_text("\n".join(lines) + "\n")
    return path


def streams_of(path: Path, monkeypatch, **patches) -> tuple[list[tuple], dict]:
    """The report's streams and accounting; accounting["retired_records"]: records that retired,
    ["retirements"]: in how many batches."""
    import vcrash.split as split
    from vcrash import spool
    from vcrash.split import retired

    modules = {"MAX_MACHINES": rebuild_stream, "RUN": spool, "MAX_LIVE_STREAMS": split}
    retiring = []
    with monkeypatch.context() as m:
        for name, value in patches.items():
            m.setattr(modules.get(name, retired), name, value)
        inner = split.Splitter.retire
        m.setattr(split.Splitter, "retire", lambda self, streams: (retiring.append(len(streams)), inner(self, streams)))
        report = pipeline.analyze([Source(str(path), str(path))], PACK, pipeline.Options(fast=False))
        listed = [(s.id, s.name, s.pid, s.role, s.ip, s.lines) for s in report.streams]
        assert len(report.streams) == len(listed)
        return listed, {**report.accounting, "retired_records": sum(retiring), "retirements": len(retiring)}


def test_retired_streams_are_listed_as_if_never_retired(tmp_path, monkeypatch):
    log = many_processes_log(tmp_path / "many.log")
    kept, kept_accounting = streams_of(log, monkeypatch, MAX_MACHINES=10**9)
    retired, accounting = streams_of(log, monkeypatch, MAX_MACHINES=16, MAX_LIVE_STREAMS=64)
    assert kept_accounting["evicted_streams"] == 0 and accounting["evicted_streams"] > 3000
    assert kept_accounting["retired_records"] == 0 and accounting["retired_records"] > 3000
    assert len(kept) == 3201
    assert retired == kept
    # Machines evicted, records kept during the pass (fewer than MAX_LIVE_STREAMS), the idle
    # ones retired once at its end: the same list.
    machines_only, accounting = streams_of(log, monkeypatch, MAX_MACHINES=16)
    assert accounting["evicted_streams"] > 3000 and accounting["retirements"] == 1
    assert accounting["retired_records"] > 2900  # all but the last machines' 16 and a few the end re-read
    assert machines_only == kept
    # Past MAX_LIVE_STREAMS, idle records retire as their machines go (one batch per eviction).
    crowded_early, accounting = streams_of(log, monkeypatch, MAX_MACHINES=16, MAX_LIVE_STREAMS=64)
    assert accounting["retirements"] > 10 and crowded_early == kept
    # Every key in one bit of the "may be back" table: each new record is checked exactly.
    crowded, _ = streams_of(log, monkeypatch, MAX_MACHINES=16, MAX_LIVE_STREAMS=64, SEEN_BITS=8, BATCH=5)
    assert crowded == kept
    # Past IN_MEMORY_MERGE returning processes, their records merged through sorted runs on disk.
    sorted_on_disk, _ = streams_of(log, monkeypatch, MAX_MACHINES=16, MAX_LIVE_STREAMS=64, RUN=3,
                                   IN_MEMORY_MERGE=50)
    assert sorted_on_disk == kept


def test_spool_works_in_memory_without_a_temporary_folder(tmp_path, monkeypatch):
    import tempfile

    from vcrash import spool as spool_module

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    monkeypatch.setattr(spool_module, "WRITE_BATCH", 1)
    spool = spool_module.SpoolFile()
    places = [spool.put([("a", i)]) for i in range(50)]
    assert [spool.get(*where) for where in places] == [[("a", i)] for i in range(50)]


def test_spool_moves_to_memory_when_the_disk_fills_up(monkeypatch):
    """A full disk mid-way (a write cut short, then ENOSPC): every record stays readable."""
    import errno
    import tempfile

    from vcrash import spool as spool_module

    class FillingFile:
        def __init__(self, real, room):
            self.real, self.room = real, room

        def write(self, data):
            if self.room <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            part = bytes(data[:self.room])
            self.room -= len(part)
            return self.real.write(part)

        def __getattr__(self, name):
            return getattr(self.real, name)

    real_temporary_file = tempfile.TemporaryFile
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda **kw: FillingFile(real_temporary_file(**kw), 700))
    monkeypatch.setattr(spool_module, "WRITE_BATCH", 64)
    spool = spool_module.SpoolFile()
    places = []
    for i in range(200):
        places.append(spool.put([("frame", i, "x" * (i % 7))]))
        if i % 10 == 0:  # reads in between move the file position
            assert spool.get(*places[i // 2]) == [("frame", i // 2, "x" * (i // 2 % 7))]
    assert [spool.get(*where) for where in places] == [[("frame", i, "x" * (i % 7))] for i in range(200)]


SPOOL_SAMPLES = [p for p in SAMPLES if p.parent.name in (
    "cuda-oom-weight-loading", "structured-output-no-valid-param", "worker-proc-died-unexpectedly",
    "execute-model-timeout", "engine-core-timeout")][:6]


def _all_formats(paths: list[Path], keep: int, monkeypatch) -> dict[str, str]:
    from vcrash.report import RENDERERS

    with monkeypatch.context() as m:
        m.setattr(rebuild_stream, "KEEP_IN_MEMORY", keep)
        m.setattr(matches_module, "KEEP_IN_MEMORY", keep)
        report = pipeline.analyze([Source(str(p), str(p)) for p in paths], PACK)
        out = {}
        for name, render in RENDERERS.items():
            text = io.StringIO()
            render(report, text, Redactor(True))
            out[name] = text.getvalue()
        return out


def test_every_format_and_several_inputs_same_with_everything_spooled(monkeypatch):
    assert len(SPOOL_SAMPLES) >= 3
    for paths in [[p] for p in SPOOL_SAMPLES] + [SPOOL_SAMPLES[:3]]:
        assert _all_formats(paths, 0, monkeypatch) == _all_formats(paths, 10**9, monkeypatch), paths


def test_follow_and_scan_same_with_everything_spooled(tmp_path, monkeypatch):
    from vcrash.follow import follow
    from vcrash.scan import logs_frame, run_scan

    def both(keep: int):
        with monkeypatch.context() as m:
            m.setattr(rebuild_stream, "KEEP_IN_MEMORY", keep)
            m.setattr(matches_module, "KEEP_IN_MEMORY", keep)
            followed = [follow([Source(str(p), p.name)], PACK, idle_s=0.05, poll_s=0.01, live=False,
                               notify=io.StringIO(), stop=lambda: True).to_dict(Redactor(True))
                        for p in SPOOL_SAMPLES[:3]]
            scanned = logs_frame(run_scan([Source(str(p), str(p)) for p in SPOOL_SAMPLES], jobs=1))
            return followed, scanned.to_dict("records")

    assert both(0) == both(10**9)


def test_external_sort_orders_like_sorted_across_runs():
    import random

    from vcrash.spool import external_sorted

    rng = random.Random(4)
    items = [(f"s{rng.randrange(500)}", rng.randrange(10**6), i) for i in range(5000)]
    for run in (7, 1000, 10**6):  # many spooled runs, a few, none
        assert list(external_sorted(iter(items), run=run)) == sorted(items)
    assert list(external_sorted(iter(()))) == []


TEXTS = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(
    ["", "api_key='sk-abcdefghijklmnopqrstu'", 'say "hi"\n\\', "\udcff", "日本", "prompt='secret text'"]))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_spooled_record_writes_the_json_its_dict_encodes_to(data):
    """The report writes spooled tracebacks from their records without a dict: the same text."""
    import json

    from vcrash.redact import Redactor
    from vcrash.rebuild.store import _record_dict, _record_json

    text = st.text(max_size=8)
    frame = st.tuples(text, st.one_of(st.none(), st.integers(0, 10**6)), st.one_of(st.none(), text), TEXTS)
    exception = st.tuples(text, text, st.sampled_from([None, "cause", "context", "group"]),
                          st.lists(frame, max_size=3), st.lists(text, max_size=2), st.integers(0, 3),
                          st.one_of(st.none(), st.just("1.2")), st.one_of(st.none(), st.integers(1, 99)),
                          st.booleans())
    record = (data.draw(text), data.draw(text), data.draw(text), "engine-core", data.draw(st.integers(0, 10**9)),
              data.draw(st.integers(0, 10**9)), data.draw(st.sampled_from(["python", "faulthandler"])),
              data.draw(st.lists(exception, max_size=3)), True, data.draw(TEXTS), data.draw(TEXTS), None, None,
              (), data.draw(TEXTS), data.draw(TEXTS), None, False, (), 0, 1)
    corrupted = data.draw(st.integers(0, 1))
    duplicates = data.draw(st.lists(st.integers(0, 10**6), max_size=3))
    encode = json.JSONEncoder(ensure_ascii=False).encode
    for redactor in (None, Redactor()):
        assert _record_json(record, corrupted, duplicates, redactor, encode) == \
            encode(_record_dict(record, bool(corrupted), duplicates, redactor))


def test_merge_by_seq_is_a_sorted_merge_of_overlapping_runs():
    import random

    from vcrash.split.retired import merge_by_seq

    rng = random.Random(7)
    for _ in range(200):
        seqs = rng.sample(range(1, 400), rng.randrange(1, 120))
        runs: list[list[tuple]] = [[] for _ in range(rng.randrange(1, 8))]
        for seq in seqs:  # runs that interleave, touch, or hold one record
            runs[rng.randrange(len(runs))].append(("id", "n", None, "r", None, 1, seq))
        runs = [sorted(run, key=lambda rec: rec[6]) for run in runs if run]
        sources = [(run[0][6], lambda run=run: iter(run)) for run in runs]
        assert [rec[6] for rec in merge_by_seq(sources)] == sorted(seqs)

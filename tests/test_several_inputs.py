"""Several logs of one server at once (`analyze api.log engine.log`): the ranking does not depend
on argument order, symptoms hang under the root in another log of the same run, the timeline
merges the logs with a file column, and the terminal shows findings before per-input lines."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from vcrash.analyze import analyze
from vcrash.classify.rules import load_pack
from vcrash.harness import parse_sample
from vcrash.read import expand_inputs
from vcrash.redact import Redactor
from vcrash.report.terminal import render_terminal

ROOT = Path(__file__).resolve().parents[1]
SO_SAMPLE = ROOT / "samples/structured-output-no-valid-param/constructed-0.11.0-docker.log"
STAMP = re.compile(r"\d\d-\d\d \d\d:\d\d:\d\d ")
HEADER = re.compile(r"(?:INFO|ERROR|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] ")


@pytest.fixture(scope="module")
def pack():
    return load_pack([])


def split_logs(tmp_path, monkeypatch, edit=None):
    """The structured-output sample split into the API server's and the engine core's logs."""
    body = parse_sample(SO_SAMPLE).body
    engine = [line for line in body if "EngineCore_DP0" in line]
    api = [line for line in body if "EngineCore_DP0" not in line]
    if edit:
        api, engine = edit(api, engine)
    (tmp_path / "api.log").write_text("\n".join(api) + "\n")
    (tmp_path / "engine.log").write_text("\n".join(engine) + "\n")
    monkeypatch.chdir(tmp_path)


def top(report):
    return [(d.rule.id, d.input) for d in report.diagnoses]


@pytest.mark.parametrize("order", [["api.log", "engine.log"], ["engine.log", "api.log"]])
def test_root_in_another_log_heads_and_explains(tmp_path, monkeypatch, pack, order):
    split_logs(tmp_path, monkeypatch)
    report = analyze(expand_inputs(order), pack)
    assert top(report) == [("structured-output-no-valid-param", "engine.log")]
    assert {(s.rule.id, s.input) for s in report.diagnoses[0].explains} == {("engine-dead", "api.log")}
    explains = report.to_dict(Redactor())["diagnoses"][0]["explains"]
    assert explains[0]["input"] == "api.log"


def test_other_server_runs_are_not_linked_but_the_root_still_ranks_first(tmp_path, monkeypatch, pack):
    def other_day(api, engine):
        return [STAMP.sub("11-02 03:00:00 ", line) for line in api], engine

    split_logs(tmp_path, monkeypatch, other_day)
    for order in (["api.log", "engine.log"], ["engine.log", "api.log"]):
        report = analyze(expand_inputs(order), pack)
        assert report.diagnoses[0].rule.id == "structured-output-no-valid-param"
        assert not report.diagnoses[0].explains
        assert ("engine-dead", "api.log") in top(report) or ("engine-core-killed-externally", "api.log") in top(report)


def test_logs_without_timestamps_link_by_process_id(tmp_path, monkeypatch, pack):
    def no_stamps(api, engine):
        api = [HEADER.sub("", line) for line in api]
        # The API server's log also carries one line of the engine core it started.
        return api[:3] + [HEADER.sub("", engine[0])] + api[3:], [HEADER.sub("", line) for line in engine]

    split_logs(tmp_path, monkeypatch, no_stamps)
    report = analyze(expand_inputs(["api.log", "engine.log"]), pack)
    assert top(report) == [("structured-output-no-valid-param", "engine.log")]
    assert {s.rule.id for s in report.diagnoses[0].explains} == {"engine-dead"}


def test_timeline_merges_logs_by_time(tmp_path, monkeypatch, pack):
    split_logs(tmp_path, monkeypatch)
    report = analyze(expand_inputs(["api.log", "engine.log"]), pack)
    times = [e["time"] for e in report.timeline]
    assert times == sorted(times) and {e["input"] for e in report.timeline} == {"api.log", "engine.log"}


def test_terminal_findings_first_then_one_line_per_input(tmp_path, monkeypatch, pack):
    split_logs(tmp_path, monkeypatch)
    report = analyze(expand_inputs(["api.log", "engine.log"]), pack)
    buf = io.StringIO()
    render_terminal(report, buf, Redactor(), color=False, width=120)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("╭─ ERROR structured-output-no-valid-param")
    header = next(i for i, line in enumerate(lines) if line.startswith("file "))
    assert lines[header].split()[:2] == ["file", "line"]
    inputs = lines.index("Inputs")
    assert inputs > header
    assert lines[inputs + 1] == ("  api.log  (34 lines, vLLM 0.11.0): engine-dead explained by "
                                 "structured-output-no-valid-param at engine.log:37")
    assert lines[inputs + 2].startswith("  engine.log  (50 lines, vLLM 0.11.0): 1 finding")


def test_two_pods_in_one_folder_keep_their_own_symptoms(tmp_path, monkeypatch, pack):
    """Pod B started 90 s after pod A: their runs overlap, but B's EngineDeadError belongs under
    B's root (the closest one before it), not under A's that ranks first by name."""
    body = parse_sample(SO_SAMPLE).body

    def shifted(line):
        def later(m):
            h, mi, s = (int(x) for x in m.group(2).split(":"))
            total = h * 3600 + mi * 60 + s + 90
            return f"{m.group(1)} {total // 3600:02d}:{total // 60 % 60:02d}:{total % 60:02d} "
        return re.sub(r"(\d\d-\d\d) (\d\d:\d\d:\d\d) ", later, line)

    for pod, edit in (("podA", lambda line: line), ("podB", shifted)):
        (tmp_path / pod).mkdir()
        (tmp_path / pod / "api.log").write_text("\n".join(edit(x) for x in body if "EngineCore_DP0" not in x) + "\n")
        (tmp_path / pod / "engine.log").write_text("\n".join(edit(x) for x in body if "EngineCore_DP0" in x) + "\n")
    monkeypatch.chdir(tmp_path)
    report = analyze(expand_inputs(["podB/api.log", "podA/api.log", "podA/engine.log", "podB/engine.log"]), pack)
    owners = {d.input: sorted(s.input for s in d.explains) for d in report.diagnoses}
    assert owners == {"podA/engine.log": ["podA/api.log"], "podB/engine.log": ["podB/api.log"]}


def test_timeline_file_column_drops_the_shared_folder(tmp_path, monkeypatch, pack):
    split_logs(tmp_path, monkeypatch)
    (tmp_path / "pod-logs").mkdir()
    for name in ("api.log", "engine.log"):
        (tmp_path / name).rename(tmp_path / "pod-logs" / name)
    report = analyze(expand_inputs(["pod-logs"]), pack)
    buf = io.StringIO()
    render_terminal(report, buf, Redactor(), color=False, width=100)
    rows = buf.getvalue().split("\nTimeline\n", 1)[1].splitlines()[1:]
    assert rows[0].startswith("api.log ") and any(r.startswith("engine.log ") for r in rows)
    assert "pod-logs/" not in "\n".join(rows[:8])

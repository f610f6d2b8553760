"""Logs of one server run beside each other: the log whose symptoms a root in another log
explains is reported as explained (analyze's per-input lines and JSON, markdown, scan's table),
and the API port links runs as a third signal beside time windows and pids."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vcrash.analyze import analyze
from vcrash.classify.diagnose import RunLinks
from vcrash.classify.rules import load_pack
from vcrash.classify.signals import LineObserver
from vcrash.cli import app
from vcrash.harness import parse_sample
from vcrash.read import expand_inputs
from vcrash.redact import Redactor
from vcrash.report.markdown import render_markdown
from vcrash.split import Splitter

ROOT = Path(__file__).resolve().parents[1]
SO_SAMPLE = ROOT / "samples/structured-output-no-valid-param/constructed-0.11.0-docker.log"
STAMP = re.compile(r"\d\d-\d\d \d\d:\d\d:\d\d ")
HEADER = re.compile(r"(?:INFO|ERROR|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] ")
ROOT_RULE = "structured-output-no-valid-param"
runner = CliRunner()


@pytest.fixture(scope="module")
def pack():
    return load_pack([])


def write_pair(folder: Path, api_extra=(), engine_extra=(), edit=lambda line: line, api_edit=None):
    """The structured-output sample split into the API server's and the engine core's logs, with
    extra lines at the top of each (a port, a launch command)."""
    body = parse_sample(SO_SAMPLE).body
    api_edit = api_edit or edit
    folder.mkdir(parents=True, exist_ok=True)
    api = [*api_extra, *(api_edit(x) for x in body if "EngineCore_DP0" not in x)]
    engine = [*engine_extra, *(edit(x) for x in body if "EngineCore_DP0" in x)]
    (folder / "api.log").write_text("\n".join(api) + "\n")
    (folder / "engine.log").write_text("\n".join(engine) + "\n")


def owner_of_api_symptom(report) -> str | None:
    for d in report.diagnoses:
        if any(s.input.endswith("api.log") for s in d.explains) and not d.input.endswith("api.log"):
            return d.rule.id
    return None


# --------------------------------------------------------------------------- per-input status


@pytest.mark.parametrize("order", [["api.log", "engine.log"], ["engine.log", "api.log"]])
def test_json_inputs_say_which_root_explains_the_api_log(tmp_path, monkeypatch, pack, order):
    write_pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    inputs = {i["path"]: i for i in analyze(expand_inputs(order), pack).to_dict(Redactor())["inputs"]}
    assert inputs["api.log"]["explained_by"] == [
        {"input": "engine.log", "rule": ROOT_RULE, "line": 37, "symptoms": [{"rule": "engine-dead", "line": 18}]}]
    assert "explained_by" not in inputs["engine.log"]


def test_markdown_lists_the_api_log_as_explained_not_healthy(tmp_path, monkeypatch, pack):
    write_pair(tmp_path)
    monkeypatch.chdir(tmp_path)
    buf = io.StringIO()
    render_markdown(analyze(expand_inputs(["api.log", "engine.log"]), pack), buf, Redactor())
    text = buf.getvalue()
    assert text.startswith("# vcrash: 2 logs — 1 crashed, 1 explained by another log, 0 healthy, 0 unreadable")
    assert f"| api.log | explained |  |  | engine-dead explained by {ROOT_RULE} at engine.log:37 |" in text
    assert "log(s) with no finding" not in text


def scan(*args):
    return runner.invoke(app, ["scan", *args, "--jobs", "1"])


def test_scan_marks_the_api_log_explained_and_hangs_its_symptom_under_the_root(tmp_path, monkeypatch):
    write_pair(tmp_path / "pod")
    monkeypatch.chdir(tmp_path)
    res = scan("pod", "-f", "json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    logs = {r["path"]: r for r in doc["logs"]}
    api, engine = logs["pod/api.log"], logs["pod/engine.log"]
    assert (api["status"], api["explained_by"], api["diagnoses"]) == ("explained", "pod/engine.log:37", [])
    assert api["explained"][0]["symptoms"] == [{"rule": "engine-dead", "line": 18}]
    assert engine["status"] == "crashed" and engine["rule"] == ROOT_RULE
    assert doc["summary"]["crashed"] == 1 and doc["summary"]["explained"] == 1
    assert [r["rule"] for r in doc["rules"]] == [ROOT_RULE]

    table = scan("pod").stdout
    row = next(line for line in table.splitlines() if line.lstrip().startswith("pod/api.log"))
    assert "explained" in row and f"engine-dead explained by {ROOT_RULE}" in row
    assert "1 crashed, 1 explained by another log, 0 healthy" in table


def test_scan_ci_formats_match_analyze_for_the_same_pair(tmp_path, monkeypatch):
    write_pair(tmp_path / "pod")
    monkeypatch.chdir(tmp_path)
    for fmt in ("sarif", "junit", "gitlab"):
        scanned = scan("pod/api.log", "pod/engine.log", "-f", fmt).stdout
        analyzed = runner.invoke(app, ["analyze", "pod/api.log", "pod/engine.log", "-f", fmt]).stdout
        assert scanned == analyzed, fmt


def test_scan_takes_back_a_kill_from_outside_when_the_engine_log_is_beside_it(tmp_path, monkeypatch):
    """Alone, an API log whose engine core died mid-service reads as killed from outside; with
    the engine core's log in the same folder and run, its root explains the API log."""
    def client_notice(line):
        if "AsyncLLM output_handler failed" not in line:
            return line
        notice = line.replace("[async_llm.py:480] AsyncLLM output_handler failed.",
                              "[core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, "
                              "shutting down client.")
        return notice + "\n" + line

    write_pair(tmp_path / "pod", api_edit=client_notice)
    monkeypatch.chdir(tmp_path)
    alone = json.loads(scan("pod/api.log", "-f", "json").stdout)["logs"][0]
    assert alone["rule"] == "engine-core-killed-externally"
    for fmt in ("junit", "sarif"):
        scanned = scan("pod", "-f", fmt).stdout
        assert scanned == runner.invoke(app, ["analyze", "pod/api.log", "pod/engine.log", "-f", fmt]).stdout
    logs = {r["path"]: r for r in json.loads(scan("pod", "-f", "json").stdout)["logs"]}
    assert logs["pod/api.log"]["status"] == "explained"
    assert {s["rule"] for s in logs["pod/api.log"]["explained"][0]["symptoms"]} == {
        "engine-core-died-at-exit-shutdown-noise", "engine-dead"}


def test_scan_does_not_link_logs_of_different_folders(tmp_path, monkeypatch):
    write_pair(tmp_path / "pod")
    (tmp_path / "other").mkdir()
    (tmp_path / "pod" / "api.log").rename(tmp_path / "other" / "api.log")
    monkeypatch.chdir(tmp_path)
    logs = {r["path"]: r for r in json.loads(scan("pod", "other", "-f", "json").stdout)["logs"]}
    assert logs["other/api.log"]["status"] == "crashed" and logs["other/api.log"]["explained_by"] is None


def test_scan_leaves_a_folder_of_unrelated_runs_alone(tmp_path, monkeypatch):
    def other_day(line):
        return STAMP.sub("11-02 03:00:00 ", line)

    write_pair(tmp_path / "pod", api_edit=other_day)
    monkeypatch.chdir(tmp_path)
    logs = {r["path"]: r for r in json.loads(scan("pod", "-f", "json").stdout)["logs"]}
    assert logs["pod/api.log"]["status"] == "crashed" and not logs["pod/api.log"]["explained_by"]


# --------------------------------------------------------------------------- the port signal


def observed_ports(*payloads: str) -> set[int]:
    splitter, obs = Splitter("t.log"), LineObserver()
    for n, raw in enumerate(payloads, 1):
        for line in splitter.split(n, 0, raw):
            obs.observe(line)
    return obs.ports.get(0, set())


@pytest.mark.parametrize("line,port", [
    ("(APIServer pid=7) INFO 10-21 09:15:04 [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:8011",
     8011),
    ("INFO 10-21 09:15:04 [launcher.py:28] Starting vLLM API server on http://[::]:9001", 9001),
    ("INFO:     Uvicorn running on http://127.0.0.1:8123 (Press CTRL+C to quit)", 8123),
    ("(APIServer pid=7) INFO 10-21 09:14:07 [utils.py:233] non-default args: {'model': '/m', 'port': 8444}", 8444),
    ("INFO 05-02 10:00:00 api_server.py:719] args: Namespace(host=None, port=8555, uvicorn_log_level='info')", 8555),
    ("+ vllm serve /models/qwen --port 8666 --max-model-len 8192", 8666),
    ("+ python -m vllm.entrypoints.openai.api_server --port=8777", 8777),
])
def test_the_observer_reads_the_api_port(line, port):
    assert observed_ports(line) == {port}


@pytest.mark.parametrize("line", [
    "torchrun --master-port 29500 train.py",
    "INFO 10-21 09:14:19 [core.py:77] distributed_init_method=tcp://127.0.0.1:45678 backend=nccl",
    "(APIServer pid=7) INFO 10-21 09:14:07 [utils.py:233] non-default args: {'model': '/m', 'max_model_len': 8192}",
])
def test_other_ports_are_not_the_api_port(line):
    assert observed_ports(line) == set()


def untimed(line):
    return HEADER.sub("", line)


def test_untimed_logs_sharing_a_chosen_port_are_one_run(tmp_path, monkeypatch, pack):
    # No timestamps and no shared pid (the API server is pid 1): only the port ties them.
    write_pair(tmp_path, api_extra=["Starting vLLM API server 0 on http://0.0.0.0:8123"],
               engine_extra=["+ vllm serve /models/qwen2.5-7b --port 8123"], edit=untimed)
    monkeypatch.chdir(tmp_path)
    for order in (["api.log", "engine.log"], ["engine.log", "api.log"]):
        report = analyze(expand_inputs(order), pack)
        assert report.diagnoses[0].rule.id == ROOT_RULE
        assert owner_of_api_symptom(report) == ROOT_RULE


def test_the_default_port_alone_links_nothing(tmp_path, monkeypatch, pack):
    write_pair(tmp_path, api_extra=["Starting vLLM API server 0 on http://0.0.0.0:8000"],
               engine_extra=["+ vllm serve /models/qwen2.5-7b --port 8000"], edit=untimed)
    monkeypatch.chdir(tmp_path)
    report = analyze(expand_inputs(["api.log", "engine.log"]), pack)
    assert report.diagnoses[0].rule.id == ROOT_RULE and owner_of_api_symptom(report) is None


def test_different_ports_are_different_servers_even_at_the_same_time(tmp_path, monkeypatch, pack):
    write_pair(tmp_path, api_extra=["Starting vLLM API server 0 on http://0.0.0.0:8001"],
               engine_extra=["+ vllm serve /models/qwen2.5-7b --port 8002"])
    monkeypatch.chdir(tmp_path)
    report = analyze(expand_inputs(["api.log", "engine.log"]), pack)
    assert report.diagnoses[0].rule.id == ROOT_RULE and owner_of_api_symptom(report) is None
    assert "explained_by" not in report.to_dict(Redactor())["inputs"][0]


@pytest.mark.parametrize("port", [8000, 8123])
def test_clocks_far_apart_outrank_a_shared_port(tmp_path, monkeypatch, pack, port):
    def other_day(line):
        return STAMP.sub("11-02 03:00:00 ", line)

    write_pair(tmp_path, api_extra=[f"Starting vLLM API server 0 on http://0.0.0.0:{port}"],
               engine_extra=[f"+ vllm serve /models/qwen2.5-7b --port {port}"], api_edit=other_day)
    monkeypatch.chdir(tmp_path)
    report = analyze(expand_inputs(["api.log", "engine.log"]), pack)
    assert report.diagnoses[0].rule.id == ROOT_RULE and owner_of_api_symptom(report) is None


def test_run_links_rules_in_order():
    runs = RunLinks(windows={(0, 0): (0.0, 100.0), (1, 0): (50.0, 150.0), (2, 0): (10_000.0, 10_100.0)},
                    pids={0: {311}, 1: {311}, 3: {311}},
                    ports={(0, 0): {8001}, (1, 0): {8002}, (3, 0): {8001}, (4, 0): {8001}, (5, 0): {8000},
                           (6, 0): {8000}})
    assert not runs.linked((0, 0), (1, 0))  # overlapping clocks and a shared pid, but two ports
    assert runs.linked((0, 0), (3, 0))  # no clock on one side: the shared pid
    assert runs.linked((0, 0), (4, 0))  # no clock, no pid: the chosen port
    assert not runs.linked((5, 0), (6, 0))  # only the default port
    assert not runs.linked((0, 0), (2, 0))  # clocks far apart

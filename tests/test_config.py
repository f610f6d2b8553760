"""Rule selection (--select/--ignore) and project settings ([tool.vcrash] / vcrash.toml), ruff-style."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vcrash.cli import app
from vcrash.config import rule_selected
from vcrash.harness import parse_sample

ROOT = Path(__file__).resolve().parents[1]
SO_SAMPLE = ROOT / "samples/structured-output-no-valid-param/constructed-0.11.0-docker.log"
SO = "structured-output-no-valid-param"
runner = CliRunner()


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A project folder with a crash log in logs/, the current directory one level below it."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "server.log").write_text("\n".join(parse_sample(SO_SAMPLE).body) + "\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    return tmp_path


def analyze(ws, *args):
    res = runner.invoke(app, ["analyze", str(ws / "logs" / "server.log"), "-f", "json", *args])
    data = json.loads(res.stdout) if res.stdout.startswith("{") else None
    return res, data


def rules_of(data):
    return [d["rule"] for d in data["diagnoses"]]


def test_selectors_are_ids_or_dash_cut_prefixes_and_the_more_specific_wins():
    assert rule_selected("cuda-oom-weight-loading", ["cuda-oom"], [])
    assert not rule_selected("cudagraph-capture-nccl-failure", ["cuda"], [])  # not a dash-cut prefix
    assert not rule_selected("cuda-oom-weight-loading", [], ["cuda-oom"])
    assert rule_selected("cuda-oom-weight-loading", ["cuda-oom-weight-loading"], ["cuda-oom"])
    assert not rule_selected("cuda-oom-weight-loading", ["cuda-oom"], ["cuda-oom-weight-loading"])
    assert not rule_selected("engine-dead", ["engine-dead"], ["engine-dead"])  # a tie: ignore wins


@pytest.mark.parametrize("args", [["--ignore", SO], ["--ignore", "structured-output"],
                                  ["--ignore", "engine-dead,structured-output-"],
                                  ["--select", "cuda-oom", "--select", "engine-dead"]])
def test_analyze_ignore_and_select(ws, args):
    res, data = analyze(ws, *args)
    assert res.exit_code == 0, res.output
    assert rules_of(data) == []
    # Left out, but said: a silenced crash is not a healthy log.
    assert any(SO in w for w in data["warnings"]), data["warnings"]


def test_analyze_without_selectors_reports_the_crash(ws):
    res, data = analyze(ws)
    assert res.exit_code == 1 and rules_of(data) == [SO]


def test_select_keeps_the_root_and_drops_an_ignored_symptom_under_it(ws):
    res, data = analyze(ws, "--select", "structured-output,engine-dead", "--ignore", "engine-dead")
    assert res.exit_code == 1
    (diag,) = data["diagnoses"]
    assert diag["rule"] == SO and diag["explains"] == []


@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_a_selector_that_names_no_rule_is_exit_2(ws, option):
    res, _ = analyze(ws, option, "structured-outptu")
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0 and "matches no rule" in res.stderr


def test_scan_ignore(ws):
    base = runner.invoke(app, ["scan", str(ws / "logs"), "-f", "json", "-j", "1"])
    assert base.exit_code == 1
    res = runner.invoke(app, ["scan", str(ws / "logs"), "-f", "json", "-j", "1", "--ignore", "structured-output"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["logs"][0]["status"] == "healthy"


def test_pyproject_settings_apply_from_a_parent_folder_and_the_command_line_wins(ws):
    (ws / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.vcrash]\nignore = ["structured-output"]\n'
                                       'fail-on = "note"\n')
    res, data = analyze(ws)
    assert res.exit_code == 0 and rules_of(data) == []
    res, data = analyze(ws, "--ignore", "engine-dead")  # replaces the file's ignore list
    assert res.exit_code == 1 and rules_of(data) == [SO]
    res, _ = analyze(ws, "--ignore", "engine-dead", "--fail-on", "never")
    assert res.exit_code == 0
    scan = runner.invoke(app, ["scan", str(ws / "logs"), "-f", "json", "-j", "1"])
    assert scan.exit_code == 0


def test_vcrash_toml_wins_and_a_pyproject_without_the_table_is_passed_over(ws):
    (ws / "sub" / "pyproject.toml").write_text('[project]\nname = "x"\n')  # nearest, but no [tool.vcrash]
    (ws / "pyproject.toml").write_text('[tool.vcrash]\nselect = ["engine-dead"]\n')
    (ws / "vcrash.toml").write_text('fail-on = "never"\n')
    res, data = analyze(ws)
    assert res.exit_code == 0 and rules_of(data) == [SO]  # vcrash.toml's settings only


def test_rule_folders_from_the_settings_file_are_relative_to_it(ws):
    rules = ws / "team-rules"
    rules.mkdir()
    (rules / "team-so.toml").write_text(
        'id = "team-so"\ntitle = "t"\nkind = "root"\nseverity = "note"\npriority = 99\n[match]\n'
        'exception_message = "^No valid structured output parameter found"\nexception_type = ["ValueError"]\n')
    (ws / "vcrash.toml").write_text('rules = ["team-rules"]\nselect = ["team-so"]\n')
    res, data = analyze(ws)
    assert res.exit_code == 0, res.output
    assert "team-so" in rules_of(data)
    listed = runner.invoke(app, ["rules", "list", "-f", "json"])
    assert "team-so" in {r["id"] for r in json.loads(listed.stdout)}


@pytest.mark.parametrize("body,what", [
    ("fail-on = \n", "invalid TOML"),
    ('fail_on = "note"\n', "unknown vcrash setting"),
    ('fail-on = "sometimes"\n', "fail-on must be"),
    ("select = 3\n", "select must be"),
    ('rules = ["nowhere"]\n', "rule folder not found"),
])
def test_a_bad_settings_file_is_one_line_exit_2(ws, body, what):
    (ws / "vcrash.toml").write_text(body)
    res, _ = analyze(ws)
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert "\n" not in line and what in line, res.stderr

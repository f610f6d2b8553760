"""The CI formats of `vcrash analyze` (markdown, sarif, junit, github, gitlab): goldens, the SARIF
schema, a JUnit round-trip, workflow-command escaping, redaction."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from formats_support import RULES, SCHEMA, check_golden, make_workspace, normalize
from vcrash.analyze import analyze
from vcrash.classify.rules import load_pack
from vcrash.cli import app
from vcrash.read import expand_inputs
from vcrash.redact import Redactor
from vcrash.report import RENDERERS
from vcrash.report.findings import batch_from_report
from vcrash.report.github import escape_data, escape_property, github_lines, workflow_command

CI_FORMATS = ("markdown", "sarif", "junit", "github", "gitlab")
SECRET = "hf_abcdefghijklmnopqrstuvwxyz012345"


@pytest.fixture(scope="module")
def pack():
    return load_pack([str(RULES)], include_bundled=False)


@pytest.fixture()
def logs(tmp_path, monkeypatch):
    logs = make_workspace(tmp_path, unreadable=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return logs


def render(report, fmt: str, redact: bool = True) -> str:
    buf = io.StringIO()
    RENDERERS[fmt](report, buf, Redactor(enabled=redact))
    return buf.getvalue()


def run_analyze(paths, pack):
    return analyze(expand_inputs(paths), pack)


@pytest.mark.parametrize("fmt", CI_FORMATS)
def test_golden_one_log(logs, pack, fmt):
    report = run_analyze(["logs/structured-output.log"], pack)
    ext = {"sarif": "sarif.json", "gitlab": "gitlab.json", "junit": "xml", "markdown": "md", "github": "txt"}[fmt]
    check_golden(f"analyze-structured-output.{ext}", normalize(render(report, fmt), pack.version))


@pytest.mark.parametrize("fmt", CI_FORMATS)
def test_golden_several_logs(logs, pack, fmt):
    report = run_analyze(["logs/unknown-crash.log", "logs/healthy.log", "logs/shutdown-noise.log"], pack)
    ext = {"sarif": "sarif.json", "gitlab": "gitlab.json", "junit": "xml", "markdown": "md", "github": "txt"}[fmt]
    check_golden(f"analyze-several.{ext}", normalize(render(report, fmt), pack.version))


def _validator():
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_sarif_is_valid_and_stable(logs, pack):
    report = run_analyze(["logs"], pack)
    doc = json.loads(render(report, "sarif"))
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, errors[0].message
    run = doc["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert "structured-output-no-valid-param" in rule_ids
    rule = run["tool"]["driver"]["rules"][rule_ids.index("structured-output-no-valid-param")]
    assert rule["help"]["markdown"].startswith("# structured-output-no-valid-param")
    assert rule["defaultConfiguration"]["level"] == "error"
    res = next(r for r in run["results"] if r["ruleId"] == "structured-output-no-valid-param")
    loc = res["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "logs/structured-output.log"
    assert loc["region"]["startLine"] == 21
    assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
    # same input, same fingerprints (a second run is byte-identical)
    again = json.loads(render(run_analyze(["logs"], pack), "sarif"))
    assert [r["partialFingerprints"] for r in again["runs"][0]["results"]] == \
        [r["partialFingerprints"] for r in run["results"]]
    assert res["partialFingerprints"]["vcrash/v1"] == report.diagnoses[0].fingerprint or any(
        d.fingerprint == res["partialFingerprints"]["vcrash/v1"] for d in report.diagnoses)


def test_sarif_healthy_log_is_valid(logs, pack):
    doc = json.loads(render(run_analyze(["logs/healthy.log"], pack), "sarif"))
    assert not list(_validator().iter_errors(doc))
    assert doc["runs"][0]["results"] == []


def test_junit_round_trip(logs, pack):
    report = run_analyze(["logs"], pack)
    root = ET.fromstring(render(report, "junit").encode("utf-8"))
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(report.inputs) == int(suite.get("tests"))
    names = [c.get("name") for c in cases]
    assert names == [i.path for i in report.inputs]
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failed) == {"logs/structured-output.log", "logs/unknown-crash.log", "logs/unknown-crash-2.log.gz"}
    assert int(suite.get("failures")) == 3 and suite.get("errors") == "0"
    f = failed["logs/structured-output.log"]
    assert f.get("type") == "structured-output-no-valid-param"
    assert "ValueError: No valid structured output parameter found" in f.get("message")
    assert "Traceback (most recent call last):" in f.text and "Fix:" in f.text
    healthy = next(c for c in cases if c.get("name") == "logs/healthy.log")
    assert list(healthy) == []


def test_junit_survives_control_characters(tmp_path, monkeypatch, pack):
    log = tmp_path / "ctl.log"
    log.write_bytes((RULES.parent / "scan" / "unknown-crash.log").read_bytes()
                    .replace(b"50% done", b"50% done \x01\x1b[0m <&>"))
    monkeypatch.chdir(tmp_path)
    text = render(run_analyze(["ctl.log"], pack), "junit")
    case = ET.fromstring(text.encode("utf-8")).find("testsuite/testcase")
    assert case.find("failure") is not None


def test_workflow_command_escaping():
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    line = workflow_command("error", "x: 1, y\n2", file="dir/a,b:c.log", line=3, title="t: u, v")
    assert line == "::error file=dir/a%2Cb%3Ac.log,line=3,title=t%3A u%2C v::x: 1, y%0A2"


def test_github_escapes_evidence(logs, pack):
    text = render(run_analyze(["logs/unknown-crash.log"], pack), "github")
    line = text.splitlines()[0]
    assert line.startswith("::error file=logs/unknown-crash.log,line=8,title=vcrash (unclassified-crash)%3A ")
    message = line.split("::", 2)[2]
    assert "50%25 done" in message and "\n" not in message and "%0A" in message


def test_github_caps_annotations_and_ranks(logs, pack):
    report = run_analyze(["logs"], pack)
    batch = batch_from_report(report, Redactor())
    # fifteen copies of the batch's logs: more findings than GitHub shows
    batch.results = batch.results * 5
    lines = github_lines(batch)
    commands = [ln for ln in lines if ln.startswith("::")]
    assert len(commands) == 10
    levels = [c.split(" ", 1)[0] for c in commands]
    assert levels == sorted(levels, key=["::error", "::warning", "::notice"].index)
    assert lines[-1].startswith("vcrash: ") and "not annotated" in lines[-1]


def test_github_step_summary(logs, pack, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("previous step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    render(run_analyze(["logs/structured-output.log"], pack), "github")
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("previous step\n# vcrash: structured-output-no-valid-param")
    assert "```pytb" in text


def test_gitlab_code_quality(logs, pack):
    issues = json.loads(render(run_analyze(["logs"], pack), "gitlab"))
    assert issues, "expected findings"
    for issue in issues:
        assert set(issue) >= {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["severity"] in ("blocker", "critical", "major", "minor", "info")
        assert isinstance(issue["location"]["lines"]["begin"], int)
    fps = [i["fingerprint"] for i in issues]
    assert len(fps) == len(set(fps)), "GitLab shows one issue per fingerprint: it must include the location"
    by_rule = {i["check_name"]: i for i in issues}
    assert by_rule["structured-output-no-valid-param"]["severity"] == "blocker"
    assert by_rule["unclassified-crash"]["severity"] == "critical"
    assert by_rule["engine-core-died-at-exit-shutdown-noise"]["severity"] == "minor"
    assert by_rule["fixture-slow-step-note"]["severity"] == "info"


def test_markdown_ticket(logs, pack):
    text = render(run_analyze(["logs/structured-output.log"], pack), "markdown")
    for heading in ("## What happened", "## Root traceback", "## Symptoms it explains", "## Timeline",
                    "## How to fix it", "## Version advice", "## Reproduce"):
        assert heading in text
    assert "```pytb\nTraceback (most recent call last):" in text
    assert "vcrash repro run structured-output-no-valid-param" in text


@pytest.mark.parametrize("fmt", CI_FORMATS)
def test_redaction_applies_to_every_format(logs, pack, fmt, monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "s.md"))
    report = run_analyze(["logs/unknown-crash.log"], pack)
    assert SECRET not in render(report, fmt)
    if fmt == "github":
        assert SECRET not in (tmp_path / "s.md").read_text()
    assert SECRET in render(report, fmt, redact=False)


def test_cli_several_outputs(logs, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", "logs/structured-output.log", "--rules", str(RULES),
                              "-o", f"sarif={tmp_path}/out.sarif", "-o", f"junit={tmp_path}/out.xml",
                              "-o", "gitlab"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)[0]["check_name"] == "structured-output-no-valid-param"
    assert json.loads((tmp_path / "out.sarif").read_text())["version"] == "2.1.0"
    ET.parse(tmp_path / "out.xml")

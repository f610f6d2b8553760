"""`vcrash scan`: goldens per format, parallel == serial, the --fail-on exit-code matrix,
unreadable logs, several outputs in one run."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from formats_support import FIXTURES, RULES, SCHEMA, check_golden, make_workspace, normalize
from vcrash.classify.rules import load_pack
from vcrash.cli import app
from vcrash.read import expand_inputs
from vcrash.report.findings import Batch
from vcrash.scan import ROW_COLUMNS, run_scan, scan_renderer

SCAN_FORMATS = ("table", "csv", "json", "jsonl", "sarif", "junit", "github", "gitlab", "markdown")
# Directory walks skip dangling symlinks; named explicitly, one is an unreadable input.
ALL = ["logs", "logs/vanished.log"]
EXT = {"table": "txt", "csv": "csv", "json": "json", "jsonl": "jsonl", "sarif": "sarif.json", "junit": "xml",
       "github": "github.txt", "gitlab": "gitlab.json", "markdown": "md"}


@pytest.fixture()
def ws(tmp_path, monkeypatch):
    make_workspace(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def pack():
    return load_pack([str(RULES)], include_bundled=False)


def scan(paths, pack, jobs=1):
    skipped = []
    results = run_scan(expand_inputs(paths, skipped=skipped), [str(RULES)], include_bundled=False, jobs=jobs)
    return Batch(results, {r.id: r for r in pack.rules}, pack.version, skipped=[s.to_dict() for s in skipped])


def rendered(batch, fmt):
    buf = io.StringIO()
    scan_renderer(fmt)(batch, buf)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", SCAN_FORMATS)
def test_golden(ws, pack, fmt):
    batch = scan(ALL, pack)
    check_golden(f"scan.{EXT[fmt]}", normalize(rendered(batch, fmt), pack.version))


def test_rows(ws, pack):
    batch = scan(ALL, pack)
    rows = {r.path: r.row() for r in batch.results}
    assert list(next(iter(rows.values()))) == list(ROW_COLUMNS)
    assert rows["logs/structured-output.log"]["status"] == "crashed"
    assert rows["logs/structured-output.log"]["rule"] == "structured-output-no-valid-param"
    assert rows["logs/structured-output.log"]["line"] == 21
    assert rows["logs/unknown-crash-2.log.gz"]["rule"] == "unclassified-crash"  # compressed logs are read
    assert rows["logs/healthy.log"]["status"] == "healthy" and rows["logs/healthy.log"]["rule"] is None
    assert rows["logs/vanished.log"]["status"] == "unreadable" and "vanished.log" in rows["logs/vanished.log"]["error"]
    # rows stay small: no report, no timeline, only the primary traceback text
    assert all(r.timeline == [] for r in batch.results)


def test_scan_sarif_is_valid(ws, pack):
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    doc = json.loads(rendered(scan(["logs"], pack), "sarif"))
    jsonschema.validators.validator_for(schema)(schema).validate(doc)


def test_scan_junit_one_case_per_log(ws, pack):
    batch = scan(ALL, pack)
    suite = ET.fromstring(rendered(batch, "junit")).find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [r.path for r in batch.results]
    assert suite.get("errors") == "1" and suite.get("failures") == "3"
    vanished = next(c for c in cases if c.get("name") == "logs/vanished.log")
    assert vanished.find("error") is not None


runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["scan", *args])


def test_jobs_2_equals_jobs_1(ws):
    one = invoke(*ALL, "--rules", str(RULES), "-f", "json", "--jobs", "1")
    two = invoke(*ALL, "--rules", str(RULES), "-f", "json", "--jobs", "2")
    assert one.exit_code == two.exit_code == 2  # the dangling symlink is an input error
    assert one.stdout == two.stdout
    doc = json.loads(two.stdout)
    assert doc["summary"]["logs"] == 7 and doc["summary"]["unreadable"] == 1


@pytest.mark.parametrize("log,fail_on,code", [
    ("structured-output.log", "error", 1), ("structured-output.log", "warning", 1),
    ("structured-output.log", "note", 1), ("structured-output.log", "never", 0),
    ("shutdown-noise.log", "error", 0), ("shutdown-noise.log", "warning", 1),
    ("shutdown-noise.log", "note", 1), ("shutdown-noise.log", "never", 0),
    ("slow-step.log", "error", 0), ("slow-step.log", "warning", 0),
    ("slow-step.log", "note", 1), ("slow-step.log", "never", 0),
    ("healthy.log", "error", 0), ("healthy.log", "note", 0),
])
def test_fail_on_matrix(ws, log, fail_on, code):
    res = invoke(f"logs/{log}", "--rules", str(RULES), "--fail-on", fail_on, "-f", "csv")
    assert res.exit_code == code, res.output
    # analyze gates the same way
    res = runner.invoke(app, ["analyze", f"logs/{log}", "--rules", str(RULES), "--fail-on", fail_on, "-f", "json"])
    assert res.exit_code == code, res.output


def test_unreadable_does_not_abort(ws, tmp_path):
    res = invoke(*ALL, "--rules", str(RULES), "-f", "csv", "-o", f"junit={tmp_path}/r.xml")
    assert res.exit_code == 2
    assert "logs/vanished.log" in res.stdout and "unreadable" in res.stdout
    assert "logs/structured-output.log" in res.stdout
    assert res.stderr.count("\n") >= 1 and "vanished.log" in res.stderr
    assert (tmp_path / "r.xml").exists()


def test_several_outputs_in_one_run(ws, tmp_path):
    res = invoke("logs/structured-output.log", "logs/healthy.log", "--rules", str(RULES),
                 "-o", f"sarif={tmp_path}/s.sarif", "-o", f"gitlab={tmp_path}/g.json", "-o", "jsonl")
    assert res.exit_code == 1, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["path"] for r in rows] == ["logs/structured-output.log", "logs/healthy.log"]
    assert json.loads((tmp_path / "s.sarif").read_text())["runs"][0]["results"]
    assert json.loads((tmp_path / "g.json").read_text())[0]["check_name"] == "structured-output-no-valid-param"


def test_scan_and_analyze_agree(ws, tmp_path):
    """The same logs give the same CI output from scan and from analyze over several inputs."""
    logs = ["logs/structured-output.log", "logs/unknown-crash.log", "logs/healthy.log"]
    for fmt in ("sarif", "gitlab", "junit", "github"):
        a = runner.invoke(app, ["analyze", *logs, "--rules", str(RULES), "-f", fmt])
        s = invoke(*logs, "--rules", str(RULES), "-f", fmt)
        assert a.stdout == s.stdout, fmt


@pytest.mark.parametrize("args,message", [
    (["nope/"], "no such file"),
    (["logs", "--rules", "no-such-dir"], "rule folder not found"),
    (["logs", "--format", "yaml"], "--format"),
    (["logs", "-o", "yaml=x"], "unknown format"),
    (["logs", "--fail-on", "sometimes"], "--fail-on"),
    (["logs", "--jobs", "0"], "--jobs"),
    (["logs", "-o", "json", "-o", "sarif"], "json and sarif would both go to stdout"),
    (["logs", "-f", "csv", "-o", "jsonl=-"], "csv and jsonl would both go to stdout"),
])
def test_usage_errors_exit_2(ws, args, message):
    res = invoke(*args)
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output


def test_redaction_toggle(ws):
    red = invoke("logs/unknown-crash.log", "--rules", str(RULES), "-f", "csv")
    raw = invoke("logs/unknown-crash.log", "--rules", str(RULES), "-f", "csv", "--no-redact")
    secret = "hf_abcdefghijklmnopqrstuvwxyz012345"
    assert secret not in red.stdout and secret in raw.stdout


def test_fixtures_unchanged():
    """Goldens depend on these logs; a change here needs VCRASH_BLESS=1."""
    assert sorted(p.name for p in FIXTURES.iterdir()) == [
        "healthy.log", "shutdown-noise.log", "slow-step.log", "structured-output.log", "unknown-crash.log"]


# -- issue 13: a CI gate never says healthy about what it could not read -------------------------
def _damaged_workspace(ws):
    """logs2/: a healthy log and the same log as a .gz cut in the middle."""
    import gzip

    d = ws / "logs2"
    d.mkdir()
    body = (FIXTURES / "healthy.log").read_bytes() * 40
    (d / "ok.log").write_bytes(body)
    comp = gzip.compress(body, mtime=0)
    (d / "cut.log.gz").write_bytes(comp[: len(comp) // 2])
    return d


def test_damaged_input_has_its_own_status_in_every_format(ws, pack):
    _damaged_workspace(ws)
    batch = scan(["logs2"], pack)
    rows = {r.path: r.row() for r in batch.results}
    assert rows["logs2/cut.log.gz"]["status"] == "damaged"
    assert "truncated" in rows["logs2/cut.log.gz"]["warning"] and rows["logs2/cut.log.gz"]["lines"] > 0
    assert rows["logs2/ok.log"]["status"] == "healthy" and rows["logs2/ok.log"]["warning"] is None
    doc = json.loads(rendered(batch, "json"))
    assert doc["summary"]["damaged"] == 1 and doc["summary"]["healthy"] == 1
    assert "damaged" in rendered(batch, "table") and "1 damaged" in rendered(batch, "table")
    sarif = json.loads(rendered(batch, "sarif"))
    (note,) = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "warning" and "truncated" in note["message"]["text"]
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "logs2/cut.log.gz"
    import jsonschema

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema)(schema).validate(sarif)
    case = next(c for c in ET.fromstring(rendered(batch, "junit")).iter("testcase")
                if c.get("name") == "logs2/cut.log.gz")
    assert case.find("error").get("type") == "damaged"
    github = rendered(batch, "github")
    assert "::warning file=logs2/cut.log.gz" in github and "damaged log" in github
    (issue,) = json.loads(rendered(batch, "gitlab"))
    assert issue["check_name"] == "vcrash-damaged-input" and issue["location"]["path"] == "logs2/cut.log.gz"
    assert "logs2/cut.log.gz" in rendered(batch, "markdown") and "1 damaged" in rendered(batch, "markdown")


@pytest.mark.parametrize("fail_on,code", [("error", 0), ("warning", 1), ("note", 1), ("never", 0)])
def test_damaged_input_counts_as_a_warning(ws, fail_on, code):
    _damaged_workspace(ws)
    res = invoke("logs2", "--rules", str(RULES), "--fail-on", fail_on, "-f", "json")
    assert res.exit_code == code, res.output
    assert "vcrash: warning: logs2/cut.log.gz: compressed stream damaged" in res.stderr
    res = runner.invoke(app, ["analyze", "logs2/cut.log.gz", "--rules", str(RULES), "--fail-on", fail_on,
                              "-f", "json"])
    assert res.exit_code == code, res.output
    report = json.loads(res.stdout)
    assert report["inputs"][0]["damaged"] is True and "truncated" in report["warnings"][0]
    (line,) = res.stderr.splitlines()
    assert line.startswith("vcrash: warning: logs2/cut.log.gz: compressed stream damaged")

"""The CLI contract: inputs, the JSON report, exit codes, rule folders, the runbook."""

import bz2
import gzip
import json
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from vcrash.cli import app
from vcrash.harness import parse_sample

ROOT = Path(__file__).resolve().parents[1]
SO_SAMPLE = ROOT / "samples/structured-output-no-valid-param/constructed-0.11.0-docker.log"
GOLDEN = Path(__file__).parent / "golden"
runner = CliRunner()


def run(*args, input=None):
    return runner.invoke(app, list(args), input=input)


@pytest.fixture
def crash_log(tmp_path):
    """The body of the structured-output sample, without the harness header."""
    sample = parse_sample(SO_SAMPLE)
    path = tmp_path / "server.log"
    path.write_text("\n".join(sample.body) + "\n")
    return path, sample


def test_json_report_contract(crash_log):
    path, sample = crash_log
    res = run("analyze", str(path), "--format", "json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert data["schema"] == "vcrash/report@1"
    for key in ("vcrash_version", "rule_pack_version", "inputs", "streams", "tracebacks", "diagnoses"):
        assert key in data
    assert data["inputs"][0]["vllm_version"] == "0.11.0"
    first = data["diagnoses"][0]
    for key in ("rank", "rule", "title", "kind", "severity", "confidence", "input", "stream", "line", "traceback",
                "exception", "explains", "summary", "resolution", "references", "affected_versions", "fixed_in",
                "reproducer", "fingerprint", "liveness"):
        assert key in first, key
    assert first["rule"] == "structured-output-no-valid-param" and first["rank"] == 1
    assert first["line"] == sample.root_line
    assert first["exception"] == {"type": "ValueError", "message": "No valid structured output parameter found"}
    assert first["stream"].endswith(":EngineCore_DP0:311")
    assert {e["rule"] for e in first["explains"]} == {"engine-dead"}
    tb = next(t for t in data["tracebacks"] if t["id"] == first["traceback"])
    assert tb["duplicates"] and tb["exceptions"][0]["frames"][0]["function"] == "run_engine_core"
    stream_ids = {s["id"] for s in data["streams"]}
    assert first["stream"] in stream_ids


def test_fingerprint_is_stable_across_paths_and_versions(crash_log, tmp_path):
    path, _ = crash_log
    other = tmp_path / "elsewhere.log"
    other.write_text(path.read_text().replace("/usr/local/lib/python3.12/dist-packages", "/opt/venv/lib"))
    fp = [json.loads(run("analyze", str(p), "-f", "json").stdout)["diagnoses"][0]["fingerprint"] for p in (path, other)]
    assert fp[0] == fp[1]


@pytest.mark.parametrize("compress", ["gz", "zst", "bz2", "xz"])
def test_compressed_inputs(crash_log, tmp_path, compress):
    path, _ = crash_log
    data = path.read_bytes()
    packed = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
              "zst": zstandard.ZstdCompressor().compress}[compress](data)
    target = tmp_path / f"server.log.{compress}"
    target.write_bytes(packed)
    out = json.loads(run("analyze", str(target), "-f", "json").stdout)
    assert out["diagnoses"][0]["rule"] == "structured-output-no-valid-param"
    assert out["inputs"][0]["compression"] == {"gz": "gzip", "zst": "zstd", "bz2": "bz2", "xz": "xz"}[compress]


def test_stdin_directory_and_glob(crash_log, tmp_path):
    path, _ = crash_log
    res = run("analyze", "-", "-f", "json", input=path.read_text())
    assert json.loads(res.stdout)["inputs"][0]["path"] == "<stdin>"
    (tmp_path / "sub").mkdir()
    shutil.copy(path, tmp_path / "sub" / "b.log")
    res = run("analyze", str(tmp_path), "-f", "json")
    assert len(json.loads(res.stdout)["inputs"]) == 2
    res = run("analyze", str(tmp_path / "**" / "*.log"), "-f", "json")
    assert len(json.loads(res.stdout)["inputs"]) == 2


def test_exit_codes(crash_log, tmp_path):
    path, _ = crash_log
    healthy = tmp_path / "ok.log"
    healthy.write_text("(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.32.0\n")
    assert run("analyze", str(healthy), "-f", "json").exit_code == 0
    assert json.loads(run("analyze", str(healthy), "-f", "json").stdout)["diagnoses"] == []
    assert run("analyze", str(path), "-f", "json").exit_code == 1
    assert run("analyze", str(path), "-f", "json", "--fail-on", "never").exit_code == 0
    res = run("analyze", str(tmp_path / "missing.log"))
    assert res.exit_code == 2 and "no such file" in res.stderr and "Traceback" not in res.stderr
    assert run("analyze", str(path), "--format", "nope").exit_code == 2


def test_bad_user_rule_is_one_line_exit_2(crash_log, tmp_path):
    path, _ = crash_log
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "broken.toml").write_text('id = "broken"\nkind = "root"\nseverity = "error"\n[match]\nexception_message = "(unclosed"\n')
    res = run("analyze", str(path), "--rules", str(rules))
    assert res.exit_code == 2
    assert "broken.toml" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_user_rule_overrides_bundled_by_id(crash_log, tmp_path):
    path, _ = crash_log
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "structured-output-no-valid-param.toml").write_text(
        'id = "structured-output-no-valid-param"\ntitle = "Ours"\nkind = "root"\nseverity = "warning"\n'
        'priority = 95\nexplains = ["engine-dead"]\n[match]\nprefilter = ["structured output"]\nexception_message = "structured output"\n'
        '[doc]\nsummary = "s"\nwhy = "w"\nresolution = ["r"]\n')
    res = run("analyze", str(path), "--rules", str(rules), "-f", "json", "--fail-on", "error")
    first = json.loads(res.stdout)["diagnoses"][0]
    assert first["title"] == "Ours" and first["severity"] == "warning"
    assert res.exit_code == 0  # a warning is below --fail-on error


def test_multiple_outputs(crash_log, tmp_path):
    path, _ = crash_log
    target = tmp_path / "r.json"
    res = run("analyze", str(path), "-o", f"json={target}", "-o", "jsonl")
    assert json.loads(target.read_text())["schema"] == "vcrash/report@1"
    assert json.loads(res.stdout.splitlines()[0])["rule"] == "structured-output-no-valid-param"


def test_text_report_golden(crash_log, monkeypatch):
    path, _ = crash_log
    monkeypatch.chdir(path.parent)
    res = run("analyze", "server.log", "--format", "text")
    text = res.stdout
    golden = GOLDEN / "terminal" / "analyze-structured-output.txt"
    if os.environ.get("VCRASH_BLESS") or not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


def test_explain_and_rules_commands():
    res = run("explain", "structured-output-no-valid-param", "--format", "markdown")
    assert res.exit_code == 0
    for heading in ("## What happened", "## Why it happens", "## How to fix it", "## References"):
        assert heading in res.stdout
    assert run("explain", "no-such-rule").exit_code == 2
    res = run("rules", "list", "--format", "json")
    ids = {r["id"] for r in json.loads(res.stdout)}
    assert {"structured-output-no-valid-param", "engine-core-timeout", "unclassified-crash"} <= ids
    assert "id = " in run("rules", "show", "engine-dead").stdout


def test_module_entry_point_and_version(crash_log):
    path, _ = crash_log
    proc = subprocess.run([sys.executable, "-m", "vcrash", "analyze", str(path), "-f", "json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and json.loads(proc.stdout)["diagnoses"]
    proc = subprocess.run([sys.executable, "-m", "vcrash", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("vcrash ")
    proc = subprocess.run([sys.executable, "-m", "vcrash", "analyze", "/nonexistent/x.log"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_log_text_is_never_rich_markup(tmp_path):
    path = tmp_path / "markup.log"
    path.write_text("(APIServer pid=1) ERROR 01-01 00:00:00 [x.py:1] boom [/] [bold red]x[/bold\n"
                    "Traceback (most recent call last):\n"
                    '  File "a[/].py", line 1, in <module>\n'
                    "ValueError: [/x] [link=http://evil]\n")
    for fmt in ("rich", "text"):
        res = run("analyze", str(path), "-f", fmt)
        assert res.exit_code == 1, res.stderr
        assert "[/x] [link=http://evil]" in res.stdout.replace("\x1b[0m", "").replace("\x1b[91m", "")


STOP_SAMPLE = ROOT / "samples/interrupted-shutdown/constructed-0.11-second-ctrl-c.log"


def test_interrupt_after_a_clean_shutdown_is_a_note(tmp_path):
    body = parse_sample(STOP_SAMPLE).body
    path = tmp_path / "stop.log"
    path.write_text("\n".join(body) + "\n")
    res = run("analyze", str(path), "-f", "json")
    assert res.exit_code == 0, res.output
    (diag,) = json.loads(res.stdout)["diagnoses"]
    assert (diag["rule"], diag["kind"], diag["severity"]) == ("interrupted-shutdown", "context", "note")
    assert run("analyze", str(path), "-f", "json", "--fail-on", "note").exit_code == 1


def test_interrupt_while_serving_stays_a_crash(tmp_path):
    # The same traceback with no shutdown sequence before it: Ctrl-C in the middle of serving.
    body = [l for l in parse_sample(STOP_SAMPLE).body if "hutting down" not in l and "shutdown" not in l]
    path = tmp_path / "serving.log"
    path.write_text("\n".join(body) + "\n")
    res = run("analyze", str(path), "-f", "json")
    assert res.exit_code == 1
    assert json.loads(res.stdout)["diagnoses"][0]["rule"] == "unclassified-crash"


def test_sigterm_handlers_interrupt_and_a_schedulers_cancel_are_stops(tmp_path):
    """vLLM's SIGTERM handler raises KeyboardInterrupt("terminated"): a stop, not a crash. Slurm's
    `*** JOB … CANCELLED AT …` ends a job on purpose: named as such, what follows it is teardown."""
    sigterm = ["INFO 06-30 10:00:00 [api_server.py:1] vLLM API server version 0.9.1",
               "Traceback (most recent call last):",
               '  File "/x/vllm/entrypoints/openai/api_server.py", line 1307, in signal_handler',
               '    raise KeyboardInterrupt("terminated")', "KeyboardInterrupt: terminated"]
    path = tmp_path / "sigterm.log"
    path.write_text("\n".join(sigterm) + "\n")
    (diag,) = json.loads(run("analyze", str(path), "-f", "json").stdout)["diagnoses"]
    assert (diag["rule"], diag["severity"]) == ("interrupted-shutdown", "note")
    path.write_text("\n".join(sigterm[:-1] + ["KeyboardInterrupt: by hand"]) + "\n")
    assert json.loads(run("analyze", str(path), "-f", "json").stdout)["diagnoses"][0]["rule"] == "unclassified-crash"
    slurm = ["(APIServer pid=7) INFO 12-20 22:26:02 [loggers.py:236] Engine 000: Avg prompt throughput: 0.0 tokens/s",
             "slurmstepd: error: *** JOB 5858 ON gpu-h05 CANCELLED AT 2025-12-21T02:31:17 DUE TO TIME LIMIT ***"]
    path.write_text("\n".join(slurm + ["(APIServer pid=7) ERROR 12-21 02:31:18 [async_llm.py:1] EngineDeadError"]) + "\n")
    diags = json.loads(run("analyze", str(path), "-f", "json").stdout)["diagnoses"]
    assert [(d["rule"], d["severity"]) for d in diags] == [("slurm-job-cancelled", "warning")]  # the error after it is teardown
    path.write_text("\n".join(slurm[:1] + ["slurmstepd: error: Detected 1 oom_kill event in StepId=5858.0"]) + "\n")
    assert run("analyze", str(path), "-f", "json").exit_code == 1  # an error the scheduler reports is not a stop


@pytest.mark.parametrize("args", [["-o", "json", "-o", "markdown"], ["-f", "text", "-o", "sarif=-"]])
def test_two_outputs_on_stdout_are_refused(crash_log, args):
    path, _ = crash_log
    res = run("analyze", str(path), *args)
    assert res.exit_code == 2
    assert res.stdout == "" and res.stderr.count("\n") == 1 and "would both go to stdout" in res.stderr


def test_interrupted_shutdown_can_be_explained_ignored_and_listed_by_scan(tmp_path):
    path = tmp_path / "stop.log"
    path.write_text("\n".join(parse_sample(STOP_SAMPLE).body) + "\n")
    assert "planned stop" in run("explain", "interrupted-shutdown", "-f", "text").stdout
    res = run("analyze", str(path), "-f", "json", "--ignore", "interrupted-shutdown", "--fail-on", "note")
    assert res.exit_code == 0 and json.loads(res.stdout)["diagnoses"] == []
    sarif = json.loads(run("scan", str(path), "-f", "sarif").stdout)
    assert [r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]] == ["interrupted-shutdown"]


def test_interrupt_after_a_crash_stays_in_that_crash_s_cascade(tmp_path, crash_log):
    path, _ = crash_log
    stop = parse_sample(STOP_SAMPLE).body
    tail = stop[next(i for i, line in enumerate(stop) if "Shutting down FastAPI" in line):]
    path.write_text(path.read_text() + "\n".join(tail) + "\n")
    (diag,) = json.loads(run("analyze", str(path), "-f", "json").stdout)["diagnoses"]
    assert diag["rule"] == "structured-output-no-valid-param"
    assert {e["rule"] for e in diag["explains"]} == {"engine-dead", "unclassified-crash"}


def test_the_cli_collects_young_objects_at_its_own_pace():
    """The CLI's process (not a library caller's) collects its youngest generation every
    YOUNG_THRESHOLD new objects: Python's 700 cost 1-2 s on logs of 100 K processes."""
    from vcrash.collector import YOUNG_THRESHOLD

    code = ("import gc, sys\nfrom vcrash import cli\nbefore = gc.get_threshold()[0]\nsys.argv = ['vcrash', '--version']\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\nprint(before, gc.get_threshold()[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["700", str(YOUNG_THRESHOLD)]

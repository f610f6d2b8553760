"""Slow-but-alive versus hung, on captured and constructed timeout logs."""

from pathlib import Path

from vcrash.classify.rules import load_pack
from vcrash.harness import analyze_lines, parse_sample, run_sample

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
PACK = load_pack()


def verdict(rel):
    sample = parse_sample(SAMPLES / rel)
    report = analyze_lines(rel, sample.body, PACK)
    return report.diagnoses[0].liveness


def test_captured_slow_worker_is_slow_and_frozen_worker_is_hung():
    slow = verdict("v1-execute-model-rpc-timeout/slow-worker-0.32.0.log")
    hung = verdict("v1-execute-model-rpc-timeout/hung-worker-sample-tokens-0.32.0.log")
    assert slow["verdict"] == "slow" and hung["verdict"] == "hung"
    assert slow["stalled"].split(":")[-2] == "Worker"
    assert hung["last_progress"]["seconds_before_timeout"] >= 0
    assert any(e["kind"] == "stall" for e in hung["evidence"])


def test_stated_timeout_is_read_from_the_message():
    live = verdict("v1-engine-startup-ready-timeout/constructed-0.17-slow-load.log")
    assert live["timeout_s"] == 300 and live["timeout_source"] == "message"
    assert live["stalled"].split(":")[-2] == "EngineCore_DP0"


def test_year_comes_from_full_timestamps_in_the_log():
    live = verdict("engine-core-timeout/constructed-wrapper-hung.log")
    assert 0 < live["last_progress"]["seconds_before_timeout"] < 600


def test_a_wrong_liveness_marker_fails_the_sample(tmp_path):
    src = (SAMPLES / "v1-execute-model-rpc-timeout/slow-worker-0.32.0.log").read_text()
    bad = tmp_path / "flipped.log"
    bad.write_text(src.replace("#=LIVENESS=# slow", "#=LIVENESS=# hung"))
    result = run_sample(parse_sample(bad), PACK)
    assert any("liveness expected hung, got slow" in p for p in result.problems)


def test_advice_follows_the_verdict():
    slow = verdict("v1-execute-model-rpc-timeout/slow-worker-0.32.0.log")
    hung = verdict("v1-execute-model-rpc-timeout/hung-worker-sample-tokens-0.32.0.log")
    assert f"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={slow['recommended_deadline_s']}" in slow["advice"]
    assert slow["recommended_deadline_s"] > slow["timeout_s"] and slow["basis"]
    assert "py-spy dump --pid 18780" in hung["advice"] and "longer deadline will not help" in hung["advice"]
    assert hung["recommended_deadline_s"] is None
    start = verdict("v1-engine-startup-ready-timeout/constructed-0.17-slow-load.log")
    assert f"VLLM_ENGINE_READY_TIMEOUT_S={start['recommended_deadline_s']}" in start["advice"]
    assert start["recommended_deadline_s"] > 300

"""Slow-but-alive versus hung, on captured and constructed timeout logs."""

from pathlib import Path

import pytest

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


NEW_YEAR = "v1-engine-startup-ready-timeout/constructed-0.18-slow-load-new-year.log"


def test_a_progress_bar_is_dated_by_its_own_elapsed_field():
    live = verdict(NEW_YEAR)
    last = live["last_progress"]
    # The 96% frame: 23:50:31 + 9:22 = 23:59:53, the deadline 600 s after 23:50:00: 7 s, not 573 s.
    assert last["dated"] == "bar" and last["seconds_before_timeout"] == 7
    assert live["verdict"] == "slow"


def test_progress_after_the_deadline_across_new_year_proves_slow():
    live = verdict(NEW_YEAR)
    late = live["progress_after_deadline"]
    assert late["seconds_after"] == 18 and "Loading weights took" in late["text"]
    assert "finished 18s after the deadline" in live["reason"]


def test_one_recommended_deadline_from_what_the_log_measured():
    live = verdict(NEW_YEAR)
    # Bar ETA at the deadline: 600 s + 38 s to go = 638 s, plus 50% -> 957 -> whole minutes: 960.
    assert live["recommended_deadline_s"] == 960
    assert "38s to go" in live["basis"] and "weight loading 587s" in live["basis"]
    assert "VLLM_ENGINE_READY_TIMEOUT_S=960" in live["advice"]


def test_one_number_in_every_format():
    import io
    import json

    from vcrash.redact import Redactor
    from vcrash.report import RENDERERS

    sample = parse_sample(SAMPLES / NEW_YEAR)
    report = analyze_lines(NEW_YEAR, sample.body, PACK)
    outs = {}
    for fmt in ("text", "markdown", "json"):
        buf = io.StringIO()
        RENDERERS[fmt](report, buf, Redactor(True))
        outs[fmt] = buf.getvalue()
    for fmt in ("text", "markdown"):
        assert "VLLM_ENGINE_READY_TIMEOUT_S=960" in outs[fmt], fmt
        assert "1800" not in outs[fmt] and "=1200" not in outs[fmt], fmt
    live = json.loads(outs["json"])["diagnoses"][0]["liveness"]
    assert live["recommended_deadline_s"] == 960 and "38s to go" in live["basis"]


def test_a_stopped_bar_is_hung_and_gets_no_longer_deadline():
    live = verdict("v1-engine-startup-ready-timeout/constructed-0.18-hung-load.log")
    assert live["verdict"] == "hung" and live["recommended_deadline_s"] is None
    assert "every 12s" in live["reason"]


def test_what_the_log_lacks_is_said():
    live = verdict("engine-core-timeout/constructed-wrapper-no-timestamps.log")
    assert any(m.startswith("no timestamps") for m in live["missing"])
    assert any("--enable-log-requests" in m for m in live["missing"])


def test_prompt_size_and_throughput_are_measured():
    live = verdict("v1-execute-model-rpc-timeout/constructed-0.24-long-prompt-sized.log")
    assert "118304 tokens" in live["basis"] and "3120 tokens/s" in live["basis"]


def test_a_download_bar_counts_the_files_still_to_come():
    live = verdict("v1-engine-startup-ready-timeout/constructed-0.14-hub-download-slow.log")
    assert live["verdict"] == "slow"
    # File 1 of 37: 249 s left of it, then 36 more at ~463 s each.
    assert live["recommended_deadline_s"] > 36 * 463 and "pre-downloading" in live["basis"]


def test_the_sizing_rate_is_the_window_s_best_not_an_older_run_s(tmp_path):
    """The largest prompt is sized at the best prompt throughput of the window before the
    timeout: a faster hour long before it (another load, maybe another model) is not the
    capacity the engine had, and the bulk scan, which reads metrics lines back only in that
    window, gives the same answer as the per-line path."""

    def metrics(hh, mm, ss, rate):
        return (f"(APIServer pid=8) INFO 12-01 {hh:02d}:{mm:02d}:{ss:02d} [loggers.py:248] Engine 000: Avg prompt "
                f"throughput: {rate} tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, "
                "Waiting: 0 reqs, GPU KV cache usage: 7.9%, Prefix cache hit rate: 2.0%")

    lines = [metrics(1, i // 6, i % 6 * 10, 9000.0) for i in range(300)]  # 01:00-01:49, fast
    lines += [metrics(3, 0, 0, 0.0)] * 2000
    lines += [metrics(3, 50 + i // 6, i % 6 * 10, 1500.0 + i) for i in range(30)]  # 03:50-03:54:50
    lines += ["(APIServer pid=8) INFO 12-01 03:54:55 [logger.py:41] Received request cmpl-1: params: "
              "SamplingParams(n=1, max_tokens=512), num_prompt_tokens=91000, lora_request: None.",
              "(EngineCore_DP0 pid=9) ERROR 12-01 03:55:00 [core.py:1] EngineCore timeout after 300 s"]
    full, fast = _both_paths(tmp_path, lines)
    (diag,) = [d for d in full["diagnoses"] if d["rule"] == "engine-core-timeout"]
    assert "(1529 tokens/s, line 2330)" in diag["liveness"]["basis"]
    assert full["diagnoses"] == fast["diagnoses"]


@pytest.mark.parametrize("late_by_s, counted", [(90, True), (1200, False)])
def test_progress_after_the_deadline_is_read_back_within_its_window(tmp_path, late_by_s, counted):
    """V0's engine loop logs its own metrics: busy metrics lines after the timeout prove it was
    alive. The bulk scan skips metrics lines, so it reads them back after the timeout, within
    the window the verdict looks at (later ones count on neither path)."""

    def metrics(t, rate):
        return (f"INFO 03-11 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d} metrics.py:351] Avg prompt throughput: "
                f"{rate} tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 4 reqs, Swapped: 0 reqs, "
                "Pending: 0 reqs, GPU KV cache usage: 1.0%, CPU KV cache usage: 0.0%.")

    lines = [f"INFO 03-11 12:0{i // 600}:{i // 10 % 60:02d} api_server.py:1] GET /health 200" for i in range(3000)]
    lines += [metrics(12 * 3600 + 300 + i * 5, 0.0) for i in range(60)]  # 12:05:00-12:09:55, stalled
    lines += ["ERROR 03-11 12:10:00 async_llm_engine.py:869] Engine iteration timed out. This should never happen!"]
    lines += [metrics(12 * 3600 + 600 + late_by_s, 120.5)]
    lines += [metrics(13 * 3600 + i * 5, 0.0) for i in range(2000)]
    full, fast = _both_paths(tmp_path, lines)
    assert full["diagnoses"] == fast["diagnoses"]
    (diag,) = [d for d in full["diagnoses"] if d["liveness"]]
    assert ("progress_after_deadline" in diag["liveness"]) == counted, diag["liveness"]


def test_a_server_run_starts_at_its_start_up_line():
    """After a crash, a start-up line begins a new run: the run's first time is that line's, not
    the next timed line's (which the bulk scan may have skipped); start-up deadlines count from it."""
    from vcrash.classify.signals import LineObserver
    from vcrash.split import Splitter

    splitter, observer = Splitter("x"), LineObserver()
    texts = ["(EngineCore_DP0 pid=7) ERROR 03-09 13:59:00 [core.py:1] EngineCore failed to start.",
             "(APIServer pid=1) INFO 03-09 14:00:00 [api_server.py:1777] vLLM API server version 0.14.0",
             "(EngineCore_DP0 pid=61) INFO 03-09 14:00:11 [core.py:93] Initializing a V1 LLM engine (v0.14.0)"]
    for i, text in enumerate(texts, 1):
        for line in splitter.split(i, 0, text):
            if i == 1:
                observer.mark_crash()
            observer.observe(line)
    assert observer.epoch == 1
    assert observer.epoch_start[1] == ("03-09 14:00:00", 2)


def test_stall_signals_counted_are_the_window_s_on_both_paths(tmp_path):
    """Hours of stalled metrics lines before a timeout: the verdict counts those of the window
    before it (the bulk scan, which skips metrics lines and counts the first ones only as
    start-up census, reads back that window), so both paths say the same."""

    lines = [f"INFO 03-11 {8 + i // 720:02d}:{i // 12 % 60:02d}:{i % 12 * 5:02d} metrics.py:351] Avg prompt "
             "throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 4 reqs, Swapped: 0 reqs, "
             "Pending: 0 reqs, GPU KV cache usage: 1.0%, CPU KV cache usage: 0.0%." for i in range(3000)]
    lines += ["ERROR 03-11 12:10:00 async_llm_engine.py:869] Engine iteration timed out. This should never happen!"]
    full, fast = _both_paths(tmp_path, lines)
    assert full["diagnoses"] == fast["diagnoses"]
    (diag,) = [d for d in full["diagnoses"] if d["liveness"]]
    assert diag["liveness"]["reason"] == "36 stall signal(s) and no progress signal before the timeout"


def _both_paths(tmp_path, lines: list[str]) -> tuple[dict, dict]:
    """The JSON report of the lines as a server log, on the per-line path and on the bulk scan."""
    import vcrash.analyze as pipeline
    from vcrash.read import Source
    from vcrash.redact import Redactor

    path = tmp_path / "server.log"
    path.write_text("\n".join(lines) + "\n")
    source = [Source(str(path), str(path))]
    return tuple(pipeline.analyze(source, load_pack(), pipeline.Options(fast=f)).to_dict(Redactor(True))
                 for f in (False, True))


def test_the_signals_only_observer_makes_observe_s_signals():
    # Window reads back (the metrics lines the bulk scan skips) use observe_signals(): on every
    # sample line, in order, it must make exactly the signals observe() makes, bars dated alike.
    from vcrash.classify.signals import LineObserver
    from vcrash.split import Splitter

    root = Path(__file__).resolve().parents[1]
    made = 0
    for path in sorted((root / "samples").rglob("*.log")):
        splitter, full, signals_only = Splitter(path.name), LineObserver(), LineObserver()
        for lineno, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for line in splitter.split(lineno, 0, text):
                before = list(full.signals)[-1:]
                full.observe(line)
                said = signals_only.observe_signals(line)
                assert said == (list(full.signals)[-1:] != before), (path.name, lineno)  # says it made one
        assert list(signals_only.signals) == list(full.signals), path.name  # every field (dataclass ==)
        made += len(full.signals)
    assert made > 300  # progress, stall and bar signals of every kind are in the samples


@pytest.mark.parametrize("filler", ["", "x" * 120, "x" * 280])
def test_a_signal_s_prompt_rate_is_its_text_s_metrics_match(filler):
    # The verdicts take a window's best prompt throughput from the rate each signal keeps: it
    # must be what METRICS finds in the signal's text, for every signal of every sample (and of
    # metrics lines pushed past the text a signal keeps by a longer message before them).
    from vcrash.classify.signals import METRICS, LineObserver
    from vcrash.split import Splitter

    root = Path(__file__).resolve().parents[1]
    rated = 0
    for path in sorted((root / "samples").rglob("*.log")):
        splitter, observer = Splitter(path.name), LineObserver()
        for lineno, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if filler and "throughput:" in text:
                text = text.replace("Avg prompt throughput:", filler + " Avg prompt throughput:", 1)
            for line in splitter.split(lineno, 0, text):
                observer.observe(line)
        for sig in observer.signals:
            m = METRICS.search(sig.text)
            assert sig.prompt_rate == (float(m.group("pt")) if m else None), (path.name, sig.line)
            rated += sig.prompt_rate is not None
    assert rated > (50 if filler != "x" * 280 else -1)

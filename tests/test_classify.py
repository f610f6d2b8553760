"""Ranking decisions that depend on the whole log: teardown noise, notes, restarts."""

from pathlib import Path

from vcrash.classify.rules import load_pack
from vcrash.harness import analyze_lines, parse_sample

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
PACK = load_pack()

STOP = "(APIServer pid=9) INFO 11-30 12:39:55 [launcher.py:254] [shutdown] API server: shutdown triggered"
DEAD = [
    "(APIServer pid=9) ERROR 11-30 12:39:55 [async_llm.py:906] AsyncLLM output_handler failed.",
    "(APIServer pid=9) ERROR 11-30 12:39:55 [async_llm.py:906] Traceback (most recent call last):",
    '(APIServer pid=9) ERROR 11-30 12:39:55 [async_llm.py:906]   File "/v/vllm/v1/engine/async_llm.py", line 849, in output_handler',
    "(APIServer pid=9) ERROR 11-30 12:39:55 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
]


def test_engine_dead_after_a_plain_stop_is_teardown_noise():
    assert analyze_lines("stop.log", [STOP] + DEAD, PACK).diagnoses == []


def test_engine_dead_before_any_stop_is_still_reported():
    assert [d.rule.id for d in analyze_lines("dead.log", DEAD + [STOP], PACK).diagnoses] == ["engine-dead"]


def test_root_before_the_stop_keeps_its_symptoms_and_gets_no_note():
    body = parse_sample(SAMPLES / "structured-output-no-valid-param/constructed-0.11.0-docker.log").body
    report = analyze_lines("so.log", body + [STOP] + DEAD, PACK)
    assert report.diagnoses[0].rule.id == "structured-output-no-valid-param"
    assert report.diagnoses[0].notes == []


def test_timeout_reported_after_a_stop_carries_a_note():
    sample = parse_sample(SAMPLES / "v1-engine-startup-ready-timeout/sigterm-during-stalled-startup-0.32.0.log")
    report = analyze_lines("t.log", sample.body, PACK)
    assert any("asked to stop" in n for n in report.diagnoses[0].notes)


def test_the_same_crash_after_a_restart_is_a_second_diagnosis_not_a_duplicate():
    body = parse_sample(SAMPLES / "structured-output-no-valid-param/constructed-0.11.0-docker.log").body
    report = analyze_lines("twice.log", body + body, PACK)
    assert [d.rule.id for d in report.diagnoses] == ["structured-output-no-valid-param"] * 2
    # The latest server run leads: the earlier run was restarted from.
    assert report.diagnoses[0].line == report.diagnoses[1].line + len(body)
    assert report.accounting["balanced"]


def test_liveness_evidence_survives_a_long_tail_of_routine_lines():
    sample = parse_sample(SAMPLES / "v1-execute-model-rpc-timeout/constructed-0.24-slow-prefill.log")
    tail = [f'(APIServer pid=8) INFO 02-11 08:40:{i % 60:02d} [loggers.py:248] Engine 000: Avg prompt throughput: '
            f'1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs' for i in range(6000)]
    report = analyze_lines("long.log", sample.body + tail, PACK)
    assert report.diagnoses[0].liveness["verdict"] == "slow"


def test_with_no_root_the_most_upstream_symptom_carries_the_cascade():
    sample = parse_sample(SAMPLES / "worker-proc-died-unexpectedly/captured-sigkill-worker-0.32.0.log")
    report = analyze_lines("kill.log", sample.body, PACK)
    assert [d.rule.id for d in report.diagnoses] == ["worker-proc-died-unexpectedly"]
    assert {s.rule.id for s in report.diagnoses[0].explains} == {"v1-executor-failed-cascade", "engine-dead"}


def test_bundled_patterns_compile_on_first_use_and_lint_checks_them(tmp_path):
    """Bundled rules' regexes compile lazily (start-up time); a broken one is still caught by
    `rules lint`, and a lazily compiled pack survives pickling (the Dask engine ships it)."""
    import pickle

    from vcrash.classify.rules import LazyPattern, RulePack, load_rule_file
    from vcrash.lint import lint_pack

    rule_file = tmp_path / "broken-regex.toml"
    rule_file.write_text('id = "broken-regex"\nkind = "root"\nseverity = "error"\n'
                         '[match]\nexception_message = "^(unclosed"\n')
    rule = load_rule_file(rule_file, bundled=True)
    assert isinstance(rule.exception_message, LazyPattern)
    problems = lint_pack(RulePack([rule], "x", [str(tmp_path)]), samples_dir=tmp_path)
    assert any("invalid regex" in why for _rid, why in problems)

    good = LazyPattern(r"No valid (\w+)")
    assert good.search("No valid structured output").group(1) == "structured"
    assert pickle.loads(pickle.dumps(good)).search("No valid x") is not None


def _report_without_match_cache(path, monkeypatch) -> tuple[dict, dict, int]:
    """The report of a sample with the per-content match answers kept, and without; and how
    many tracebacks took a kept answer."""
    import vcrash.analyze as pipeline
    import vcrash.classify.match as match_module
    from vcrash.read import Source
    from vcrash.redact import Redactor

    source = [Source(str(path), str(path))]
    hits = 0
    get = match_module.Memo.get

    def counting_get(memo, key, default=None):
        nonlocal hits
        found = get(memo, key, default)
        hits += found is not None and isinstance(key, tuple) and len(key) == 10  # a _result_key
        return found

    with monkeypatch.context() as m:
        m.setattr(match_module.Memo, "get", counting_get)
        kept = pipeline.analyze(source, load_pack(), pipeline.Options(fast=False)).to_dict(Redactor(True))
    with monkeypatch.context() as m:
        m.setattr(match_module, "_result_key", lambda *args: None)
        fresh = pipeline.analyze(source, load_pack(), pipeline.Options(fast=False)).to_dict(Redactor(True))
    return kept, fresh, hits


def _repeating_log(path):
    """Tracebacks that reach the matcher again and again with one content: a crash loop's runs
    (each a new occurrence), and processes whose tracebacks were cut (never merged as copies),
    some under a logged context, some in a stream named otherwise."""
    lines = []
    for run in range(12):
        lines += [f"(APIServer pid={900 + run}) INFO 11-30 10:{run:02d}:00 [api_server.py:1] vLLM API server "
                  "version 0.11.0",
                  f"(EngineCore_DP0 pid={100 + run}) ERROR 11-30 10:{run:02d}:01 [core.py:710] EngineCore failed "
                  "to start.",
                  f"(EngineCore_DP0 pid={100 + run}) ERROR 11-30 10:{run:02d}:01 [core.py:710] Traceback (most "
                  "recent call last):",
                  f'(EngineCore_DP0 pid={100 + run}) ERROR 11-30 10:{run:02d}:01 [core.py:710]   File '
                  f'"/x/vllm/v1/engine/core.py", line {run + 1}, in run_engine_core',
                  f"(EngineCore_DP0 pid={100 + run}) ERROR 11-30 10:{run:02d}:01 [core.py:710] ValueError: No "
                  "valid structured output parameter found"]
    for i in range(40):
        name = "EngineCore_DP0" if i % 3 else "Worker_TP1"
        lines += [f"({name} pid={2000 + i}) Traceback (most recent call last):",
                  f'({name} pid={2000 + i})   File "/x/vllm/v1/worker/gpu_model_runner.py", line {i}, in '
                  "execute_model", f"({name} pid={2000 + i})     output = self.model(x)"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_match_answers_kept_per_traceback_content_are_the_fresh_ones(monkeypatch, tmp_path):
    from pathlib import Path

    samples = sorted((Path(__file__).resolve().parents[1] / "samples").rglob("*.log"))
    for path in samples:
        kept, fresh, _hits = _report_without_match_cache(path, monkeypatch)
        assert kept == fresh, path
    kept, fresh, hits = _report_without_match_cache(_repeating_log(tmp_path / "repeats.log"), monkeypatch)
    assert kept == fresh
    assert hits > 40 and kept["diagnoses"]  # the repeats took kept answers


def test_fingerprints_kept_per_exception_content_are_the_computed_ones():
    import random

    from vcrash.classify.diagnose import _fingerprint, fingerprint_of
    from vcrash.rebuild.model import ExceptionInfo, Frame

    rng = random.Random(1)
    files = ["/a/vllm/x.py", "/b/site-packages/torch/y.py", "vllm/z.py", "C:\\vllm\\w.py"]
    for _ in range(3000):
        exc = ExceptionInfo(rng.choice(["ValueError", "torch.OutOfMemoryError"]),
                            rng.choice(["m 1", "m 2\nsecond", "x '/p/q' 0x1f"]),
                            frames=[Frame(rng.choice(files), rng.randrange(9), rng.choice(["f", "g", None]))
                                    for _ in range(rng.choice([rng.randrange(5), 70]))])  # 70: not kept
        rule = rng.choice(["a", "b"])
        assert fingerprint_of(rule, exc) == _fingerprint(rule, exc, None)


def test_a_frame_every_failure_passes_through_names_nothing_when_the_exception_is_cut():
    """V0's run_engine_loop is in every V0 engine failure: with the exception line cut, the
    iteration-timeout rule (whose TimeoutError it places) must not be guessed from it."""
    head = "ERROR 03-11 08:41:03 async_llm_engine.py:64] "
    lines = [head + "Engine background task failed", head + "Traceback (most recent call last):",
             head + '  File "/srv/venv/lib/python3.11/site-packages/vllm/engine/async_llm_engine.py", line 849, '
                    "in run_engine_loop",
             head + "    result = task.result()",
             head + '  File "/srv/venv/lib/python3.11/site-packages/vllm/engine/async_llm_engine.py", line 772, '
                    "in engine_step",
             head + "    request_outputs = await self.engine.step_async(virtual_engine)"]
    report = analyze_lines("cut.log", lines, PACK)
    assert report.diagnoses and report.diagnoses[0].rule.id != "v0-engine-iteration-timeout"
    raw = ["Traceback (most recent call last):",
           '  File "/srv/venv/lib/python3.11/site-packages/vllm/engine/async_llm_engine.py", line 501, in run_engine_loop',
           "    has_requests_in_progress = await asyncio.wait_for(",
           "TimeoutError"]
    assert analyze_lines("raw.log", raw, PACK).diagnoses[0].rule.id == "v0-engine-iteration-timeout"


def test_a_message_ending_in_a_traceback_header_is_still_read_as_a_log_line():
    """V0's worker summary names the failure before its header; a paste cut right after it (no
    frame, no exception line) still gets the rule its words name."""
    summary = ("(VllmWorkerProcess pid=759) ERROR 08-02 14:20:21 multiproc_worker_utils.py:226] Exception in "
               "worker VllmWorkerProcess while processing method init_device: NCCL error: unhandled cuda error "
               "(run with NCCL_DEBUG=INFO for details), Traceback (most recent call last):")
    other = "(VllmWorkerProcess pid=760) INFO 08-02 14:20:21 pynccl.py:63] vLLM is using nccl==2.20.5"
    report = analyze_lines("cut.log", [summary, other], PACK)
    assert report.diagnoses and report.diagnoses[0].rule.id == "nccl-communicator-init-failure"
    assert [tb.start_line for tb in report.tracebacks] == [1]

"""What users paste: each mechanism behind the damage harness, one small input each."""

import pytest

from vcrash.classify.match import crash_exception
from vcrash.classify.rules import load_pack, load_rule_file
from vcrash.harness import analyze_lines
from vcrash.lint import _message_pattern_problems
from vcrash.rebuild.model import ExceptionInfo, Traceback
from vcrash.split import Splitter
from vcrash.split.reflow import split_joined, wrap_width

PACK = load_pack()


def payload(text):
    return Splitter("t").split(1, 0, text)[0]


def primary(lines):
    report = analyze_lines("t.log", lines, PACK)
    return report.diagnoses[0] if report.diagnoses else None


# -- split -----------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [
    "> > (EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] boom",
    "(EngineCore\\_DP0 pid=7) ERROR 10-21 09:15:47 \\[core.py:710\\] boom",
    "(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710[] boom",
    "(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] boom^M",
    "\ufffd[1;36m(EngineCore_DP0 pid=7)\ufffd[0;0m ERROR 10-21 09:15:47 [core.py:710] boom",
    "[2025-08-15T21:12:10Z] (EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] boom",
])
def test_paste_artefacts_leave_the_vllm_line(raw):
    line = payload(raw)
    assert (line.stream.name, line.stream.pid, line.level, line.src, line.payload) == \
        ("EngineCore_DP0", 7, "ERROR", "core.py:710", "boom")


@pytest.mark.parametrize("raw,level,src", [
    ("2024-12-19T21:40:35.120Z ERROR boom", "ERROR", "log"),  # the time zone group no longer eats the level
    ("2024-12-19 21:40:35 ERROR 56542 [async_llm_engine.py:64] boom", "ERROR", "async_llm_engine.py:64"),
    ("2025-06-20 10:11:41,010 - vllm - WARNING - boom", "WARNING", "vllm"),
])
def test_a_level_after_another_programs_timestamp_is_a_header(raw, level, src):
    line = payload(raw)
    assert (line.level, line.src, line.payload) == (level, src, "boom")


@pytest.mark.parametrize("raw,level,time", [
    # Ray Serve's replica records: level, date and time, then deployment, replica, request id.
    ("(ServeReplica:default:LLMServer pid=9) ERROR 2025-05-23 00:42:04,876 default_LLMServer rc1 "
     "7c0e-11 -- boom", "ERROR", "2025-05-23 00:42:04,876"),
    ("INFO 2025-05-23 00:42:04 boom", "INFO", "2025-05-23 00:42:04"),
])
def test_a_level_then_a_full_date_is_a_header(raw, level, time):
    line = payload(raw)
    assert (line.level, line.time, line.payload) == (level, time, "boom")


def test_a_ray_serve_record_after_an_exception_line_is_not_its_message():
    d = primary(["(ServeReplica:a pid=9) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
                 "(ServeReplica:a pid=9) ERROR 2025-05-23 00:42:04,876 a r1 q1 -- Encountered failure while "
                 "handling request q1",
                 '(ServeReplica:a pid=9)   File "/r/ray/llm/_internal/serve/deployments/llm/llm_server.py", '
                 "line 528, in _predict",
                 "(ServeReplica:a pid=9)     async for r in self.engine.generate(req):"])
    # The per-request handler's cut traceback is not a crash of its own above the engine's death.
    assert (d.rule.id, d.exception.message) == ("engine-dead", "EngineCore encountered an issue.")


@pytest.mark.parametrize("raw,level,src", [
    ("E0118 22:42:45.737331   20084 tpu_pjrt_client.cc:1889] boom", "ERROR", "tpu_pjrt_client.cc:1889"),
    ("E20260106 06:43:02.966156  5793 ascend_direct_transport.cpp:820] boom", "ERROR",
     "ascend_direct_transport.cpp:820"),
    ("W0118 22:42:45.1 7 x.cc:1] boom", "WARNING", "x.cc:1"),
])
def test_a_glog_header_without_brackets_is_a_header(raw, level, src):
    line = payload(raw)
    assert (line.level, line.src, line.payload) == (level, src, "boom")


def test_an_error_line_naming_one_request_is_not_a_crash():
    assert primary(["(EngineCore_DP0 pid=5) ERROR 01-06 06:43:02 [mooncake_connector.py:330] Failed to transfer "
                    "KV cache for request cmpl-118b93ed-0: Mooncake transfer failed, ret: -1"]) is None


def test_the_tail_of_a_cut_header_is_a_header():
    line = payload("13:53:19 [multiproc_executor.py:492] ValueError: Free memory")
    assert line.payload == "ValueError: Free memory" and line.src == "multiproc_executor.py:492"


def test_padding_a_terminal_copy_put_back_at_its_wraps_is_taken_out():
    from vcrash.split.reflow import padded_wrap, unpad
    lines = ['  File "/root/anaconda3/lib/python3.11/site-packages/vllm/transformers_utils/config.py", line 30, '
             "in get_config",
             '  File "/root/anaconda3/lib/python3.11/site-packages/transformers/dynamic_module_utils.py", '
             "line 621, in resolve_trust_remote_code",
             "ValueError: Loading /models/chatglm3-6b requires you to execute the configuration file in that "
             "repo on your local machine."]
    pasted = [(" " * 12).join(t[k:k + 70] for k in range(0, len(t), 70)) for t in lines]
    assert padded_wrap(pasted) == (70, 12)
    assert [unpad(t, 70, 12) for t in pasted] == lines
    # Aligned columns of an ordinary log are not padding: too few, or not at one place.
    assert padded_wrap(["INFO a    b", "INFO abc    d"]) is None


def test_wrap_width_needs_cut_lines_not_just_equal_ones():
    frames = ['  File "/tmp/a/b.py", line %d, in read_config' % n for n in range(11, 20)]
    assert wrap_width(frames + ["    return {}[key]", "KeyError: 'x'"]) is None
    long = "(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] " + "x" * 200
    cut = [long[i:i + 80] for i in range(0, len(long), 80)] * 3
    assert wrap_width(cut) == 80


def test_wrap_width_is_not_one_line_repeated():
    # A dying V0 server's fatal line once per request, each followed by uvicorn's 500: equal
    # lengths because equal text, behind a sidecar's prefix whose times make them differ too.
    dead = "CRITICAL 11-12 19:15:08 launcher.py:99] MQLLMEngine is already dead, terminating server process"
    lines = []
    for port in range(41034, 41038):
        lines += [dead, f'INFO:     127.0.0.1:{port} - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error']
    assert wrap_width(lines) is None
    prefixed = [f"[VllmSidecar kooEr8Cc]: 2024-11-13T03:15:08.{670 + i}Z 1 stdout: {t}" for i, t in enumerate(lines)]
    assert wrap_width(prefixed) is None


def test_coloured_tags_of_one_length_are_no_hard_wrap():
    # Many processes' headers in a row, each behind vLLM's coloured tag: one length for all of
    # them, and the colour codes hid the next line's tag, which says the line before was whole.
    heads = [f"\x1b[1;36m(EngineCore_DP0 pid={1000 + i})\x1b[0;0m Traceback (most recent call last):"
             for i in range(40)]
    assert wrap_width(heads) is None
    cut = [h[:60] for h in heads]  # rows cut at 60 whose rest is lost are still rows cut at a width
    assert wrap_width([c for h in heads for c in (h[:60], h[60:])]) == 60 and len(set(map(len, cut))) == 1


def test_json_records_of_one_length_are_no_hard_wrap():
    # docker's json-file driver: a record per line, so a crash loop's traceback header record
    # comes back at the same length every run; joining it to the next record broke every traceback.
    import json

    lines = []
    for run in range(6):
        for text in ["Traceback (most recent call last):", f'  File "/x/vllm/core.py", line {701 + run}, in run',
                     f"ValueError: No valid structured output parameter found {run}"]:
            lines.append(json.dumps({"log": text + "\n", "stream": "stderr", "time": f"2026-12-04T10:00:0{run}.5Z"}))
    assert wrap_width(lines) is None
    report = analyze_lines("json-file.log", lines, PACK)
    assert [tb.corrupted for tb in report.tracebacks] == [False] * 6
    assert [tb.exceptions[-1].message for tb in report.tracebacks] == \
        [f"No valid structured output parameter found {run}" for run in range(6)]
    # Rows of a JSON record cut at a width are still rows.
    cut = [line[i:i + 60] for line in lines for i in range(0, len(line), 60)]
    assert wrap_width(cut) == 60


def test_hard_wrapped_traceback_is_rejoined():
    body = [
        "(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] Traceback (most recent call last):",
        '(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710]   File "/usr/lib/python3/vllm/v1/engine/core.py", line 701, in run_engine_core',
        "(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710]     raise ValueError('No valid structured output parameter found')",
        "(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] ValueError: No valid structured output parameter found",
    ]
    wrapped = [t[i:i + 80] for t in body for i in range(0, len(t), 80)]
    assert primary(wrapped).rule.id == "structured-output-no-valid-param"


def test_a_traceback_joined_into_one_line_is_split_again():
    joined = ('Traceback (most recent call last):   File "/x/vllm/worker.py", line 5, in run     self.step() '
              '  File "/x/vllm/model.py", line 9, in step     raise ValueError("bad") ValueError: bad value')
    assert split_joined(joined) == [
        "Traceback (most recent call last):",
        '  File "/x/vllm/worker.py", line 5, in run', "    self.step()",
        '  File "/x/vllm/model.py", line 9, in step', '    raise ValueError("bad")', "ValueError: bad value"]


# -- rebuild ---------------------------------------------------------------------------------
def rebuilt(lines):
    return analyze_lines("t.log", lines, PACK).tracebacks


def test_tail_only_traceback_starts_at_its_caret_line():
    tbs = rebuilt(["    raise ValueError(", "    ^^^^^^^^^^^^^^^^^", "ValueError: heads (40) not divisible"])
    assert [(e.type, e.message) for e in tbs[0].exceptions] == [("ValueError", "heads (40) not divisible")]


def test_cut_after_the_raise_line_infers_type_and_literal_message():
    tbs = rebuilt(["Traceback (most recent call last):",
                   '  File "/x/vllm/v1/structured_output/request.py", line 60, in get_structured_output_key',
                   '    raise ValueError("No valid structured output parameter found")'])
    exc = tbs[0].exceptions[-1]
    assert (exc.type, exc.message, exc.inferred) == ("ValueError", "No valid structured output parameter found", True)
    assert primary(["Traceback (most recent call last):",
                    '  File "/x/vllm/v1/structured_output/request.py", line 60, in get_structured_output_key',
                    '    raise ValueError("No valid structured output parameter found")']).rule.id \
        == "structured-output-no-valid-param"


@pytest.mark.parametrize("last", ["(ValueError: the model is gone)", "ValueErr", "..."])
def test_abbreviated_exception_lines_are_still_exception_lines(last):
    lines = ["Traceback (most recent call last):", '  File "/x/vllm/a.py", line 3, in f', "    g()"]
    lines += ["...", "ValueError: the model is gone"] if last == "..." else [last]
    exc = rebuilt(lines)[0].exceptions[-1]
    assert exc.type.startswith("ValueErr")


def test_ipython_traceback_frames():
    tbs = rebuilt([
        "ValueError                                Traceback (most recent call last)",
        "Cell In[13], line 43", "---> 43 llm = LLM(model=m)", "",
        "File ~/venv/lib/python3.10/site-packages/vllm/entrypoints/llm.py:292, in LLM.__init__(self, model)",
        "    290 x = 1", "--> 292 self.llm_engine = LLMEngine.from_engine_args(args)", "",
        "ValueError: the model is gone"])
    exc = tbs[0].exceptions[-1]
    assert [(f.file.rsplit("/", 1)[-1], f.line, f.function) for f in exc.frames] == \
        [("In[13]", 43, "<module>"), ("llm.py", 292, "LLM.__init__")]
    assert exc.frames[-1].code == "self.llm_engine = LLMEngine.from_engine_args(args)"


def test_a_body_under_another_call_site_stays_in_its_traceback():
    tbs = rebuilt([
        "ERROR 10-21 09:15:47 [core.py:710] Traceback (most recent call last):",
        'ERROR 10-21 09:15:47 [core.py:710]   File "/x/vllm/v1/engine/core.py", line 701, in run',
        'ERROR 10-21 09:15:49 [core.py:715]   File "/x/vllm/v1/worker/runner.py", line 88, in step',
        "ERROR 10-21 09:15:49 [core.py:715]     self.fail()",
        "ERROR 10-21 09:15:49 [core.py:715] RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert len(tbs) == 1 and len(tbs[0].exceptions[-1].frames) == 2


def test_the_end_of_one_traceback_is_never_the_context_of_the_next():
    tbs = rebuilt(["Traceback (most recent call last):", '  File "/x/a.py", line 1, in f', "KeyError: 'a'",
                   "Traceback (most recent call last):", '  File "/x/b.py", line 2, in g', "OSError: gone"])
    assert tbs[1].context is None


# -- classify --------------------------------------------------------------------------------
def test_a_symptom_wrapper_does_not_hide_the_cause_in_its_chain():
    d = primary(["Traceback (most recent call last):", '  File "/x/vllm/v1/worker/runner.py", line 9, in step',
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "",
                 "The above exception was the direct cause of the following exception:", "",
                 "Traceback (most recent call last):", '  File "/x/vllm/v1/engine/core.py", line 9, in run',
                 "RuntimeError: Engine core initialization failed. See root cause above."])
    assert d.rule.id == "cuda-oom-runtime-forward"


def test_an_anchored_message_is_found_inside_another_versions_wrapper():
    d = primary(["Traceback (most recent call last):", '  File "/x/vllm/worker/model_runner_base.py", line 1, in f',
                 "RuntimeError: Error in model execution: CUDA error: an illegal memory access was encountered"])
    assert (d.rule.id, d.strength, d.confidence) == ("cuda-illegal-memory-access", "loose", "medium")


def test_c10_exception_types_match():
    d = primary(["terminate called after throwing an instance of 'c10::AcceleratorError'",
                 "  what():  CUDA error: an illegal memory access was encountered"])
    assert d.rule.id == "cuda-illegal-memory-access"


def test_frames_that_only_place_a_failure_do_not_name_it_when_the_exception_line_is_cut():
    # profile_run fails in other ways than an OOM (real cut pastes: half were another error):
    # the crash stays unnamed, and a note says which known failures happen there.
    d = primary(["Traceback (most recent call last):",
                 '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 2100, in profile_run',
                 "    hidden = self._dummy_run(self.max_num_tokens)"])
    assert (d.rule.id, d.confidence) == ("unclassified-crash", "low")
    assert any("cuda-oom-profile-run" in note and "cut before its exception line" in note for note in d.notes)


@pytest.mark.parametrize("between", [[], ["(EngineCore_DP0 pid=7) INFO 11-05 12:19:32 [core.py:95] Shutting down."]])
def test_a_cut_traceback_is_named_by_the_message_its_process_logged_before_it(between):
    # Right before it, the message is the traceback's context; a line further up, a finding of its own.
    d = primary(["(EngineCore_DP0 pid=7) ERROR 11-05 12:19:32 [gpu_model_runner.py:2950] CUDA out of memory. "
                 "Tried to allocate 2.00 GiB.", *between,
                 "(EngineCore_DP0 pid=7) ERROR 11-05 12:19:32 [core.py:708] Traceback (most recent call last):",
                 '(EngineCore_DP0 pid=7) ERROR 11-05 12:19:32 [core.py:708]   File "/x/vllm/v1/worker/gpu_model_runner.py", '
                 'line 2100, in profile_run',
                 "(EngineCore_DP0 pid=7) ERROR 11-05 12:19:32 [core.py:708]     hidden = self._dummy_run(self.max_num_tokens)"])
    assert d.rule.id == "cuda-oom-profile-run"
    assert any("cut before its exception line" in note for note in d.notes)


def test_a_message_of_another_process_does_not_name_a_cut_traceback():
    d = primary(["(Worker_TP1 pid=8) ERROR 11-05 12:19:32 [gpu_model_runner.py:2950] CUDA out of memory. "
                 "Tried to allocate 2.00 GiB.",
                 "(Worker_TP0 pid=7) ERROR 11-05 12:19:33 [core.py:708] Traceback (most recent call last):",
                 '(Worker_TP0 pid=7) ERROR 11-05 12:19:33 [core.py:708]   File "/x/vllm/v1/worker/gpu_model_runner.py", '
                 'line 2100, in profile_run',
                 "(Worker_TP0 pid=7) ERROR 11-05 12:19:33 [core.py:708]     hidden = self._dummy_run(self.max_num_tokens)"])
    assert d.rule.id != "cuda-oom-profile-run" or d.line == 1


@pytest.mark.parametrize("code,rule", [
    ("self.comm: ncclComm_t = self.nccl.ncclCommInitRank(", "nccl-communicator-init-failure"),
    ("self._check_scheme_supported(scheme.get_min_capability())", "quantization-unsupported-gpu-capability"),
])
def test_a_paste_cut_at_a_call_is_named_by_the_frame_it_lost(code, rule):
    # The last frame's source line is the call into the frame the cut took: the signature frame.
    d = primary(["Traceback (most recent call last):",
                 '  File "/x/vllm/worker/worker.py", line 166, in init_device',
                 "    init_worker_distributed_environment(self.parallel_config, self.rank)",
                 '  File "/x/vllm/y.py", line 99, in __init__',
                 f"    {code}"])
    assert (d.rule.id, d.strength) == (rule, "frames")


def test_a_cut_raise_line_names_no_frame():
    d = primary(["Traceback (most recent call last):",
                 '  File "/x/vllm/y.py", line 99, in __init__',
                 "    raise RuntimeError(f'ncclCommInitRank is {x}')"])
    assert d is None or d.rule.id != "nccl-communicator-init-failure"


def test_the_shell_reporting_a_killed_server_is_a_kill_from_outside():
    d = primary(["(APIServer pid=5) INFO:     Application startup complete.",
                 "./serve.sh: line 88: 5 Killed                  vllm serve /m --port 8000"])
    assert d.rule.id == "engine-core-killed-externally"


def test_a_kill_vllm_announced_itself_is_not_from_outside():
    # Early V1's fatal-signal handler SIGKILLs its own process tree: "Killed" is its doing.
    d = primary(["CRITICAL 03-28 10:30:05 [core_client.py:269] Got fatal signal from worker processes, shutting "
                 "down. See stack trace above for root cause issue.", "Killed"])
    assert d.rule.id == "v1-fatal-signal-from-workers-cascade"


def test_a_harmless_note_explains_nothing_after_it():
    report = analyze_lines("t.log", [
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/multiprocessing/resource_tracker.py", line 209, in main',
        "    cache[rtype].remove(name)",
        "KeyError: '/psm_3f0a91c2'",
        "ERROR 06-21 11:09:02 async_llm_engine.py:58] Engine background task failed",
        "Traceback (most recent call last):",
        '  File "/opt/vllm/engine/async_llm_engine.py", line 48, in _log_task_completion',
        "    return_value = task.result()",
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly."], PACK)
    by_rule = {d.rule.id: d for d in report.diagnoses}
    assert by_rule["multiprocessing-resource-tracker-keyerror"].explains == []
    assert report.diagnoses[0].rule.id != "multiprocessing-resource-tracker-keyerror"


@pytest.mark.parametrize("before,rule", [
    ([], "cuda-oom-runtime-forward"),  # an excerpt: no phase to go by
    (["INFO 04-27 16:27:40 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.4) with config: model='/m'"],
     "cuda-oom-weight-loading"),
    (["INFO 04-27 16:27:50 [model_runner.py:1110] Loading model weights took 7.10 GB",
      "WARNING 04-27 16:27:59 [profiling.py:245] The sequence length used for profiling is too short"],
     "cuda-oom-profile-run"),
    (["INFO 04-27 16:28:40 [model_runner.py:1450] Capturing cudagraphs for decoding."], "cuda-oom-cudagraph-capture"),
    (["INFO 04-27 16:28:40 [model_runner.py:1450] Capturing cudagraphs for decoding.",
      "INFO:     Application startup complete."], "cuda-oom-runtime-forward"),
])
def test_an_oom_line_alone_is_placed_by_the_start_up_phase_reached(before, rule):
    d = primary(before + ["ERROR 04-27 16:28:02 [engine.py:448] CUDA out of memory. Tried to allocate 800.00 MiB."])
    assert d.rule.id == rule


def test_a_last_message_that_ends_its_sentence_is_not_taken_for_a_cut_one():
    # The quantization rule's "not supported.{0,80}capability" would match "… not supported yet."
    # as the start of its own text if the message were cut there.
    d = primary(["ValueError: Widget mode foo is not supported yet."])
    assert d is None or d.rule.id != "quantization-unsupported-gpu-capability"


def test_a_log_line_carries_a_failure_without_its_traceback():
    d = primary(["ERROR 01-15 03:11:09 engine.py:135] Error in model execution: CUDA error: device-side assert triggered"])
    assert (d.rule.id, d.strength, d.exception_type) == ("cuda-device-side-assert", "line", "RuntimeError")


def test_a_raw_traceback_after_an_info_line_is_still_a_crash():
    d = primary(["INFO 10-21 09:14:07 [utils.py:233] non-default args: {'model': 'm'}",
                 "Traceback (most recent call last):", '  File "/x/app.py", line 3, in main', "ZeroDivisionError: oops"])
    assert d.rule.id == "unclassified-crash"


def test_an_error_line_alone_is_not_silent():
    d = primary(["INFO 10-21 09:14:07 [utils.py:233] start",
                 "slurmstepd: error: Detected 1 oom_kill event in StepId=67.0. Some of the step tasks have been "
                 "OOM Killed."])
    assert (d.rule.id, d.confidence) == ("unclassified-crash", "low")


def test_a_schedulers_cancel_is_named_and_not_a_crash_of_its_own():
    d = primary(["INFO 10-21 09:14:07 [utils.py:233] start",
                 "slurmstepd: error: *** JOB 67 ON gpu04 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***"])
    assert (d.rule.id, d.rule.severity) == ("slurm-job-cancelled", "warning")


def test_request_errors_are_not_a_crash():
    assert primary(["(APIServer pid=1) ERROR 10-21 09:14:07 [serving_chat.py:300] Error with model "
                    "error=ErrorInfo(message='bad', type='BadRequestError', param=None, code=400)"]) is None


def test_an_internal_first_link_is_translated_by_the_next():
    tb = Traceback("tb1", "t", "t:-:", "main", 1, 9, exceptions=[
        ExceptionInfo("KeyError", "'llama4'"), ExceptionInfo("ValueError", "model type not recognised", "context")])
    assert crash_exception(tb).type == "ValueError"


def test_latest_server_run_leads():
    run = ["INFO 10-21 09:14:07 [api_server.py:1839] vLLM API server version 0.11.0",
           "Traceback (most recent call last):", '  File "/x/app.py", line 3, in main']
    report = analyze_lines("t.log", run + ["KeyError: 'first'"] + run + ["OSError: second"], PACK)
    assert [d.exception.type for d in report.diagnoses][:1] == ["OSError"]


def test_lint_flags_a_message_pattern_that_accepts_nothing(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text('id = "r"\ntitle = "t"\nkind = "root"\nseverity = "error"\n[match]\nprefilter = ["x"]\n'
                    "exception_message = '''^(?!No valid)'''\n[doc]\nsummary='s'\nwhy='w'\nresolution=['r']\n")
    assert _message_pattern_problems(load_rule_file(path, bundled=False))


def test_a_symptoms_message_that_quotes_its_cause_names_the_cause():
    d = primary(["Traceback (most recent call last):", '  File "/x/vllm/v1/engine/core.py", line 9, in run',
                 "RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered', "
                 "please check the stack trace above for the root cause"])
    assert (d.rule.id, d.strength) == ("cuda-illegal-memory-access", "loose")


def test_a_lone_cr_between_lines_is_a_line_end_but_a_progress_redraw_is_not():
    lines = Splitter("t").split(1, 0, "Traceback (most recent call last):\r  File \"/x/a.py\", line 1, in f")
    assert [ln.payload for ln in lines] == ["Traceback (most recent call last):", '  File "/x/a.py", line 1, in f']
    bar = Splitter("t").split(1, 0, "Loading shards:  50% Completed | 2/4\rLoading shards: 100% Completed | 4/4")
    assert [ln.payload for ln in bar] == ["Loading shards: 100% Completed | 4/4"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-8-sig"])
def test_windows_redirects_utf16_and_boms_are_read(tmp_path, encoding):
    from vcrash.analyze import analyze
    from vcrash.read import expand_inputs

    body = ["(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] Traceback (most recent call last):",
            '(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710]   File "/x/vllm/v1/engine/core.py", line 7, in run',
            "(EngineCore_DP0 pid=7) ERROR 10-21 09:15:47 [core.py:710] RuntimeError: CUDA error: an illegal memory "
            "access was encountered"]
    path = tmp_path / "win.log"
    path.write_bytes("\r\n".join(body).encode(encoding))
    report = analyze(expand_inputs([str(path)]), PACK)
    assert [d.rule.id for d in report.diagnoses] == ["cuda-illegal-memory-access"]
    assert report.diagnoses[0].stream_id.endswith("EngineCore_DP0:7")


def test_rays_wrapper_type_is_the_cause_type():
    from vcrash.rebuild import grammar as g

    assert g.exception_line("ray.exceptions.RayTaskError(ValueError): ray::RayWorkerWrapper.execute_method()") \
        == ("ValueError", "(ray.exceptions.RayTaskError) ray::RayWorkerWrapper.execute_method()")
    assert g.exception_line("print(output)") is None


def test_an_exception_line_inside_a_wrappers_message_is_matched():
    d = primary(["Traceback (most recent call last):", '  File "/x/vllm/v1/worker/runner.py", line 9, in step',
                 "some.lib.WrapperError: RuntimeError: CUDA error: an illegal memory access was encountered"])
    assert (d.rule.id, d.strength) == ("cuda-illegal-memory-access", "loose")


def test_lines_joined_with_their_tags_are_split_at_each_tag():
    joined = ('f.py", line 154, in __init__ (VllmWorkerProcess pid=236) ERROR 08-23 08:25:25 multiproc_worker_utils.py:226] '
              'Traceback (most recent call last): (VllmWorkerProcess pid=236) ERROR 08-23 08:25:25 '
              'multiproc_worker_utils.py:226]   File "/x/vllm/distributed/pynccl.py", line 89, in __init__ '
              '(VllmWorkerProcess pid=236) ERROR 08-23 08:25:25 multiproc_worker_utils.py:226] RuntimeError: NCCL error: '
              'unhandled system error')
    assert primary([joined]).rule.id == "nccl-communicator-init-failure"
    doubled = Splitter("t").split(1, 0, "(EngineCore pid=1) (RayWorkerWrapper pid=2, ip=10.0.0.1) hello")
    assert [ln.payload for ln in doubled] == ["hello"]


def test_text_printed_inside_a_traceback_can_name_its_cause():
    d = primary(["Traceback (most recent call last):",
                 '  File "/x/transformers/dynamic_module_utils.py", line 598, in resolve_trust_remote_code',
                 "The repository for org/model contains custom code which must be executed to correctly load the model.",
                 "EOFError: EOF when reading a line"])
    assert (d.rule.id, d.exception_type) == ("trust-remote-code-required", "EOFError")


def test_markdown_code_fences_around_a_pasted_line():
    d = primary(["I get", "```ValueError: Total number of attention heads (25) must be divisible by tensor parallel size (2).```"])
    assert (d.rule.id, d.strength) == ("tensor-parallel-size-not-divisor", "exact")


@pytest.mark.parametrize("joined", [
    # two log records that lost their LF: the same level and date, but no count: not a redraw
    "ERROR 04-02 10:00:09 [engine.py:160] Traceback (most recent call last):\rERROR 04-02 10:00:09 [engine.py:160]"
    "     raise ValueError(",
    # two writers: a bar of one process after another's line is not that line drawn again
    "(APIServer pid=1) Traceback (most recent call last):\r(EngineCore_DP0 pid=5) Loading safetensors checkpoint "
    "shards:  50% Completed | 82/163 [04:54<04:51,  3.60s/it]",
])
def test_a_header_before_a_lone_cr_is_kept(joined):
    payloads = [ln.payload for ln in Splitter("t").split(1, 0, joined)]
    assert "Traceback (most recent call last):" in payloads


def test_a_quote_before_an_inner_tag_goes_with_its_line():
    lines = Splitter("t").split(1, 0, "> (W pid=1) ERROR 10-21 09:15:47 [a.py:1] Traceback (most recent call last):"
                                      "> (W pid=1) ERROR 10-21 09:15:47 [a.py:1]   File \"/x.py\", line 3, in f")
    assert [ln.payload for ln in lines] == ["Traceback (most recent call last):", '  File "/x.py", line 3, in f']


def test_jupyterlab_frame_paths_as_markdown_links():
    tbs = rebuilt([
        "ValueError                                Traceback (most recent call last)",
        "File [~/venv/lib/python3.10/site-packages/vllm/worker/model_runner.py:1220](http://gpu:8888/lab/tree/"
        "venv/lib/python3.10/site-packages/vllm/worker/model_runner.py#line=1219), in ModelRunner.profile_run(self)",
        "-> 1220 self.execute_model(model_input, kv_caches, intermediate_tensors)",
        "ValueError: bad"])
    frame = tbs[0].exceptions[-1].frames[-1]
    assert (frame.file.rsplit("/", 1)[-1], frame.line, frame.function) == ("model_runner.py", 1220, "ModelRunner.profile_run")


def test_an_exception_line_in_inline_code():
    d = primary(["`ValueError: Total number of attention heads (25) must be divisible by tensor parallel size (2).`"])
    assert d.rule.id == "tensor-parallel-size-not-divisor"


def test_a_notebook_traceback_cut_above_its_first_frame_is_kept():
    tbs = rebuilt(["File ~/venv/lib/python3.10/site-packages/vllm/worker/model_runner.py:1220, in ModelRunner.profile_run(self)",
                   "-> 1220 self.execute_model(model_input, kv_caches, intermediate_tensors)"])
    assert tbs and tbs[0].exceptions[-1].frames[-1].function == "ModelRunner.profile_run"


def test_a_double_spaced_paste_reads_as_its_original():
    """An empty line after every line (a copy from a rich-text view): the spacers go, an empty
    line of the original (which came with its own spacer) stays."""
    from vcrash.read import RawLine
    from vcrash.split.reflow import double_spaced, unwrap_hard_wraps

    original = ["ERROR 10-21 09:15:47 [core.py:710] Traceback (most recent call last):",
                '  File "/x/vllm/v1/engine/core.py", line 5, in step', "    raise RuntimeError(", "RuntimeError: ",
                "        An attempt has been made to start a new process before the",
                "        current process has finished its bootstrapping phase.", "", "next paragraph"]
    spaced = [t for line in original for t in (line, "")]
    assert double_spaced(spaced) and not double_spaced(original)
    raws = [RawLine(i, 0, t) for i, t in enumerate(spaced, 1)]
    assert [r.text for r in unwrap_hard_wraps(raws)] == original
    assert primary(spaced).rule.id == primary(original).rule.id == "multiprocessing-spawn-main-guard"


# An engine's fatal traceback in the order it was written (the newest-first tests reverse it).
ENGINE_TB = ["(EngineCore_DP0 pid=7) ERROR 10-21 09:15:46 [core.py:1] EngineCore encountered a fatal error.",
             "Traceback (most recent call last):",
             '  File "/x/vllm/v1/engine/core.py", line 701, in run_engine_core',
             "    engine_core.run_busy_loop()",
             '  File "/x/vllm/v1/structured_output/__init__.py", line 91, in grammar_init',
             "    raise ValueError('No valid structured output parameter found')",
             "ValueError: No valid structured output parameter found"]


def test_newest_first_paste_is_read_bottom_up():
    from vcrash.split.reflow import escaped_line_ends, newest_first

    tb = ENGINE_TB
    assert not newest_first(tb)
    assert newest_first(list(reversed(tb)))
    # A serverless console's copy: newest first, each line ending in a literal backslash-n.
    console = [t + "\\n" for t in reversed(tb)]
    assert escaped_line_ends(console) and newest_first(console) and not escaped_line_ends(tb)
    # Two excerpts quoted later one first are not a reversed log: one pair of times is too little.
    quoted = ["> [2026-01-28T23:59:42Z] (EngineCore_DP0 pid=972) ERROR 01-28 15:59:42 [core.py:935] ValueError: x",
              "> [2026-01-26T17:25:37Z] (EngineCore_DP0 pid=738) ERROR 01-26 09:25:37 [core.py:935] ValueError: x"]
    assert not newest_first(quoted)


def test_newest_first_report_says_so(tmp_path):
    from vcrash.analyze import analyze
    from vcrash.classify.rules import load_pack
    from vcrash.read import Source

    path = tmp_path / "console.log"
    path.write_text("\n".join(reversed(ENGINE_TB)) + "\n")
    report = analyze([Source(str(path), str(path))], load_pack())
    assert report.diagnoses[0].rule.id == "structured-output-no-valid-param"
    assert any("newest first" in w for w in report.warnings)
    assert report.tracebacks[0].exceptions[-1].frames  # frames read in their order again


def test_an_input_that_ends_in_a_cut_exception_line_is_named_by_what_it_starts():
    cut = "ERROR 04-17 06:12:14 [core.py:9] torch.AcceleratorError: CUDA error: an illegal memory access was encount"
    assert primary(["INFO 04-17 06:12:10 [core.py:1] up", cut]).rule.id == "cuda-illegal-memory-access"
    # Not the input's last line: the message was complete as written, and no rule names it.
    d = primary([cut, "INFO 04-17 06:12:15 [core.py:1] after"])
    assert d is None or d.rule.id != "cuda-illegal-memory-access"
    # Three worker lines joined into one: the pieces start at their tags, the last one is cut.
    joined = ("(Worker_TP0 pid=126) ERROR 04-17 06:12:14 [multiproc_executor.py:949] WorkerProc hit an exception. "
              "(Worker_TP0 pid=126) ERROR [multiproc_executor.py:949] out = torch.ops._C.varlen_fwd( "
              "(Worker_TP0 pid=126) ERROR [multiproc_executor.py:949] torch.AcceleratorError: CUDA error: an "
              "illegal memory access was encount")
    assert primary([joined]).rule.id == "cuda-illegal-memory-access"


def test_an_oom_line_is_one_failure_with_the_traceback_whose_frames_name_its_phase():
    # The worker logs the OOM's message, then its traceback through load_model (cut before the
    # exception line): one failure, at weight loading, whatever start-up lines the excerpt lost.
    d = primary([
        "(RayWorkerWrapper pid=1189) ERROR 08-14 11:52:46 worker_base.py:581] RuntimeError: NPU out of memory. "
        "Tried to allocate 450.00 MiB (NPU 3; 60.96 GiB total capacity; 60.30 GiB already allocated)",
        "ERROR 08-14 11:52:47 worker_base.py:581] Error executing method 'load_model'. This might cause deadlock.",
        "ERROR 08-14 11:52:47 worker_base.py:581] Traceback (most recent call last):",
        'ERROR 08-14 11:52:47 worker_base.py:581]   File "/w/vllm/worker/worker_base.py", line 573, in execute_method',
        "ERROR 08-14 11:52:47 worker_base.py:581]     return run_method(target, method, args, kwargs)",
        'ERROR 08-14 11:52:47 worker_base.py:581]   File "/w/vllm_ascend/worker/worker.py", line 207, in load_model',
        "ERROR 08-14 11:52:47 worker_base.py:581]     self.model_runner.load_model()"])
    assert d.rule.id == "cuda-oom-weight-loading"


def test_a_newest_first_paste_past_the_hold_limit_is_read_as_it_is(tmp_path, monkeypatch):
    import vcrash.split.reflow as reflow
    from vcrash.analyze import analyze
    from vcrash.classify.rules import load_pack
    from vcrash.read import Source

    path = tmp_path / "console.log"
    path.write_text("\n".join(reversed(ENGINE_TB)) + "\n")
    monkeypatch.setattr(reflow, "MAX_REVERSED_LINES", 4)  # memory stays bounded: not held, not reversed
    report = analyze([Source(str(path), str(path))], load_pack())
    assert not any("newest first" in w for w in report.warnings)
    assert report.inputs[0].lines == len(ENGINE_TB)  # every line read, in the order written


def test_a_phaseless_oom_of_another_process_is_placed_by_a_cut_traceback_frames():
    # A Ray worker's OOM, then the driver's load_model traceback cut before its exception line.
    d = primary(["(RayWorkerWrapper pid=9) ERROR 08-14 11:52:46 worker_base.py:581] RuntimeError: NPU out of memory. "
                 "Tried to allocate 450.00 MiB",
                 "ERROR 08-14 11:52:47 worker_base.py:581] Error executing method 'load_model'.",
                 "ERROR 08-14 11:52:47 worker_base.py:581] Traceback (most recent call last):",
                 'ERROR 08-14 11:52:47 worker_base.py:581]   File "/x/vllm/worker/worker.py", line 207, in load_model',
                 "ERROR 08-14 11:52:47 worker_base.py:581]     self.model_runner.load_model()"])
    assert (d.rule.id, d.line) == ("cuda-oom-weight-loading", 1)
    assert any("placed by the frames of the traceback at line 3" in note for note in d.notes)


def test_type_prefixes_nested_in_a_message_are_peeled_off():
    # A re-raise that wrote its cause's "Type: " into its message, several times over.
    d = primary(["Error: Error: Error: torch.AcceleratorError: CUDA error: an illegal memory access was encountered"])
    assert d.rule.id == "cuda-illegal-memory-access"


def test_a_traceback_a_request_module_logged_is_a_handled_failure_even_cut_above_its_handler():
    # serving_completion.py's logger wrote it: one rejected request (an HTTP 400), not a crash.
    tail = ['ERROR 04-07 12:31:21 serving_completion.py:110]   File "/x/vllm/entrypoints/openai/serving_engine.py", '
            'line 239, in _validate_input',
            "ERROR 04-07 12:31:21 serving_completion.py:110]     raise ValueError(",
            "ERROR 04-07 12:31:21 serving_completion.py:110] ValueError: This model's maximum context length is 2048 "
            "tokens. However, you requested 2054 tokens."]
    assert primary(tail) is None
    # The same traceback logged by the engine core's loop is a crash.
    engine = [line.replace("serving_completion.py:110]", "core.py:710]") for line in tail]
    assert primary(engine).rule.id == "unclassified-crash"


def test_an_abort_dump_ranks_below_the_line_that_says_why():
    # The NCCL watchdog found the CUDA error and aborted: faulthandler's dump is its effect.
    d = primary(["(RayWorkerVllm pid=7046) Fatal Python error: Aborted",
                 "(RayWorkerVllm pid=7046) ",
                 "(RayWorkerVllm pid=7046) Thread 0x00007f51 (most recent call first):",
                 '(RayWorkerVllm pid=7046)   File "/x/vllm/worker/worker.py", line 9 in execute_model',
                 "[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: "
                 "an illegal memory access was encountered"])
    assert d.rule.id == "cuda-illegal-memory-access"


def test_a_traceback_indented_as_a_block_is_read_whole():
    # pip shows a build's output indented: the exception line is not a frame's source line.
    d = primary(["  × Building editable for vllm (pyproject.toml) did not run successfully.",
                 "  ╰─> [5 lines of output]",
                 "      Traceback (most recent call last):",
                 '        File "<string>", line 187, in <module>',
                 "          raise RuntimeError(",
                 "      RuntimeError: GPUs with compute capability below 7.0 are not supported.",
                 "      [end of output]"])
    assert (d.rule.id, d.exception.type) == ("gpu-compute-capability-below-minimum", "RuntimeError")


def test_an_exception_message_wrapped_over_lines_matches_as_one():
    d = primary(["ValueError: Free memory on device (8.0/64.0 GiB) on startup is less than desired",
                 "GPU memory utilization (0.9, 57.6 GiB). Decrease GPU memory utilization or",
                 "reduce GPU memory used by other processes."])
    assert d.rule.id == "gpu-memory-utilization-exceeds-free-memory"


def test_a_raise_line_joined_with_its_exception_line_is_split():
    d = primary(['raise ValueError("No available memory for the cache blocks. " ValueError: No available memory '
                 "for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."])
    assert (d.rule.id, d.exception.type) == ("no-available-memory-for-cache-blocks", "ValueError")


def test_an_unnamed_traceback_right_after_a_known_failure_line_is_that_failure():
    d = primary(["NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 40",
                 "Traceback (most recent call last):",
                 '  File "/x/vllm/distributed/device_communicators/pynccl.py", line 99, in __init__',
                 "    self.comm = self.nccl.ncclCommInitRank(",
                 "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"])
    assert (d.rule.id, d.line) == ("nccl-communicator-init-failure", 1)
    assert any("right after it (line 2) (RuntimeError)" in note for note in d.notes)


@pytest.mark.parametrize("reason,rule", [
    ("since kernel does not support current device.", "quantization-unsupported-gpu-capability"),
    ("since kernel does not support MoEActivation.SWIGLUSTEP activation.", "unclassified-crash"),
])
def test_a_moe_backend_refused_for_this_gpu_is_the_capability_rule_and_for_other_reasons_not(reason, rule):
    d = primary([f"ValueError: NvFp4 MoE backend 'FLASHINFER_CUTLASS' does not support the deployment configuration {reason}"])
    assert d.rule.id == rule


def test_a_drawn_box_at_the_terminal_width_is_not_a_hard_wrap():
    # rich's traceback panel pads every row to the width: the exception line after it stays whole.
    rows = ["╭" + "─" * 30 + " Traceback (most recent call last) " + "─" * 33 + "╮"]
    rows += ["│ " + text.ljust(96) + " │" for text in (
        "/x/lighteval/models/vllm/vllm_model.py:407 in _loglikelihood_tokens", "",
        "  406 │   continuation_logprobs = []", "❱ 407 │   for token, logprobs in zip(a, output.prompt_logprobs):",
        "  408 │       continuation_logprobs.append(logprobs[token])")]
    rows.append("╰" + "─" * 98 + "╯")
    d = primary([*rows, "TypeError: 'NoneType' object is not subscriptable"])
    assert (d.rule.id, d.exception.type, d.line) == ("unclassified-crash", "TypeError", 8)


def test_nccl_last_error_inside_torch_s_message_names_the_duplicate_gpu():
    d = primary(["torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
                 "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5",
                 "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
                 "Last error:",
                 "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 10"])
    assert d.rule.id == "nccl-communicator-init-failure"


def test_a_traceback_a_wrapper_relogged_at_info_is_fatal_when_it_reached_module_level():
    # A launcher re-logs the server's stderr at INFO: the level is the wrapper's, not the crash's.
    relogged = ["2025-06-27 12:57:51,689 - __main__ - INFO - " + line for line in (
        "Traceback (most recent call last):",
        '  File "/env/bin/vllm", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/env/lib/python3.11/site-packages/vllm/entrypoints/cli/main.py", line 54, in main',
        "    args.dispatch_function(args)",
        "ValueError: something no rule knows")]
    assert primary(relogged).rule.id == "unclassified-crash"
    # Re-logged at INFO without reaching the top, a stack is not a crash by itself.
    inner = relogged[:1] + relogged[3:]
    assert primary(inner) is None

"""The traceback state machines against real interpreter output and vLLM's log shapes."""

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from vcrash.classify.rules import load_pack
from vcrash.harness import analyze_lines

PACK = load_pack()


def real_stderr(code: str) -> list[str]:
    """What this interpreter prints for an uncaught error in `code` (real output, not a mock)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, fh.name], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=30)
    os.unlink(fh.name)
    assert proc.returncode != 0
    return proc.stderr.splitlines()


def rebuilt(lines):
    report = analyze_lines("t.log", lines, PACK)
    return report, report.tracebacks


CHAIN = """
def inner():
    raise KeyError("slot-7")
def middle():
    try:
        inner()
    except KeyError as e:
        raise ValueError("bad slot") from e
try:
    middle()
except ValueError:
    raise RuntimeError("step failed\\nsecond line of message")
"""


def test_chain_cause_and_context_in_printed_order():
    _, tbs = rebuilt(real_stderr(CHAIN))
    assert len(tbs) == 1
    excs = tbs[0].exceptions
    assert [e.type for e in excs] == ["KeyError", "ValueError", "RuntimeError"]
    assert [e.relation for e in excs] == [None, "cause", "context"]
    assert excs[2].message == "step failed\nsecond line of message"
    assert excs[0].frames[-1].function == "inner"
    assert excs[0].frames[-1].code == 'raise KeyError("slot-7")'
    assert not tbs[0].corrupted


GROUP = """
def f1(): raise ValueError("v1")
def f2(): raise TypeError("t1")
errs = []
for f in (f1, f2):
    try: f()
    except Exception as e: errs.append(e)
inner = ExceptionGroup("inner", [KeyError("k")])
raise ExceptionGroup("outer", errs + [inner])
"""


def test_nested_exception_group():
    _, tbs = rebuilt(real_stderr(GROUP))
    assert len(tbs) == 1
    excs = tbs[0].exceptions
    types = [e.type for e in excs]
    assert types == ["ExceptionGroup", "ValueError", "TypeError", "ExceptionGroup", "KeyError"]
    assert [e.group_path for e in excs] == [None, "1", "2", "3", "3.1"]
    assert excs[0].relation is None and all(e.relation == "group" for e in excs[1:])
    assert excs[1].frames[-1].function == "f1"
    assert not tbs[0].corrupted


def test_recursion_repeat_marker():
    _, tbs = rebuilt(real_stderr("def r(n): return r(n + 1)\nr(0)"))
    exc = tbs[0].exceptions[-1]
    assert exc.type == "RecursionError"
    assert exc.repeated_frames > 900


def test_syntax_error_without_traceback_header():
    lines = real_stderr("exec(compile('x = (1,\\n', 'cfg.py', 'exec'))")
    _, tbs = rebuilt(lines)
    assert tbs and tbs[0].exceptions[-1].type == "SyntaxError"


def test_faulthandler_dump_is_a_traceback_most_recent_call_first():
    code = "import faulthandler, ctypes\nfaulthandler.enable()\ndef crash(): ctypes.string_at(0)\ncrash()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    _, tbs = rebuilt(proc.stderr.splitlines())
    assert tbs[0].kind == "faulthandler"
    exc = tbs[0].exceptions[0]
    assert exc.type == "Fatal Python error" and "Segmentation fault" in exc.message
    assert exc.frames[-1].function in ("string_at", "crash")  # innermost last after reversal


def test_cpp_abort_with_native_frames():
    lines = [
        "[rank1]:[E1010 10:43:10.660000000 ProcessGroupNCCL.cpp:1834] [PG ID 0 Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600045 milliseconds before timing out.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 Rank 1] Process group watchdog thread terminated with exception: Watchdog caught collective operation timeout",
        "Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1905 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f1 in /usr/lib/libc10.so)",
        "frame #1: <unknown function> + 0x1234 (0x7f2 in /usr/lib/libtorch_cuda.so)",
        "",
        "Fatal Python error: Aborted",
    ]
    _, tbs = rebuilt(lines)
    cpp = [t for t in tbs if t.kind == "cpp-abort"][0]
    exc = cpp.exceptions[0]
    assert exc.type == "c10::DistBackendError"
    assert "Watchdog caught collective operation timeout" in exc.message
    assert len(exc.native_frames) == 3


def _headed(lines, tag="(EngineCore_DP0 pid=7) ", header="ERROR 08-05 01:53:58 [core.py:710] "):
    return [f"{tag}{header}{line}" for line in lines]


def test_interleaved_streams_do_not_break_each_other():
    engine = _headed(["EngineCore encountered a fatal error."] + real_stderr(CHAIN))
    api = _headed(["AsyncLLM output_handler failed.", "Traceback (most recent call last):",
                   '  File "/x/vllm/v1/engine/async_llm.py", line 439, in output_handler',
                   "    outputs = await engine_core.get_output_async()",
                   "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."],
                  tag="(APIServer pid=1) ", header="ERROR 08-05 01:53:58 [async_llm.py:480] ")
    mixed = []
    for i in range(max(len(engine), len(api))):  # strict alternation, line by line
        if i < len(engine):
            mixed.append(engine[i])
        if i < len(api):
            mixed.append(api[i])
        mixed.append('(APIServer pid=1) INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK')
    report, tbs = rebuilt(mixed)
    by_stream = {t.stream_id.split(":")[1]: t for t in tbs}
    assert [e.type for e in by_stream["EngineCore_DP0"].exceptions] == ["KeyError", "ValueError", "RuntimeError"]
    assert by_stream["APIServer"].exceptions[-1].type.endswith("EngineDeadError")
    assert not any(t.corrupted for t in tbs)
    assert report.diagnoses[0].role == "engine-core"


def test_logger_copy_and_raw_copy_collapse_into_one_with_duplicates():
    body = real_stderr(CHAIN)
    lines = _headed(["EngineCore encountered a fatal error."] + body)
    lines += ["(EngineCore_DP0 pid=7) Process EngineCore_DP0:"] + [f"(EngineCore_DP0 pid=7) {x}" for x in body]
    report, tbs = rebuilt(lines)
    assert len(tbs) == 1
    assert tbs[0].duplicates == [len(body) + 3]
    assert report.accounting["duplicates"] == 1 and report.accounting["balanced"]


def test_cut_off_traceback_is_kept_as_corrupted():
    lines = _headed(["Traceback (most recent call last):",
                     '  File "/x/vllm/v1/worker/gpu_worker.py", line 10, in execute_model',
                     "    output = self.model_runner.execute_model(scheduler_output)"])
    report, tbs = rebuilt(lines)
    assert len(tbs) == 1 and tbs[0].corrupted
    assert tbs[0].exceptions[0].frames[0].function == "execute_model"


def test_pasted_traceback_without_indentation_or_header_still_yields_the_exception():
    lines = [
        'File "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
        "engine_core.run_busy_loop()",
        "...",
        'File "/usr/lib/python3/dist-packages/vllm/v1/structured_output/request.py", line 44, in key',
        'raise ValueError("No valid structured output parameter found")',
        "ValueError: No valid structured output parameter found",
    ]
    report, tbs = rebuilt(lines)
    assert tbs[0].exceptions[-1].type == "ValueError"
    assert report.diagnoses[0].rule.id == "structured-output-no-valid-param"


def test_torch_rank_prefix_and_ray_prefix_streams():
    lines = [f"[rank3]: {x}" for x in real_stderr(CHAIN)]
    lines += [f"(RayWorkerWrapper pid=900, ip=10.0.0.2) {x}" for x in real_stderr("raise OSError('disk')")]
    _, tbs = rebuilt(lines)
    names = sorted(t.stream_id.split(":")[1] for t in tbs)
    assert names == ["RayWorkerWrapper", "rank3"]


@pytest.mark.parametrize("eol", ["\r\n", "\r"])
def test_crlf_and_cr_line_ends(tmp_path, eol):
    from vcrash.analyze import analyze
    from vcrash.read import expand_inputs

    text = eol.join(["INFO 01-01 00:00:00 [x.py:1] hi"] + real_stderr(CHAIN)) + eol
    path = tmp_path / "crlf.log"
    path.write_bytes(text.encode())
    report = analyze(expand_inputs([str(path)]), PACK)
    assert [e.type for e in report.tracebacks[0].exceptions] == ["KeyError", "ValueError", "RuntimeError"]


def test_message_paragraph_after_a_blank_line_stays_with_the_exception():
    lines = real_stderr('raise OSError("401 Client Error.\\n\\nRepository Not Found for url: https://hf.co/x.\\n'
                        'Please make sure you specified the correct repo_id.")')
    lines += ["", "wrote 3 files", "Shutting down"]
    _, tbs = rebuilt(lines)
    msg = tbs[0].exceptions[-1].message
    assert msg.startswith("401 Client Error.\n\nRepository Not Found") and msg.endswith("correct repo_id.")
    assert "wrote 3 files" not in msg


def test_two_server_runs_give_two_roots_each_with_its_own_symptoms():
    from pathlib import Path

    from vcrash.harness import parse_sample

    root = Path(__file__).resolve().parents[1] / "samples"
    first = parse_sample(root / "v1-execute-model-rpc-timeout/constructed-0.12-tp2-hung.log").body
    second = parse_sample(root / "structured-output-no-valid-param/constructed-0.11.0-docker.log").body
    report, _ = rebuilt(first + second)
    got = [(d.rule.id, sorted(s.rule.id for s in d.explains)) for d in report.diagnoses]
    # The latest run leads; the earlier run's root follows with its own symptoms.
    assert got == [("structured-output-no-valid-param", ["engine-dead"]),
                   ("v1-execute-model-rpc-timeout", ["engine-dead", "shm-broadcast-no-available-block"])]
    assert report.diagnoses[0].line > len(first)


def test_run_of_bare_headers_shortcut_changes_nothing(monkeypatch, tmp_path):
    """A region of repeated raw headers takes a shortcut in StreamMachine.feed; the report must
    be the one the general path gives (runs of headers, then a real traceback, then more)."""
    from vcrash.analyze import Options, analyze
    from vcrash.classify.rules import load_pack
    from vcrash.read import Source
    from vcrash.rebuild.stream import StreamMachine
    from vcrash.redact import Redactor

    head = "Traceback (most recent call last):"
    lines = [head] * 300 + ['  File "/x/vllm/v1/engine/core.py", line 5, in step', "ValueError: boom", ""]
    lines += ["(EngineCore pid=7) " + head] * 40 + [head] * 25 + ["  " + head, head, "INFO something", head, head]
    log = tmp_path / "heads.log"
    log.write_text("\n".join(lines) + "\n")
    pack = load_pack()

    def report():
        return analyze([Source(str(log), str(log))], pack, Options()).to_dict(Redactor(True))

    shortcut = report()
    monkeypatch.setattr(StreamMachine, "_repeats_bare_header", lambda self, line: False)
    assert report() == shortcut
    assert shortcut["accounting"]["traceback_headers"] == 300 + 40 + 25 + 1 + 3


@pytest.mark.parametrize("texts", [
    ["Traceback (most recent call last):"],
    ["Traceback (most recent call last):"] * 3,
    ["Traceback (most recent call last):  "],
    ["EngineCore hit an exception: Traceback (most recent call last):"],
])
def test_a_region_of_only_headers_builds_as_if_parsed(texts):
    """build_traceback skips the parse for a region of bare headers: the same traceback."""
    from vcrash.rebuild.stream import StreamMachine, build_traceback
    from vcrash.split import Line, Stream

    stream = Stream("x.log:EngineCore_DP0:7", "EngineCore_DP0", 7, "engine-core")
    machine = StreamMachine(stream, "x.log")
    for lineno, text in enumerate(texts, 1):
        machine.feed(Line(lineno, lineno * 40, stream, text, "raw"), lambda _m: None)
    assert machine.heads_only
    fast = build_traceback(machine, "tb1")
    machine.heads_only = False
    assert build_traceback(machine, "tb1") == fast
    assert fast.corrupted and not fast.exceptions


def test_parses_kept_per_region_text_are_the_fresh_ones(monkeypatch):
    """Every traceback region of every sample, parsed through the kept answers twice (a miss,
    then a hit at other line numbers), gives what a fresh parse gives: exceptions (their lines
    moved), problems naming lines, foreign text."""
    from pathlib import Path

    import vcrash.rebuild.stream as stream_module
    from vcrash.analyze import Options, analyze
    from vcrash.read import Source
    from vcrash.rebuild import parse

    regions = []
    kept_parse = parse.parse_python_kept
    monkeypatch.setattr(stream_module, "parse_python_kept", lambda lines: regions.append(list(lines)) or kept_parse(lines))
    pack = load_pack()
    for path in sorted((Path(__file__).resolve().parents[1] / "samples").rglob("*.log")):
        analyze([Source(str(path), str(path))], pack, Options(fast=False))
    head = "Traceback (most recent call last):"
    regions += [  # problems that name lines, a group, foreign text, a frame-only piece
        [(7, '  File "/x/vllm/a.py", line 3, in f'), (8, "    f()")],
        [(3, head), (4, '  File "/x/a.py", line 1, in f'), (5, head), (6, '  File "/x/b.py", line 2, in g'),
         (7, "ValueError: x")],
        [(10, head), (11, '  File "/x/a.py", line 1, in f'), (12, "a prompt printed here"), (13, "    g()"),
         (14, "KeyError: 'k'")],
        [(20, "  + Exception Group Traceback (most recent call last):"),
         (21, '  |   File "/x/a.py", line 1, in f'), (22, "  | ExceptionGroup: two (2 sub-exceptions)"),
         (23, "  +-+---------------- 1 ----------------"), (24, "    | ValueError: a"),
         (25, "    +---------------- 2 ----------------"), (26, "    | TypeError: b"),
         (27, "    +------------------------------------")],
    ]
    assert len(regions) > 100

    def parsed(p):
        return p.exceptions, p.problems, p.foreign

    named_lines = 0
    kept_regions = 0
    for lines in regions:
        parse._PARSED.clear()
        parse._SEEN_ONCE.clear()
        moved = [(lineno + 1000, text) for lineno, text in lines]
        fresh = parsed(parse.parse_python(lines))
        assert parsed(kept_parse(lines)) == fresh, lines  # seen once: parsed
        assert parsed(kept_parse(lines)) == fresh, lines  # seen twice: parsed, and kept
        kept_regions += tuple(text for _lineno, text in lines) in parse._PARSED
        assert parsed(kept_parse(lines)) == fresh, lines  # the kept answer itself
        assert parsed(kept_parse(moved)) == parsed(parse.parse_python(moved)), lines  # moved to other lines
        named_lines += any(p.startswith("line ") for p in parse.parse_python(moved).problems)
    assert named_lines >= 2 and kept_regions > 100


FORGOTTEN_TASK = """
import asyncio, gc
async def boom():
    raise RuntimeError("can't find a C compiler, set CC")
async def main():
    asyncio.get_running_loop().create_task(boom())
    await asyncio.sleep(0.01)
    gc.collect()
asyncio.run(main())
gc.collect()
raise SystemExit(1)
"""


def test_traceback_cut_under_a_failed_future_takes_the_exception_its_repr_names():
    printed = real_stderr(FORGOTTEN_TASK)
    assert printed[0] == "Task exception was never retrieved" and "exception=RuntimeError(" in printed[1]
    whole = rebuilt(printed)[1]
    assert [(e.type, e.inferred) for e in whole[0].exceptions] == [("RuntimeError", False)]  # its own line wins
    cut = rebuilt(printed[:-2])[1][0]  # pasted without the `raise` and the exception line
    root = cut.exceptions[-1]
    assert (root.type, root.message, root.inferred) == ("RuntimeError", "can't find a C compiler, set CC", True)
    assert cut.corrupted and root.frames and root.line == 2  # the diagnosis points at the repr
    future = ["Future exception was never retrieved",
              "future: <Future finished exception=ValueError('bad \\'x\\' value')>"] + printed[2:-2]
    assert rebuilt(future)[1][0].exceptions[-1].message == "bad 'x' value"
    lowercase = [printed[0], printed[1].replace("exception=RuntimeError", "exception=error")] + printed[2:-2]
    assert rebuilt(lowercase)[1][0].exceptions[-1].type == "<truncated>"


@pytest.mark.parametrize("logged,want", [
    ('TypeError("\'NoneType\' object is not subscriptable")', ("TypeError", "'NoneType' object is not subscriptable")),
    ("AssertionError()", ("AssertionError", "")),
    ("torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')",
     ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB")),
])
def test_traceback_cut_under_the_repr_v0_engine_loop_logs_takes_that_exception(logged, want):
    """V0's MQLLMEngine logs repr(e), then the traceback, every line under one header."""
    frames = ["Traceback (most recent call last):",
              '  File "/x/vllm/engine/multiprocessing/engine.py", line 222, in run_engine_loop',
              "    request_outputs = self.engine_step()"]
    lines = _headed([logged] + frames, tag="", header="ERROR 04-21 06:02:08 [engine.py:161] ")
    tb = rebuilt(lines)[1][0]
    root = tb.exceptions[-1]
    assert (root.type, root.message, root.inferred, root.line) == (*want, True, 1)
    with_line = rebuilt(lines + _headed(["KeyError: 'x'"], tag="", header="ERROR 04-21 06:02:08 [engine.py:161] "))[1][0]
    assert [(e.type, e.inferred) for e in with_line.exceptions] == [("KeyError", False)]  # its own line wins
    prose = rebuilt(_headed(["Retrying(after a pause)"] + frames, tag="", header="ERROR 04-21 06:02:08 [engine.py:161] "))
    assert prose[1][0].exceptions[-1].type == "<truncated>"  # not an exception's repr


def test_exception_line_cut_at_the_end_of_the_input_matches_as_far_as_it_goes():
    frames = _headed(["Traceback (most recent call last):",
                      '  File "/x/vllm/distributed/device_communicators/pynccl_wrapper.py", line 223, in NCCL_CHECK',
                      '    raise RuntimeError(f"NCCL error: {error_str}")'])
    cut = _headed(["RuntimeError: NCCL error: unhandled syst"])

    def rules(lines):
        return [d.rule.id for d in rebuilt(lines)[0].diagnoses]

    assert rules(frames + cut) == ["nccl-communicator-init-failure"]
    assert rules(frames + cut + ["```"]) == ["nccl-communicator-init-failure"]  # a closing fence after it
    later = _headed(["Worker exiting"], header="INFO 08-05 01:54:10 [core.py:1] ") * 3
    assert rules(frames + cut + later) == ["unclassified-crash"]  # not the input's end: the message is whole
    assert rules(frames + _headed(["RuntimeError: NCCL error: un"])) == ["unclassified-crash"]  # too little left


WORKER = "(VllmWorkerProcess pid=48212) ERROR 07-08 13:05:36 multiproc_worker_utils.py:226] "
SUMMARY = (WORKER + "Exception in worker VllmWorkerProcess while processing method init_device: NCCL error: "
           "unhandled cuda error (run with NCCL_DEBUG=INFO for details), Traceback (most recent call last):")
FRAME = WORKER + '  File "/opt/vllm/executor/multiproc_worker_utils.py", line 223, in _run_worker_process'


def test_v0_worker_summary_ends_in_a_header_after_a_comma():
    """V0's multiproc worker logs "<method>: <error>, Traceback (most recent call last):" and the
    frames under it: the summary line is the traceback's header."""
    report = analyze_lines("w.log", [SUMMARY, FRAME], PACK)
    assert [(tb.start_line, tb.end_line) for tb in report.tracebacks] == [(1, 2)]


def test_a_record_holding_a_header_is_never_swallowed_by_an_open_region():
    """A second summary (another failure, or the same line twice) while the stream's first
    traceback waits for frames starts a traceback of its own."""
    report = analyze_lines("w.log", [SUMMARY, SUMMARY, FRAME], PACK)
    assert [(tb.start_line, tb.end_line) for tb in report.tracebacks] == [(1, 1), (2, 3)]


# -- a paste whose first line lost its process tag ------------------------------------------
_TAG = "(APIServer pid=61) "


def test_an_untagged_exception_line_takes_the_tagged_rest_of_its_message():
    lines = ["pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
             _TAG + "  Value error, Model architectures ['FooForCausalLM'] are not supported for now. Supported: ['A']",
             _TAG + "    For further information visit https://errors.pydantic.dev/2.11/v/value_error"]
    _report, tbs = rebuilt(lines)
    assert len(tbs) == 1
    message = tbs[0].exceptions[-1].message
    assert "Value error, Model architectures ['FooForCausalLM'] are not supported" in message
    assert "For further information" in message


def test_an_untagged_header_goes_to_the_tagged_frames_after_it():
    real = real_stderr("def f():\n    raise RuntimeError('boom')\nf()\n")
    lines = [real[0]] + [_TAG + text for text in real[1:]]
    _report, tbs = rebuilt(lines)
    assert len(tbs) == 1
    tb = tbs[0]
    assert tb.stream_id.endswith(":APIServer:61") and tb.start_line == 1 and not tb.corrupted
    assert [e.type for e in tb.exceptions] == ["RuntimeError"] and len(tb.exceptions[0].frames) == 2


@pytest.mark.parametrize("second", [
    _TAG + "ERROR 11-30 10:00:01 [core.py:1]   Value error, logged by its own record",  # a record, not a rest
    _TAG + "INFO 11-30 10:00:01 [api_server.py:1] vLLM API server version 0.11.0",  # not indented
    "(EngineCore_DP0 pid=62)   Value error, of a process with its own open traceback",
])
def test_tagged_lines_that_are_not_the_rest_stay_their_own(second):
    lines = ["(EngineCore_DP0 pid=62) Traceback (most recent call last):",
             '(EngineCore_DP0 pid=62)   File "/x/vllm/a.py", line 3, in f',
             "ValueError: 1 validation error for ModelConfig",
             second]
    _report, tbs = rebuilt(lines)
    untagged = [tb for tb in tbs if ":-:" in tb.stream_id]
    assert untagged and all("Value error" not in tb.exceptions[-1].message for tb in untagged)


def test_an_untagged_header_before_a_logged_record_stays_untagged():
    lines = ["Traceback (most recent call last):",
             "(EngineCore_DP0 pid=62) ERROR 11-30 10:00:01 [core.py:710]   File \"/x/vllm/a.py\", line 3, in f",
             "(EngineCore_DP0 pid=62) ERROR 11-30 10:00:01 [core.py:710] RuntimeError: boom"]
    _report, tbs = rebuilt(lines)
    assert any(":-:" in tb.stream_id for tb in tbs)

"""Request logs quote what users and models wrote: analysis masks it, the bulk scan is blind to
it, and both agree on every line (split/user_text.py)."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vcrash.analyze as pipeline
from vcrash.classify.match import Matcher
from vcrash.classify.rules import load_pack
from vcrash.read import CONTEXT_NEEDLES, MAX_LINE_BYTES, Source, decode
from vcrash.split.user_text import MASK, blanked, masked

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()
NEEDLES = tuple(pipeline.needles_for(Matcher(PACK))) + CONTEXT_NEEDLES
HEAD = "(APIServer pid=7) INFO 10-21 09:16:30 [logger.py:49] "


@pytest.mark.parametrize("record, shown", [
    ("Received request chatcmpl-1: prompt: 'Traceback (most recent call last):\\n', params: SamplingParams(n=1), "
     "prompt_token_ids: [1], lora_request: None.",
     "Received request chatcmpl-1: prompt: '…', params: SamplingParams(n=1), prompt_token_ids: [1], lora_request: None."),
    ("Request chatcmpl-1 details: prompt: \"it's CUDA out of memory\", prompt_token_ids: [1, 2], prompt_embeds shape: None.",
     "Request chatcmpl-1 details: prompt: \"…\", prompt_token_ids: [1, 2], prompt_embeds shape: None."),
    ("Generated response chatcmpl-1 (streaming complete): output: 'Killed \\'x\\' by signal 9', output_token_ids: [5], "
     "finish_reason: stop",
     "Generated response chatcmpl-1 (streaming complete): output: '…', output_token_ids: [5], finish_reason: stop"),
    # vLLM 0.2-0.3 named the next field `sampling params` / `sampling_params`.
    ("Received request cmpl-7d1e: prompt: 'NCCL error', sampling params: SamplingParams(n=1), prompt token ids: None.",
     "Received request cmpl-7d1e: prompt: '…', sampling params: SamplingParams(n=1), prompt token ids: None."),
])
def test_a_request_records_quoted_text_is_masked(record, shown):
    assert masked(HEAD + record) == HEAD + shown


@pytest.mark.parametrize("record", [
    "Received request chatcmpl-1: prompt: 'the line was cut before the quote closed",
    "Received request chatcmpl-1: prompt: 'joined', (EngineCore_DP0 pid=9) ERROR 10-21 09:16:31 [core.py:710] x",
    "Received request chatcmpl-1: prompt: '', params: SamplingParams(n=1)",  # nothing to mask
    "Received request chatcmpl-1: prompt: '…', params: SamplingParams(n=1)",  # masked already
    "Received request chatcmpl-1: params: SamplingParams(n=1, stop=['Error']), lora_request: None.",
    "ValueError: prompt: 'x', params: y",  # not the request logger's record
])
def test_other_lines_are_left_as_they_are(record):
    text = HEAD + record
    assert masked(text) is text


PIECES = ["Received request ", "Request ", " details", "Generated response ", " (streaming delta)", "chatcmpl-1",
          ": prompt: ", ": output: ", "'", '"', "\\", "\\'", ", params: ", ", prompt_token_ids: ",
          ", output_token_ids: ", ", sampling params: ", "Traceback (most recent call last):", "Error", "Killed",
          "timed out", "…", "é", "\x00", "\r", " ", "x", "[1, 2]"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=24), st.booleans())
def test_the_bulk_scan_sees_a_needle_exactly_where_analysis_does(pieces, headed):
    """blanked() on a chunk and masked() on each of its decoded lines agree on every needle."""
    line = (HEAD if headed else "") + "".join(pieces)
    chunk = ("INFO:     10.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\n" + line + "\n").encode()
    seen = bytes(blanked(chunk, 0, len(chunk), MAX_LINE_BYTES))
    assert len(seen) == len(chunk) and seen.count(b"\n") == chunk.count(b"\n")
    scanned = seen.split(b"\n")[1]
    analysed = masked(decode(chunk.split(b"\n")[1])).encode()
    for needle in NEEDLES:
        assert (needle in scanned) == (needle in analysed), (needle, line)


def test_a_prompt_that_quotes_a_crash_is_no_crash(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=7) INFO 10-21 09:14:07 [api_server.py:1839] vLLM API server version 0.11.0\n"
        + HEAD + "Received request chatcmpl-1: prompt: 'my job died: Traceback (most recent call last):\\n"
        "torch.OutOfMemoryError: CUDA out of memory. Fatal Python error: Segmentation fault', params: "
        "SamplingParams(n=1), prompt_token_ids: [1], lora_request: None.\n"
        + HEAD + "Generated response chatcmpl-1: output: 'EngineCore encountered a fatal error. RuntimeError: NCCL "
        "error', output_token_ids: [5], finish_reason: stop\n")
    for fast in (False, True):
        report = pipeline.analyze([Source(str(log), str(log))], PACK, pipeline.Options(fast=fast))
        assert list(report.tracebacks) == [] and report.diagnoses == []


def test_the_bulk_scan_skips_prompts_full_of_crash_words(tmp_path, gen_log):
    """Unmasked, a 10 MB log whose logged prompts quote errors sent half its lines through the
    per-line path (a 20 MB one took 16x longer) and made bogus tracebacks and diagnoses of them."""
    log = tmp_path / "prompts.log"
    gen_log.main([str(log), "--size", "10M", "--crashes", "0", "--seed", "3", "--mix", "crash-worded-prompts"])
    report = pipeline.analyze([Source(str(log), str(log))], PACK)
    (summary,) = report.inputs
    assert summary.examined_lines < 0.02 * summary.lines, (summary.examined_lines, summary.lines)
    planted = json.loads(Path(str(log) + ".planted.json").read_text())["planted"]
    assert sorted(tb.start_line for tb in report.tracebacks) == sorted(p["line"] for p in planted)  # no bogus ones


def test_a_prompt_of_escaped_quotes_is_masked_whole():
    """Escaped quotes (100 K of them: a hostile line) do not close the repr; its pattern, linear,
    finds the quote that does."""
    line = HEAD + "Received request c-1: prompt: '" + "\\'" * 100_000 + "\\\\', params: SamplingParams(n=1)"
    assert masked(line) == HEAD + "Received request c-1: prompt: '…', params: SamplingParams(n=1)"
    data = line.encode()
    seen = blanked(data, 0, len(data), MAX_LINE_BYTES)
    assert seen.count(1) == 2 * 100_000 + 2

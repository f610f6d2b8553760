"""Nothing leaks: quoted evidence is redacted by default in every report format.

Secrets are planted in every place a report quotes log text: exception messages (head and
continuation lines), frame source lines, the log record before a traceback (traceback context),
evidence lines of line rules (timeline events), and request logs (prompts, completions, token
ids). Every renderer registered in `vcrash.report.RENDERERS` is checked, so formats added later
are covered without touching this file.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vcrash.cli import app
from vcrash.redact import Redactor
from vcrash.report import RENDERERS

# Each planted secret has a unique marker that must not survive redaction.
PROMPT = "zebra-prompt-4471 my medical history"
COMPLETION = "zebra-output-5582 the diagnosis is"
TOKEN_ID = "904417"
BEARER = "abcDEF123ghiJKL456mnoPQR789"
SK = "sk-proj-ZZplantedKey1234567890abcdEF"
HF = "hf_QWERTYplantedTOKEN1234567890"
COOKIE = "planted-cookie-998877"
EMAIL = "alice.planted@example.com"
GHTOKEN = "ghp_plantedGithubToken1234567890ab"
PASSWORD = "hunter2planted"
URLPASS = "s3cr3tUrlPass"
ARGV_KEY = "plantedArgvApiKey42"
LIST_KEY = "plantedNonDefaultKey43"
STRIPE = "sk_live_51plantedStripeKey0123456789"
AZURE = "plantedAzureAccountKey+/44=="
SLACK = "https://hooks.slack.com/services/T0PLANT/B0PLANT/plantedSlackHook45"
PYDANTIC = "plantedPydanticPrompt46 summarise my contract"

MARKERS = {
    "prompt": "zebra-prompt-4471",
    "completion": "zebra-output-5582",
    "token ids": TOKEN_ID,
    "bearer": BEARER[:20],
    "sk key": "ZZplantedKey",
    "hf token": "QWERTYplanted",
    "cookie": COOKIE,
    "email": "alice.planted",
    "github token": "plantedGithubToken",
    "password": PASSWORD,
    "url credentials": URLPASS,
    "argv api key": ARGV_KEY,
    "non-default args api key": LIST_KEY,
    "stripe key": "plantedStripeKey",
    "azure account key": "plantedAzureAccountKey",
    "slack webhook": "plantedSlackHook",
    "pydantic input value": "plantedPydanticPrompt",
}

H = "ERROR 01-02 03:04:05 [core.py:100] "
W = "(EngineCore_DP0 pid=4242) "


def planted_log() -> str:
    req = (f"Received request chatcmpl-9f2c: prompt: '{PROMPT}', params: SamplingParams(n=1, temperature=0.7, "
           f"max_tokens=16), prompt_token_ids: [1, {TOKEN_ID}, 77], lora_request: None.")
    lines = [
        f"INFO 01-02 03:04:00 [logger.py:39] {req}",
        f"INFO 01-02 03:04:01 [logger.py:40] Generated response chatcmpl-9f2c: output: '{COMPLETION}', "
        f"output_token_ids: [5, {TOKEN_ID}], finish_reason: stop",
        # The log record right before the traceback becomes its context.
        f"{W}{H}EngineCore encountered a fatal error. {req} Authorization: Bearer {BEARER}",
        f"{W}{H}Traceback (most recent call last):",
        f'{W}{H}  File "/usr/lib/python3/site-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
        f'{W}{H}    client = make_client(api_key="{SK}", hf_token="{HF}")',
        f'{W}{H}  File "/usr/lib/python3/site-packages/vllm/v1/engine/io.py", line 12, in send',
        f'{W}{H}    headers = {{"Authorization": "Bearer {BEARER}", "Cookie": "session={COOKIE}"}}',
        f"{W}{H}ValueError: request from {EMAIL} failed: prompt: '{PROMPT}' password={PASSWORD}",
        f"{W}{H}while posting to https://admin:{URLPASS}@internal.example.com/v1 with {GHTOKEN}",
        f"{W}{H}launched as: vllm serve /m --api-key {ARGV_KEY}; non-default args: {{'api_key': ['{LIST_KEY}']}}",
        f"{W}{H}billing {STRIPE} storage AccountKey={AZURE};EndpointSuffix=x alerts {SLACK}",
        f"{W}{H}  Input should be a valid list [type=list_type, input_value='{PYDANTIC}', input_type=str]",
        f"{W}{H}Cookie: session={COOKIE}",
        f"{W}{H}last output: '{COMPLETION}', output_token_ids: [5, {TOKEN_ID}]",
        # Evidence lines of line rules (timeline events) with secrets in them.
        f"ERROR 01-02 03:04:06 [multiproc_executor.py:150] Worker proc VllmWorker-0 died unexpectedly, "
        f"prompt: '{PROMPT}' user {EMAIL} key {SK} --hf-token {ARGV_KEY} {SLACK} input_value='{PYDANTIC}'",
        f"ERROR 01-02 03:04:07 [shm_broadcast.py:400] No available shared memory broadcast block found in 60 "
        f"seconds. Authorization: Bearer {BEARER} {HF}",
        # A raw (unprefixed) uncaught traceback whose message carries a truncated prompt.
        "Traceback (most recent call last):",
        '  File "/srv/app.py", line 3, in <module>',
        f'    requests.post(url, headers={{"Authorization": "Bearer {BEARER}"}}, cookies="{COOKIE}")',
        f"RuntimeError: engine died while serving prompt: '{PROMPT} " + "x" * 400 + "'",
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    path = tmp_path_factory.mktemp("redact") / "server.log"
    path.write_text(planted_log(), encoding="utf-8")
    return path


def run(*args):
    runner = CliRunner()
    return runner.invoke(app, list(args), catch_exceptions=False)


def leaks(text: str) -> list[str]:
    return [name for name, marker in MARKERS.items() if marker in text]


def test_planted_secrets_reach_the_report_without_redaction(planted):
    """Guard against a vacuous test: unredacted, every secret shows up in the JSON report."""
    res = run("analyze", str(planted), "--format", "json", "--no-redact", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["tracebacks"], "the planted tracebacks were not rebuilt"
    assert any(tb.get("context") for tb in data["tracebacks"]), "no traceback context captured"
    assert any(e["kind"] == "event" for e in data["timeline"]), "no line-rule event in the timeline"
    missing = sorted(set(MARKERS) - set(leaks(res.stdout)))
    assert not missing, f"planted secrets never reached the report: {missing}"


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_format_redacts_by_default(planted, fmt, tmp_path):
    res = run("analyze", str(planted), "--format", fmt, "--fail-on", "never")
    assert res.exit_code == 0, res.output
    assert res.stdout.strip(), f"{fmt} wrote nothing"
    assert not leaks(res.stdout), f"{fmt} leaks {leaks(res.stdout)}"
    # The same through -o FMT=PATH.
    out = tmp_path / f"report.{fmt}"
    res = run("analyze", str(planted), "-o", f"{fmt}={out}", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    assert not leaks(out.read_text(encoding="utf-8")), f"{fmt} (-o) leaks"


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_no_redact_keeps_the_text(planted, fmt):
    res = run("analyze", str(planted), "--format", fmt, "--no-redact", "--fail-on", "never")
    assert res.exit_code == 0, res.output
    # Every format quotes the primary evidence (the exception line) at least.
    assert MARKERS["email"] in res.stdout or fmt == "jsonl" and not res.stdout.strip(), fmt


def test_redacted_json_keeps_the_diagnosis(planted):
    """Redaction must not destroy what the diagnosis is about."""
    res = run("analyze", str(planted), "--format", "json", "--fail-on", "never")
    data = json.loads(res.stdout)
    assert data["diagnoses"]
    types = {e["type"] for tb in data["tracebacks"] for e in tb["exceptions"]}
    assert {"ValueError", "RuntimeError"} <= types
    frames = [f for tb in data["tracebacks"] for e in tb["exceptions"] for f in e["frames"]]
    assert any(f["function"] == "run_engine_core" for f in frames)
    text = json.dumps(data)
    assert "REDACTED" in text
    assert "SamplingParams(n=1" in text  # request parameters are diagnostic, not secret


# -- the Redactor itself ----------------------------------------------------------------------
R = Redactor()


@pytest.mark.parametrize("text,marker", [
    (f"prompt: '{PROMPT}', params: SamplingParams(n=1)", "zebra-prompt"),
    (f'prompt: "{PROMPT} with \\"quotes\\" inside", params', "zebra-prompt"),
    (f"prompt: '{PROMPT} it\\'s escaped', params", "escaped"),
    (f"prompt: '{PROMPT} cut off by the line cap …[line cut]", "zebra-prompt"),  # no closing quote
    (f"prompt: '{PROMPT}\\ncontinued after an escaped newline'", "continued"),
    (f"prompt: '{PROMPT} cut in an escape \\", "zebra-prompt"),
    (f"output: '{COMPLETION}'", "zebra-output"),
    (f"prompt_token_ids: [1, {TOKEN_ID}, 3]", TOKEN_ID),
    (f"prompt_token_ids: [1, {TOKEN_ID}, 3, 4", TOKEN_ID),  # cut
    (f"prompt_embeds: tensor([0.1, 0.{TOKEN_ID}])", TOKEN_ID),
    (f"Authorization: Bearer {BEARER}", BEARER),
    (f"'authorization': 'Bearer {BEARER}'", BEARER),
    (f"curl -H 'Authorization: Basic {BEARER}'", BEARER),
    (f"key={SK}", "ZZplantedKey"),
    (f"OPENAI_API_KEY={SK}", "ZZplantedKey"),
    (f"export HF_TOKEN={HF}", "QWERTYplanted"),
    (f"Cookie: session={COOKIE}; other=1", COOKIE),
    (f"Set-Cookie: id={COOKIE}; Path=/", COOKIE),
    (f"cookies={{'session': '{COOKIE}'}}", COOKIE),
    (f"mail {EMAIL} now", "alice.planted"),
    (f"password={PASSWORD}", PASSWORD),
    (f"'password': '{PASSWORD}'", PASSWORD),
    (f"https://admin:{URLPASS}@host.example.com/x", URLPASS),
    (f"token {GHTOKEN}", "plantedGithubToken"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlcGxhbnRlZA", "eyJzdWIiOiJwbGFudGVkIn0"),
    # argparse echoes the command line in argv form.
    ("vllm serve: error: unrecognized arguments: --api-key plantedArgvKey77 --port 8000", "plantedArgvKey"),
    ("vllm serve /models/x --hf-token plantedArgvHf88 --port 8000", "plantedArgvHf"),
    ("argv: ['vllm', 'serve', '--api-key', 'plantedListKey99', '--port', '8000']", "plantedListKey"),
    # vLLM's non-default-args line: argparse keeps --api-key as a list.
    ("non-default args: {'model': '/m', 'api_key': ['plantedDictKey11', 'second22'], 'port': 8000}",
     "plantedDictKey"),
    ("non-default args: {'model': '/m', 'api_key': ['plantedDictKey11', 'second22'], 'port': 8000}", "second22"),
    ("non-default args: {'model': '/m', 'api_key': ['plantedCutKey", "plantedCutKey"),  # cut mid-list
    ("stripe sk_live_51HplantedStripe0123456789abcd", "plantedStripe"),
    ("rk_test_51HplantedRestricted0123456789", "plantedRestricted"),
    ("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=plantedAzure+/Key==;EndpointSuffix=core.windows.net",
     "plantedAzure"),
    ("https://a.blob.core.windows.net/c/x?sv=2020&sig=plantedSas%2Bxyz&se=1", "plantedSas"),
    ("POST https://hooks.slack.com/services/T0PLANT01/B0PLANT02/plantedSlack123 failed", "plantedSlack"),
    ("  Input should be a valid list [type=list_type, input_value='plantedPydantic tell me', input_type=str]",
     "plantedPydantic"),
    ("  Input should be a valid dict [type=dict_type, input_value=[{'x': 'plantedPyList'}], input_type=list]",
     "plantedPyList"),
])
def test_redactor_patterns(text, marker):
    out = R.text(text)
    assert marker not in out, out
    assert "REDACTED" in out


@pytest.mark.parametrize("text", [
    "ValueError: No valid structured output parameter found",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "max_tokens=16, temperature=0.7, top_p=1.0",
    "Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 4.5 tokens/s",
    'File "/usr/lib/python3/site-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
    "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.",
    "KeyError: 'model.layers.0.self_attn.qkv_proj.weight'",
    # Options that only look like secrets, and values that say what was wrong.
    "vllm serve /models/x --max-num-batched-tokens 8192 --tokenizer /models/tok --hf-token --port 8000",
    "non-default args: {'model': '/models/qwen', 'max_num_batched_tokens': 8192, 'api_key': None}",
    "  Input should be greater than 0 [type=greater_than, input_value=-1, input_type=int]",
    "AccountName=acct;EndpointSuffix=core.windows.net",
])
def test_redactor_keeps_diagnostic_text(text):
    assert R.text(text) == text


def test_redactor_disabled_and_empty():
    off = Redactor(enabled=False)
    assert off.text(f"prompt: '{PROMPT}'") == f"prompt: '{PROMPT}'"
    assert R.text("") == ""
    assert R.text(None) is None


def test_redactor_walks_nested_structures():
    d = {"exceptions": [{"type": "E", "message": f"x {EMAIL}", "frames": [{"code": f"k='{SK}'", "file": "a.py"}],
                         "native_frames": [f"frame #0: f(Bearer {BEARER}) (0x1 in libx.so)"]}],
         "context": f"Bearer {BEARER}", "corrupted_reason": f"unexpected line {EMAIL}"}
    out = json.dumps(R.traceback(d))
    assert not leaks(out), leaks(out)


def test_redactor_is_fast_on_hostile_text():
    import time

    t = time.perf_counter()
    for text in ["prompt: '" + "\\" * 200_000, "a@" * 100_000, "Bearer " + "x" * 200_000,
                 "prompt: '" + "\\'" * 100_000, ("x" * 50 + "@") * 4000]:
        R.text(text)
    assert time.perf_counter() - t < 5


def test_frame_source_lines_are_evidence_not_request_text(tmp_path):
    """`output = func(*args, **kwargs)` is vLLM's own source line, not a completion."""
    log = tmp_path / "worker.log"
    log.write_text("\n".join([
        "(Worker_TP0 pid=7) ERROR 01-02 03:04:05 [multiproc_executor.py:671] WorkerProc hit an exception.",
        "(Worker_TP0 pid=7) ERROR 01-02 03:04:05 [multiproc_executor.py:671] Traceback (most recent call last):",
        '(Worker_TP0 pid=7) ERROR 01-02 03:04:05 [multiproc_executor.py:671]   File "/x/vllm/v1/executor/'
        'multiproc_executor.py", line 666, in worker_busy_loop',
        "(Worker_TP0 pid=7) ERROR 01-02 03:04:05 [multiproc_executor.py:671]     output = func(*args, **kwargs)",
        "(Worker_TP0 pid=7) ERROR 01-02 03:04:05 [multiproc_executor.py:671] RuntimeError: CUDA error: an illegal "
        "memory access was encountered",
    ]) + "\n")
    for fmt in ("json", "text", "markdown"):
        res = run("analyze", str(log), "--format", fmt, "--fail-on", "never")
        assert "output = func(*args, **kwargs)" in res.stdout, fmt


@pytest.mark.parametrize("code", [
    'parser.add_argument("--api-key", type=str, default=None, help="API key")',
    "output = func(*args, **kwargs)",
    'cmd = ["vllm", "serve", "--tokenizer", tok, "--max-num-batched-tokens", "8192"]',
])
def test_frame_source_lines_keep_option_names(code):
    assert R.code(code) == code


def test_traceback_dict_redacted_inline_as_the_walk_would():
    """Traceback.to_dict(redactor) redacts its texts itself; it must equal walking the plain dict
    (a new text field needs its redaction in to_dict), on every sample and on secrets planted in
    every text field."""
    from pathlib import Path

    import vcrash.analyze as pipeline
    from vcrash.classify.rules import load_pack
    from vcrash.read import Source
    from vcrash.rebuild.model import ExceptionInfo, Frame, Traceback

    secret = "api_key=sk-abcdefghijklmnopqrstuvwxyz0123456789 Bearer abcdefghijklmnopqrstuvwx"
    planted = Traceback("tb1", "in.log", "in.log:X:1", "engine-core", 1, 3, corrupted=True,
                        corrupted_reason=secret, context=secret, process_hint=secret, time="10-09 08:53:50",
                        exceptions=[ExceptionInfo("ValueError", secret, None,
                                                  [Frame("/x/a.py", 3, "f", f"key = '{secret}'")],
                                                  native_frames=[secret], group_path="1")])
    r = Redactor(True)
    tracebacks = [planted]
    pack = load_pack()
    for path in sorted((Path(__file__).resolve().parents[1] / "samples").rglob("*.log")):
        tracebacks += pipeline.analyze([Source(str(path), str(path))], pack).tracebacks
    assert len(tracebacks) > 100
    for tb in tracebacks:
        assert tb.to_dict(r) == r._walk(tb.to_dict()), tb.id
    assert "sk-abc" not in str(planted.to_dict(r))


def test_every_pattern_compiles():
    # They compile on first use: a broken one must not wait for a secret to show it.
    import regex

    from vcrash import redact

    for pattern, _repl, _needles in redact._PATTERNS + redact._CODE_PATTERNS:
        assert regex.compile(*pattern._args).sub("", "x") == "x"


GATED_TEXTS = [
    "api_key=sk-abcdefghijklmnop", "'password': 'hunter2hunter2'", 'HF_TOKEN="hf_abcdefghijklmnopqrstuvwx"',
    "client_secret : s3cr3tvalue99", "x-api-key:abcdefgh12345", "self.api_key = 'literal-key-123456'",
    "prompt: 'tell me a secret'", "Received request cmpl-1: prompt: 'hi there', params: SamplingParams(n=1)",
    "prompt_token_ids: [1, 2, 3]", "'output': \"a completion\"", "messages = [{'role': 'user'}]",
    "--api-key abcdef123456", "'--hf-token', 'hf_abcdefghijklmnopqrstuvwx'", "--max-num-batched-tokens 8192",
    "Avg prompt throughput: 7557.1 tokens/s, Avg generation throughput: 871.3 tokens/s",
    "eos_token: '</s>'", "PROMPT_EMBEDS=[0.1, 0.2]", "text=\"quoted text\"", "CREDENTIALS: abc123def456",
]


def test_a_gate_never_keeps_a_text_its_pattern_would_change():
    import regex

    from vcrash import redact

    for pattern, repl, _needles in redact._PATTERNS + redact._CODE_PATTERNS:
        full = regex.compile(*pattern._args)
        for text in GATED_TEXTS:
            assert pattern.sub(repl, text) == full.sub(repl, text), (pattern._args[0][:40], text)

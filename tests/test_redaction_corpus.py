"""The redaction corpus (tests/data/redaction/corpus.toml) through every output format.

Each secret is planted in its own log, in every place a report quotes log text (the record
before a traceback, the exception line, a continuation line, a line-rule evidence line, and
for hard-coded ones a frame's source line); each text that must stay is planted as a frame's
source line, a frame's path or an exception line. The logs are analyzed once (as `analyze`
over a folder does) and scanned once per redaction setting, then rendered in every analyze
format, every scan format and the follow-mode notices.

A format does not quote everything (GitHub annotations carry the headline only), so each
check is made where the format shows the text with `--no-redact`; the JSON report shows all of
it, and every format must show some, so no check is vacuous.
"""

from __future__ import annotations

import io
import re
import tomllib
from pathlib import Path

import pytest

from vcrash.analyze import analyze, derived_rules
from vcrash.classify.rules import load_pack
from vcrash.read import expand_inputs
from vcrash.redact import Redactor
from vcrash.report import RENDERERS
from vcrash.report.findings import Batch
from vcrash.scan import SCAN_FORMATS, run_scan, scan_renderer
from vcrash.split.user_text import masked

CORPUS = tomllib.loads((Path(__file__).parent / "data" / "redaction" / "corpus.toml").read_text(encoding="utf-8"))
SECRETS = CORPUS["secret"]
KEEPS = CORPUS["keep"]

E = "(EngineCore_DP0 pid=311) ERROR 01-02 03:04:05 [core.py:710] "
SITE = "/usr/local/lib/python3.12/dist-packages"


def secret_log(secret: dict) -> str:
    text = secret["text"]
    code = secret.get("code", "notify(request)")
    return "\n".join([
        "(APIServer pid=7) INFO 01-02 03:04:00 [api_server.py:1839] vLLM API server version 0.11.0",
        f"{E}EngineCore encountered a fatal error. {text}",
        f"{E}Traceback (most recent call last):",
        f'{E}  File "{SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core',
        f"{E}    engine_core.run_busy_loop()",
        f'{E}  File "/srv/app/hooks.py", line 12, in notify',
        f"{E}    {code}",
        f"{E}ValueError: request failed: {text}",
        f"{E}{text}",
        f"ERROR 01-02 03:04:06 [multiproc_executor.py:150] Worker proc VllmWorker-0 died unexpectedly, {text}",
    ]) + "\n"


def code_log() -> str:
    """Every code text as a frame's source line, every path as a frame's file and in the message."""
    frames = []
    paths = [k["text"] for k in KEEPS if k["where"] == "path"]
    for i, keep in enumerate(k for k in KEEPS if k["where"] == "code"):
        path = paths[i % len(paths)]
        frames += [f'{E}  File "{path}", line {100 + i}, in step_{i}', f"{E}    {keep['text']}"]
    tried = " or ".join(f"'{p}'" for p in paths)
    return "\n".join([f"{E}EngineCore encountered a fatal error.", f"{E}Traceback (most recent call last):",
                      *frames, f"{E}FileNotFoundError: [Errno 2] No such file or directory: {tried}"]) + "\n"


def message_log(keep: dict) -> str:
    return "\n".join([
        f"{E}EngineCore encountered a fatal error.",
        f"{E}Traceback (most recent call last):",
        f'{E}  File "{SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core',
        f"{E}    engine_core.run_busy_loop()",
        f"{E}ValueError: engine config rejected: {keep['text']}",
    ]) + "\n"


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Whitespace and panel/table borders: where a renderer wraps or folds a long value.
LAYOUT = re.compile(r"[\s│┃╭╮╰╯─━┌┐└┘├┤┬┴┼]+")


def flat(text: str) -> str:
    """The text as one run of characters: a value wrapped across lines or cells is whole again."""
    return LAYOUT.sub("", ANSI.sub("", text))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """{format: (redacted output, unredacted output)} for every analyze and scan format."""
    folder = tmp_path_factory.mktemp("corpus")
    for i, secret in enumerate(SECRETS):
        (folder / f"secret-{i:02d}.log").write_text(secret_log(secret), encoding="utf-8")
    (folder / "keep-code.log").write_text(code_log(), encoding="utf-8")
    for i, keep in enumerate(k for k in KEEPS if k["where"] == "message"):
        (folder / f"keep-message-{i:02d}.log").write_text(message_log(keep), encoding="utf-8")
    pack = load_pack([])
    sources = expand_inputs([str(folder)])
    report = analyze(sources, pack)
    out: dict[str, tuple[str, str]] = {}
    for fmt, render in RENDERERS.items():
        pair = []
        for enabled in (True, False):
            buf = io.StringIO()
            render(report, buf, Redactor(enabled=enabled))
            pair.append(buf.getvalue())
        out[f"analyze {fmt}"] = (pair[0], pair[1])
    rules_by_id = {r.id: r for r in [*derived_rules(pack), *pack.rules]}
    batches = {enabled: Batch(run_scan(sources, jobs=1, redact=enabled), rules_by_id, pack.version)
               for enabled in (True, False)}
    for fmt in SCAN_FORMATS:
        pair = []
        for enabled in (True, False):
            buf = io.StringIO()
            scan_renderer(fmt)(batches[enabled], buf)
            pair.append(buf.getvalue())
        out[f"scan {fmt}"] = (pair[0], pair[1])
    out["follow notices"] = (_follow(sources, pack, True), _follow(sources, pack, False))
    return out


def _follow(sources, pack, redact: bool) -> str:
    from vcrash.follow import follow

    buf = io.StringIO()
    follow(sources, pack, redact=redact, notify=buf, live=False, stop=lambda: True)
    return buf.getvalue()


FORMATS = [f"analyze {f}" for f in RENDERERS] + [f"scan {f}" for f in SCAN_FORMATS] + ["follow notices"]


def test_the_corpus_reaches_the_json_report_unredacted(outputs):
    """Guard against vacuous checks: with --no-redact, every planted text is in the report."""
    plain = flat(outputs["analyze json"][1])
    # A request record's prompt is masked before analysis reads it (split/user_text.py): it
    # reaches no report, redacted or not.
    quoted = [s for s in SECRETS if masked(s["text"]) != s["text"]]
    assert [s["name"] for s in quoted] == ["prompt in a request log"]
    assert [s["name"] for s in quoted if flat(s["marker"]) in plain] == []
    assert [s["name"] for s in SECRETS if s not in quoted and flat(s["marker"]) not in plain] == []
    # JSON escapes quotes; the keep texts are compared as the report encodes them.
    import json

    assert [k["name"] for k in KEEPS if flat(json.dumps(k["text"])[1:-1]) not in plain] == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_secret_survives(outputs, fmt):
    redacted, plain = (flat(t) for t in outputs[fmt])
    shown = [s for s in SECRETS if flat(s["marker"]) in plain]
    assert shown, f"{fmt} quotes none of the corpus: the check would be vacuous"
    leaked = [s["name"] for s in shown if flat(s["marker"]) in redacted]
    assert leaked == [], f"{fmt} leaks: {leaked}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_code_and_paths_stay(outputs, fmt):
    redacted, plain = (flat(t) for t in outputs[fmt])
    lost = []
    for keep in KEEPS:
        # The forms a format may encode the text in: as is, JSON-escaped, XML-escaped.
        forms = {flat(keep["text"]), flat(_json(keep["text"])), flat(_xml(keep["text"]))}
        if any(f in plain for f in forms) and not any(f in redacted for f in forms):
            lost.append(keep["name"])
    assert lost == [], f"{fmt} redacts what must stay: {lost}"


def _json(text: str) -> str:
    import json

    return json.dumps(text)[1:-1]


def _xml(text: str) -> str:
    from xml.sax.saxutils import escape

    return escape(text, {'"': "&quot;", "'": "&apos;"})

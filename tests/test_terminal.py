"""The terminal report: widths, titles, locations, cut evidence, plurals, NO_COLOR, goldens."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from vcrash.analyze import analyze
from vcrash.classify.rules import load_pack
from vcrash.harness import parse_sample
from vcrash.read import expand_inputs
from vcrash.redact import Redactor
from vcrash.report.terminal import clip, render_terminal

ROOT = Path(__file__).resolve().parents[1]
SO_SAMPLE = ROOT / "samples/structured-output-no-valid-param/constructed-0.11.0-docker.log"
GOLDEN = Path(__file__).parent / "golden" / "terminal"
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|4[0-8]|9[0-7]|10[0-7])[;m]")


@pytest.fixture(scope="module")
def pack():
    return load_pack([])


def report_for(tmp_path, monkeypatch, pack, name="server.log"):
    sample = parse_sample(SO_SAMPLE)
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(sample.body) + "\n")
    monkeypatch.chdir(tmp_path)
    return analyze(expand_inputs([name]), pack)


def render(report, width, color=False):
    buf = io.StringIO()
    render_terminal(report, buf, Redactor(), color=color, width=width)
    return buf.getvalue()


@pytest.mark.parametrize("width", [80, 100])
def test_panel_title_is_never_cut_by_the_border(tmp_path, monkeypatch, pack, width):
    text = render(report_for(tmp_path, monkeypatch, pack), width)
    title = "Invalid structured-output request killed the engine core"
    assert title in text
    top = next(line for line in text.splitlines() if line.startswith("╭"))
    assert top.endswith("─╮") and len(top) == width
    assert re.search(r"\w─╮$", top) is None  # no word runs into the corner


def test_where_keeps_file_and_line_whole(tmp_path, monkeypatch, pack):
    name = "var/log/pods/inference_vllm-qwen-7b-5d9f8c7b6-abcde_0123456789ab/vllm-server/0.log"
    text = render(report_for(tmp_path, monkeypatch, pack, name), 80)
    where = [line for line in text.splitlines() if "Where:" in line]
    assert len(where) == 1 and "/vllm-server/0.log:47" in where[0] and "…" in where[0]


def test_cut_evidence_ends_at_a_word_with_ellipsis(tmp_path, monkeypatch, pack):
    text = render(report_for(tmp_path, monkeypatch, pack), 100)
    symptom = next(line for line in text.splitlines() if line.startswith("  • engine-dead"))
    assert symptom.endswith(" for the…")
    text = "EngineCore encountered an issue. See stack trace (above) for the root cause."
    assert clip(text, 50) == "EngineCore encountered an issue. See stack trace…"
    assert clip(text, 200) == text
    assert clip("x" * 300, 100) == "x" * 99 + "…"


def test_plurals(tmp_path, monkeypatch, pack):
    log = tmp_path / "one.log"
    log.write_text("Traceback (most recent call last):\n"
                   '  File "/x/vllm/v1/engine/core.py", line 1, in run\n'
                   "    run()\n"
                   "RuntimeError: boom\n")
    monkeypatch.chdir(tmp_path)
    text = render(analyze(expand_inputs(["one.log"]), pack), 100)
    assert "1 traceback rebuilt" in text and "1 process stream" in text
    assert "1 tracebacks" not in text and "1 process streams" not in text


def test_no_crash_says_what_its_tracebacks_were(tmp_path, monkeypatch, pack):
    # A request's handled failure is no crash, but "no crash found" alone reads as "all well".
    log = tmp_path / "handled.log"
    log.write_text("(APIServer pid=7) ERROR 11-30 10:00:00 [serving_chat.py:1] Error in chat completion stream generator.\n"
                   "(APIServer pid=7) Traceback (most recent call last):\n"
                   '(APIServer pid=7)   File "/x/vllm/entrypoints/openai/serving_chat.py", line 575, in '
                   "chat_completion_stream_generator\n"
                   "(APIServer pid=7)     reasoning_parser = self.reasoning_parser(\n"
                   "(APIServer pid=7) TypeError: __init__() got an unexpected keyword argument 'chat_template_kwargs'\n")
    monkeypatch.chdir(tmp_path)
    report = analyze(expand_inputs(["handled.log"]), pack)
    assert report.diagnoses == []
    text = render(report, 200)
    assert "No crash found" in text
    assert "1 traceback found, none fatal" in text and "at line 5: TypeError: __init__() got an" in text


def test_no_color_env_on_a_terminal(tmp_path, monkeypatch, pack):
    report = report_for(tmp_path, monkeypatch, pack)
    assert COLOUR.search(render(report, 100, color=True))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not COLOUR.search(render(report, 100, color=True))


@pytest.mark.parametrize("width", [80, 120])
def test_golden_widths(tmp_path, monkeypatch, pack, width):
    text = render(report_for(tmp_path, monkeypatch, pack), width)
    golden = GOLDEN / f"analyze-structured-output-{width}.txt"
    if os.environ.get("VCRASH_BLESS") or not golden.exists():
        golden.write_text(text)
    assert text == golden.read_text()
    assert all(len(line) <= width for line in text.splitlines() if not line.startswith(("  File", "    ", "  ", "Traceback")))


def test_no_color_env_for_the_runbook(pack, monkeypatch):
    from vcrash.runbook import render_runbook

    rule = next(r for r in pack.rules if r.id == "structured-output-no-valid-param")
    buf = io.StringIO()
    monkeypatch.setenv("NO_COLOR", "1")
    render_runbook(rule, "rich", buf)
    assert buf.getvalue() and not COLOUR.search(buf.getvalue())


def test_markdown_timeline_context_is_cut_at_a_word(tmp_path, monkeypatch, pack):
    from vcrash.report import RENDERERS

    head = "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:710] "
    log = tmp_path / "server.log"
    log.write_text("\n".join([
        "(APIServer pid=1) INFO 01-02 03:04:00 [api_server.py:1] vLLM API server version 0.11.0",
        f"{head}EngineCore encountered a fatal error while stepping the scheduler for the batch",
        f"{head}Traceback (most recent call last):",
        f'{head}  File "/x/vllm/v1/engine/core.py", line 701, in run_engine_core',
        f"{head}    engine_core.run_busy_loop()",
        f"{head}RuntimeError: boom",
    ]) + "\n")
    monkeypatch.chdir(tmp_path)
    buf = io.StringIO()
    RENDERERS["markdown"](analyze(expand_inputs(["server.log"]), pack), buf, Redactor())
    row = next(line for line in buf.getvalue().splitlines() if "→ RuntimeError" in line)
    assert "a fatal error while stepping the… → RuntimeError" in row, row

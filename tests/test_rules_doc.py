"""docs/rules.md: the worked example runs as written, and the doc covers every rule key."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vcrash.classify.rules import DOC_KEYS, LIVENESS_KEYS, MATCH_KEYS, TOP_KEYS
from vcrash.cli import app

DOC = Path(__file__).resolve().parents[1] / "docs" / "rules.md"
FENCE = re.compile(r"^```(\w+)(?: file=(\S+))?\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks():
    return [(m.group(1), m.group(2), m.group(3)) for m in FENCE.finditer(DOC.read_text(encoding="utf-8"))]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_worked_example_from_an_empty_folder_to_green(tmp_path, monkeypatch):
    files = [(path, body) for _lang, path, body in blocks() if path]
    assert len(files) >= 2, "the worked example lost its rule or its sample"
    for path, body in files:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    console = [body for lang, _path, body in blocks() if lang == "console"]
    assert console, "the worked example lost its commands"
    steps: list[tuple[str, list[str]]] = []
    for line in console[-1].splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            steps[-1][1].append(line)
    assert [cmd.split()[:3] for cmd, _ in steps][:2] == [["vcrash", "rules", "lint"], ["vcrash", "rules", "test"]]
    runner = CliRunner()
    for cmd, expected in steps:
        args = shlex.split(cmd)
        assert args[0] == "vcrash"
        res = runner.invoke(app, args[1:], catch_exceptions=False)
        out = _flat(res.output)
        assert res.exit_code == 0, f"{cmd}: exit {res.exit_code}\n{res.output}"
        for want in expected:
            # The pack grows: "N rules" is any count.
            pattern = re.sub(r"\d+\\ rules", lambda _: r"\d+\ rules", re.escape(_flat(want)))
            assert re.search(pattern, out), f"{cmd}: expected {want!r} in\n{res.output}"


def test_the_example_sample_marks_its_root_the_documented_way():
    sample = next(body for _lang, path, body in blocks() if path and path.endswith(".log"))
    assert sum(1 for line in sample.splitlines() if line.startswith("#=ROOT=# ")) == 1


@pytest.mark.parametrize("key", sorted(TOP_KEYS - {"match", "doc", "liveness", "repro"} | MATCH_KEYS | DOC_KEYS
                                       | LIVENESS_KEYS))
def test_every_rule_key_is_documented(key):
    text = DOC.read_text(encoding="utf-8")
    assert re.search(rf"`[^`\n]*\b{key}\b[^`\n]*`", text), f"docs/rules.md does not document {key!r}"

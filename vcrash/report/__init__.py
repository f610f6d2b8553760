"""Stage 5, report: renderers over the one report object. Machine formats are never wrapped."""

from __future__ import annotations

import json
from typing import Callable, TextIO

from vcrash.redact import Redactor
from vcrash.report.model import Report

Renderer = Callable[[Report, TextIO, Redactor], None]


def render_json(report: Report, out: TextIO, redactor: Redactor) -> None:
    json.dump(report.to_dict(redactor), out, indent=2, ensure_ascii=False)
    out.write("\n")


def render_jsonl(report: Report, out: TextIO, redactor: Redactor) -> None:
    """One diagnosis per line (healthy logs write nothing), for log shippers and jq."""
    data = report.to_dict(redactor)
    for diag in data["diagnoses"]:
        out.write(json.dumps({"schema": data["schema"], **diag}, ensure_ascii=False) + "\n")


def render_text(report: Report, out: TextIO, redactor: Redactor) -> None:
    from vcrash.report.terminal import render_terminal

    render_terminal(report, out, redactor, color=False)


def render_rich(report: Report, out: TextIO, redactor: Redactor) -> None:
    from vcrash.report.terminal import render_terminal

    render_terminal(report, out, redactor, color=True)


RENDERERS: dict[str, Renderer] = {
    "json": render_json,
    "jsonl": render_jsonl,
    "text": render_text,
    "rich": render_rich,
}

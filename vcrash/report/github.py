"""GitHub Actions workflow commands: `::error file=…,line=…,title=…::message`.

At most 10 annotations per run (GitHub drops the rest of a step's annotations silently), ranked
by severity, root cause before symptom, then log order. Escaping follows actions/toolkit
`command.ts`: data escapes `%`, `\\r`, `\\n`; property values also escape `:` and `,`.
When `GITHUB_STEP_SUMMARY` is set, the Markdown report is appended to that file too.
"""

from __future__ import annotations

import os
from typing import TextIO

from vcrash.redact import Redactor
from vcrash.report.findings import (Batch, batch_from_report, finding_message, input_problems, ranked_findings,
                                    relative_path)
from vcrash.report.model import Report

MAX_ANNOTATIONS = 10
MAX_PROBLEM_ANNOTATIONS = 3
# The step summary is capped at 1 MiB per step by GitHub; stay below it.
MAX_SUMMARY_BYTES = 1000 * 1024
COMMAND = {"error": "error", "warning": "warning", "note": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workflow_command(command: str, message: str, **props) -> str:
    items = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{command}{(' ' + items) if items else ''}::{escape_data(message)}"


def github_lines(batch: Batch) -> list[str]:
    ranked = list(ranked_findings(batch))
    problems = list(input_problems(batch))
    # Logs not read whole keep a few of the ten annotations even when findings would fill them.
    finding_room = MAX_ANNOTATIONS - min(len(problems), MAX_PROBLEM_ANNOTATIONS)
    shown = ranked[:finding_room]
    lines = []
    for res, f in shown:
        message = finding_message(f, batch.rule(f["rule"])) + f"\nRunbook: vcrash explain {f['rule']}"
        lines.append(workflow_command(COMMAND.get(f["severity"], "warning"), message,
                                      file=relative_path(res.path), line=max(1, int(f["line"] or 1)),
                                      title=f"vcrash ({f['rule']}): {f['title']}"))
    for res, problem, message in problems[:MAX_ANNOTATIONS - len(shown)]:
        lines.append(workflow_command("warning", message, file=relative_path(res.path),
                                      title=f"vcrash: {problem} log"))
    if len(ranked) > len(shown):
        lines.append(f"vcrash: {len(ranked) - len(shown)} more finding(s) not annotated "
                     "(GitHub shows at most 10 per step); see the job summary or the SARIF/JSON output.")
    if len(problems) > MAX_ANNOTATIONS - len(shown):
        lines.append(f"vcrash: {len(problems) - (MAX_ANNOTATIONS - len(shown))} more damaged or unreadable log(s) "
                     "not annotated; see the job summary or the SARIF/JSON output.")
    return lines


def append_step_summary(batch: Batch) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    from vcrash.report.markdown import markdown_document

    text = markdown_document(batch)
    data = text.encode("utf-8")
    if len(data) > MAX_SUMMARY_BYTES:
        text = data[:MAX_SUMMARY_BYTES].decode("utf-8", "ignore") + "\n\n… (truncated to fit the step summary)\n"
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError:
        pass  # the summary is a courtesy; the annotations already went out


def render_github_batch(batch: Batch, out: TextIO) -> None:
    for line in github_lines(batch):
        out.write(line + "\n")
    append_step_summary(batch)


def render_github(report: Report, out: TextIO, redactor: Redactor) -> None:
    render_github_batch(batch_from_report(report, redactor), out)

"""`vcrash explain`: a rule's runbook, with fixed headings (ruff-style rule docs)."""

from __future__ import annotations

from typing import TextIO

from vcrash.classify.rules import Rule, doc_versions


def runbook_markdown(rule: Rule) -> str:
    doc = rule.doc
    out = [f"# {rule.id}: {rule.title}", "",
           f"*{rule.kind} · severity {rule.severity} · confidence {rule.confidence}*", ""]
    if doc.get("summary"):
        out += ["## What happened", "", doc["summary"], ""]
    if doc.get("why"):
        out += ["## Why it happens", "", doc["why"], ""]
    if doc.get("resolution"):
        out += ["## How to fix it", ""] + [f"{i}. {s}" for i, s in enumerate(doc["resolution"], 1)] + [""]
    if doc.get("guard"):
        out += ["## Guard (until you can upgrade)", "", doc["guard"], ""]
    if doc.get("collect"):
        out += ["## What to collect when unsure", ""] + [f"- {s}" for s in doc["collect"]] + [""]
    versions = [f"- {label}: {text}" for label, text in doc_versions(doc)]
    if versions:
        out += ["## Versions", ""] + versions + [""]
    if rule.explains:
        out += ["## Symptoms it explains", ""] + [f"- `{s}`" for s in rule.explains] + [""]
    if rule.reproducer:
        out += ["## Reproduce", "", f"```\n{rule.reproducer}\n```", ""]
    if doc.get("references"):
        out += ["## References", ""] + [f"- {r}" for r in doc["references"]] + [""]
    return "\n".join(out).rstrip() + "\n"


def render_runbook(rule: Rule, fmt: str, out: TextIO) -> None:
    text = runbook_markdown(rule)
    if fmt == "markdown":
        out.write(text)
        return
    from rich.console import Console
    from rich.markdown import Markdown

    # no_color=None lets rich honour NO_COLOR on a terminal.
    console = Console(file=out, force_terminal=fmt == "rich", no_color=None if fmt == "rich" else True,
                      width=None if fmt == "rich" else 100)
    console.print(Markdown(text))

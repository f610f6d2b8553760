"""The small, picklable view of one or many analyzed logs that the CI formats render.

`vcrash analyze` builds one `Batch` from its report (`batch_from_report`), `vcrash scan` builds
one from the per-log results its workers send back (`log_result`): the sarif / junit / github /
gitlab / markdown renderers only ever see a `Batch`, so both commands print the same thing for
the same logs.

A `LogResult` is deliberately small — the findings of one log as compact dicts plus the redacted
text of the primary root traceback — so a scan over thousands of logs keeps only these rows, never
the reports. Every quoted piece of evidence is redacted when the result is built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator
from urllib.parse import quote

from vcrash import __version__
from vcrash.classify.diagnose import Diagnosis
from vcrash.classify.rules import Rule
from vcrash.redact import Redactor
from vcrash.report.model import InputSummary, Report, explaining_roots

SEVERITY_ORDER = {"error": 0, "warning": 1, "note": 2}
KIND_ORDER = {"root": 0, "context": 1, "symptom": 2}
# explained: no crash of its own, only symptoms that a root in another log of the same server
# run explains (the API server's log beside the engine core's).
STATUSES = ("crashed", "explained", "damaged", "healthy", "unreadable")
TOOL_URI = "https://github.com/vcrash/vcrash"


@dataclass
class LogResult:
    path: str
    size: int = 0
    lines: int = 0
    vllm_version: str | None = None
    status: str = "healthy"  # crashed | damaged | healthy | unreadable
    error: str | None = None
    warning: str | None = None  # set when the input is damaged (also when it crashed before the damage)
    findings: list[dict] = field(default_factory=list)  # ranked; findings[0] is the primary
    traceback: str | None = None  # redacted root traceback of the primary finding
    timeline: list[dict] = field(default_factory=list)  # only for analyze (scan keeps rows small)
    # Roots in other logs that explain this log's symptoms: {input, rule, line, symptoms: [{rule, line}]}
    explained_by: list[dict] = field(default_factory=list)
    # What ties this log's server runs to other logs' (scan links them after the workers return):
    # {"windows": {epoch: [start, end]}, "pids": [...], "ports": {epoch: [...]}, "findings": [[epoch, seconds]]}
    runs: dict | None = None

    @property
    def primary(self) -> dict | None:
        return self.findings[0] if self.findings else None

    def row(self) -> dict:
        """The flat scan-table row (csv / jsonl / table)."""
        p = self.primary or {}
        exc = p.get("exception")
        return {
            "path": self.path,
            "size": self.size,
            "lines": self.lines,
            "vllm_version": self.vllm_version,
            "status": self.status,
            "rule": p.get("rule"),
            "severity": p.get("severity"),
            "exception": (f"{exc['type']}: {exc['message']}" if exc and exc.get("message") else
                          (exc["type"] if exc else None)),
            "line": p.get("line"),
            "time": p.get("time"),
            "fingerprint": p.get("fingerprint"),
            "findings": len(self.findings),
            "error": self.error,
            "warning": self.warning,
            "explained_by": "; ".join(f"{e['input']}:{e['line']}" for e in self.explained_by) or None,
        }

    def explained_text(self) -> str:
        """"engine-dead explained by structured-output-no-valid-param at engine.log:37"."""
        return "; ".join(f"{', '.join(dict.fromkeys(s['rule'] for s in e['symptoms']))} explained by "
                         f"{e['rule']} at {e['input']}:{e['line']}" for e in self.explained_by)


@dataclass
class Batch:
    results: list[LogResult]
    rules: dict[str, Rule]  # every rule a finding (or an explained symptom) names
    rule_pack_version: str
    tool_version: str = __version__
    skipped: list[dict] = field(default_factory=list)  # entries walks and globs did not read

    def rule(self, rid: str) -> Rule | None:
        return self.rules.get(rid)


def finding_dict(d: Diagnosis, redactor: Redactor) -> dict:
    exc = d.exception
    return {
        "rank": d.rank,
        "rule": d.rule.id,
        "title": d.rule.title,
        "kind": d.rule.kind,
        "severity": d.rule.severity,
        "confidence": d.confidence,
        "line": d.line,
        "stream": d.stream_id,
        "role": d.role,
        "time": d.time,
        "exception": ({"type": exc.type, "message": _head(redactor.text(exc.message_head) or "")}
                      if exc is not None else None),
        "evidence": _head(redactor.text(d.evidence) or ""),
        "fingerprint": d.fingerprint,
        "occurrences": d.occurrences,
        "corrupted": d.corrupted,
        "explains": [{"rule": s.rule.id, "line": s.line, "stream": s.stream_id, "occurrences": s.occurrences,
                      "input": s.input, "evidence": _head(redactor.text(s.evidence) or "", 160)} for s in d.explains],
        "vllm_version": d.version,
        "version_advice": d.version_advice,
        "liveness": (d.liveness or {}).get("verdict"),
        "liveness_reason": (d.liveness or {}).get("reason"),
        "liveness_advice": (d.liveness or {}).get("advice"),
        "recommended_deadline_s": (d.liveness or {}).get("recommended_deadline_s"),
        "notes": list(d.notes),
    }


def _head(text: str, limit: int = 300) -> str:
    text = text.replace("\r", "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def log_status(findings: list[dict], error: str | None, damaged: bool = False, explained: bool = False) -> str:
    if error:
        return "unreadable"
    if any(f["kind"] == "root" or f["severity"] == "error" for f in findings):
        return "crashed"
    if explained:
        return "explained"
    # Never "healthy" about a log read only up to its damage.
    return "damaged" if damaged else "healthy"


def input_problems(batch: "Batch") -> Iterator[tuple[LogResult, str, str]]:
    """(log, "unreadable" | "damaged", message) for every log not read whole, in log order."""
    for r in batch.results:
        if r.status == "unreadable":
            yield r, "unreadable", r.error or "unreadable"
        elif r.warning:
            yield r, "damaged", r.warning


def problem_severities(results: list[LogResult]) -> list[str]:
    """A damaged log counts as a warning for --fail-on (unreadable ones exit 2 anyway)."""
    return ["warning" for r in results if r.warning and r.status != "unreadable"]


def result_for_input(summary: InputSummary, diagnoses: list[Diagnosis], redactor: Redactor,
                     timeline: list[dict] | None = None, explained_by: list[dict] | None = None) -> LogResult:
    from vcrash.report.terminal import traceback_text

    findings = [finding_dict(d, redactor) for d in diagnoses]
    for rank, f in enumerate(findings, 1):  # rank inside this log (the same from analyze and scan)
        f["rank"] = rank
    tb = None
    if diagnoses and diagnoses[0].traceback is not None:
        # traceback_text redacts messages, and secrets (not request text) in source lines.
        tb = traceback_text(diagnoses[0].traceback, redactor)
    return LogResult(path=summary.path, size=summary.bytes, lines=summary.lines, vllm_version=summary.vllm_version,
                     status=log_status(findings, summary.error, summary.damaged, bool(explained_by)),
                     error=summary.error, warning=summary.warning if summary.damaged else None,
                     findings=findings, traceback=tb, timeline=list(timeline or []),
                     explained_by=list(explained_by or []))


def rules_of(diagnoses: list[Diagnosis]) -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    for d in diagnoses:
        rules.setdefault(d.rule.id, d.rule)
        for s in d.explains:
            rules.setdefault(s.rule.id, s.rule)
    return rules


def batch_from_report(report: Report, redactor: Redactor) -> Batch:
    """One LogResult per input of an analyze report, in input order."""
    results = []
    for index, inp in enumerate(report.inputs):
        diags = [d for d in report.diagnoses if d.input_index == index]
        timeline = [redactor.event(dict(e)) for e in report.timeline if e.get("input") == inp.path]
        results.append(result_for_input(inp, diags, redactor, timeline, explaining_roots(report.diagnoses, index)))
    return Batch(results, rules_of(report.diagnoses), report.rule_pack_version)


def ranked_findings(batch: Batch) -> Iterator[tuple[LogResult, dict]]:
    """Findings across all logs, most important first: severity, root before symptom, then the
    log order and the rank inside the log (stable, so outputs are deterministic)."""
    items = [(r, f, i, j) for i, r in enumerate(batch.results) for j, f in enumerate(r.findings)]
    items.sort(key=lambda t: (SEVERITY_ORDER.get(t[1]["severity"], 9), KIND_ORDER.get(t[1]["kind"], 9), t[3], t[2]))
    for r, f, _i, _j in items:
        yield r, f


def all_findings(batch: Batch) -> Iterator[tuple[LogResult, dict]]:
    for r in batch.results:
        for f in r.findings:
            yield r, f


def relative_path(path: str) -> str:
    """The path as CI tools want it: relative to the working directory when inside it, with /."""
    if path.startswith("<"):  # <stdin>
        return path
    p = path
    if os.path.isabs(p):
        try:
            rel = os.path.relpath(p)
            if not rel.startswith(".."):
                p = rel
        except ValueError:
            pass
    p = os.path.normpath(p).replace(os.sep, "/")
    return p


def artifact_uri(path: str) -> str:
    p = relative_path(path)
    if os.path.isabs(p):
        return "file://" + quote(p)
    return quote(p)


def fail_exit_code(severities, fail_on: str) -> int:
    """0 when nothing is at or above --fail-on, else 1 (shared by analyze-style and scan gating)."""
    if fail_on == "never":
        return 0
    limit = SEVERITY_ORDER[fail_on]
    return 1 if any(SEVERITY_ORDER.get(s, 9) <= limit for s in severities) else 0


def finding_message(f: dict, rule: Rule | None) -> str:
    """One paragraph for a finding: the evidence, then what it means."""
    parts = [f["evidence"] or f["title"]]
    if rule is not None and rule.doc.get("summary"):
        parts.append(rule.doc["summary"])
    return "\n".join(parts)

"""GitLab Code Quality report (`artifacts:reports:codequality`): a JSON array of issues.

Severity: a root cause at error level is `critical` (`blocker` when its confidence is high: the
server died of a known cause), other error-level findings are `major`, warnings `minor`, notes
`info`. GitLab shows only the first issue per fingerprint, so the fingerprint hashes the diagnosis
fingerprint together with the location.
"""

from __future__ import annotations

import hashlib
import json
from typing import TextIO

from vcrash.redact import Redactor
from vcrash.report.findings import (Batch, all_findings, batch_from_report, finding_message, input_problems,
                                    relative_path)
from vcrash.report.model import Report


def gitlab_severity(f: dict) -> str:
    if f["severity"] == "error":
        if f["kind"] == "root":
            return "blocker" if f["confidence"] == "high" else "critical"
        return "major"
    return {"warning": "minor", "note": "info"}.get(f["severity"], "info")


def gitlab_issues(batch: Batch) -> list[dict]:
    issues = []
    for res, f in all_findings(batch):
        path = relative_path(res.path)
        line = max(1, int(f["line"] or 1))
        fp = hashlib.sha256(f"{f['fingerprint']}|{path}|{line}".encode("utf-8", "replace")).hexdigest()[:32]
        issues.append({
            "type": "issue",
            "check_name": f["rule"],
            "description": f"{f['title']}: {f['evidence']}",
            "content": {"body": finding_message(f, batch.rule(f["rule"]))},
            "categories": ["Bug Risk"],
            "fingerprint": fp,
            "severity": gitlab_severity(f),
            "location": {"path": path, "lines": {"begin": line}},
        })
    for res, problem, message in input_problems(batch):  # a log not read whole is never silent
        path = relative_path(res.path)
        issues.append({
            "type": "issue",
            "check_name": f"vcrash-{problem}-input",
            "description": message,
            "content": {"body": f"vcrash could not read all of {path}: {message}"},
            "categories": ["Bug Risk"],
            "fingerprint": hashlib.sha256(f"{problem}|{path}".encode("utf-8", "replace")).hexdigest()[:32],
            "severity": "major" if problem == "unreadable" else "minor",
            "location": {"path": path, "lines": {"begin": 1}},
        })
    return issues


def render_gitlab_batch(batch: Batch, out: TextIO) -> None:
    json.dump(gitlab_issues(batch), out, indent=2, ensure_ascii=False)
    out.write("\n")


def render_gitlab(report: Report, out: TextIO, redactor: Redactor) -> None:
    render_gitlab_batch(batch_from_report(report, redactor), out)

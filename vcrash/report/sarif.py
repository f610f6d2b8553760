"""SARIF 2.1.0 (GitHub code scanning and other SARIF viewers).

One run, tool `vcrash`; `tool.driver.rules` carries each rule's metadata and its runbook as
`help.markdown`; each finding is a result pointing at the log file (relative uri) and the root
line, with the diagnosis fingerprint as `partialFingerprints["vcrash/v1"]` so alerts stay stable
across runs. Explained symptoms are `relatedLocations`.
"""

from __future__ import annotations

import json
from typing import TextIO

from vcrash.redact import Redactor
from vcrash.report.findings import TOOL_URI, Batch, all_findings, artifact_uri, batch_from_report, input_problems
from vcrash.report.model import Report
from vcrash.runbook import runbook_markdown

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "note": "note"}


def _rule_descriptor(rule) -> dict:
    doc = rule.doc
    desc = {
        "id": rule.id,
        "name": "".join(part.capitalize() for part in rule.id.split("-")),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": doc.get("summary") or rule.title},
        "help": {"text": _help_text(rule), "markdown": runbook_markdown(rule)},
        "defaultConfiguration": {"level": LEVEL.get(rule.severity, "warning")},
        "properties": {"tags": ["vllm", "crash", rule.kind], "kind": rule.kind, "confidence": rule.confidence,
                       "precision": {"high": "high", "medium": "medium", "low": "low"}.get(rule.confidence, "medium"),
                       "problem.severity": {"error": "error", "warning": "warning", "note": "recommendation"}
                       .get(rule.severity, "warning")},
    }
    refs = [r for r in doc.get("references", []) if r.startswith("http")]
    if refs:
        desc["helpUri"] = refs[0]
    return desc


def _help_text(rule) -> str:
    doc = rule.doc
    lines = [doc.get("summary", "")]
    for i, step in enumerate(doc.get("resolution", []), 1):
        lines.append(f"{i}. {step}")
    return "\n".join(x for x in lines if x) or rule.title


def sarif_document(batch: Batch) -> dict:
    rule_ids = sorted({f["rule"] for _r, f in all_findings(batch)}
                      | {s["rule"] for _r, f in all_findings(batch) for s in f["explains"]})
    rules = [batch.rule(rid) for rid in rule_ids if batch.rule(rid) is not None]
    index = {rule.id: i for i, rule in enumerate(rules)}
    results = []
    artifacts: dict[str, int] = {}
    for res, f in all_findings(batch):
        uri = artifact_uri(res.path)
        art_index = artifacts.setdefault(uri, len(artifacts))
        location = {"physicalLocation": {"artifactLocation": {"uri": uri, "index": art_index},
                                         "region": {"startLine": max(1, int(f["line"] or 1))}}}
        message = f["evidence"] or f["title"]
        result = {
            "ruleId": f["rule"],
            "level": LEVEL.get(f["severity"], "warning"),
            "message": {"text": f"{f['title']}: {message}"},
            "locations": [location],
            "partialFingerprints": {"vcrash/v1": f["fingerprint"]},
            "properties": {"rank": f["rank"], "kind": f["kind"], "confidence": f["confidence"],
                           "stream": f["stream"], "occurrences": f["occurrences"]},
        }
        if f["rule"] in index:
            result["ruleIndex"] = index[f["rule"]]
        if f.get("vllm_version"):
            result["properties"]["vllm_version"] = f["vllm_version"]
        if f.get("version_advice"):
            result["properties"]["version_advice"] = f["version_advice"]
        related = []
        for i, s in enumerate(f["explains"], 1):
            # A symptom attached from another input's log points into that log.
            s_uri = artifact_uri(s["input"]) if s.get("input") and s["input"] != res.path else uri
            s_index = artifacts.setdefault(s_uri, len(artifacts))
            related.append({"id": i, "message": {"text": f"explains {s['rule']}: {s['evidence']}"},
                            "physicalLocation": {"artifactLocation": {"uri": s_uri, "index": s_index},
                                                 "region": {"startLine": max(1, int(s["line"] or 1))}}})
        if related:
            result["relatedLocations"] = related
        results.append(result)
    notifications = []
    for res, problem, message in input_problems(batch):
        uri = artifact_uri(res.path)
        art_index = artifacts.setdefault(uri, len(artifacts))
        notifications.append({
            "level": "error" if problem == "unreadable" else "warning",
            "message": {"text": message},
            "descriptor": {"id": f"vcrash/{problem}-input"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri, "index": art_index}}}],
        })
    run = {
        "tool": {"driver": {"name": "vcrash", "version": batch.tool_version, "informationUri": TOOL_URI,
                            "rules": [_rule_descriptor(r) for r in rules],
                            "properties": {"rule_pack_version": batch.rule_pack_version}}},
        "artifacts": [{"location": {"uri": uri}} for uri in artifacts],
        "results": results,
        # A log not read whole is said here, so a viewer never shows "no alerts" for it.
        "invocations": [{"executionSuccessful": not any(n["level"] == "error" for n in notifications),
                         "toolExecutionNotifications": notifications}],
        "columnKind": "unicodeCodePoints",
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render_sarif_batch(batch: Batch, out: TextIO) -> None:
    json.dump(sarif_document(batch), out, indent=2, ensure_ascii=False)
    out.write("\n")


def render_sarif(report: Report, out: TextIO, redactor: Redactor) -> None:
    render_sarif_batch(batch_from_report(report, redactor), out)

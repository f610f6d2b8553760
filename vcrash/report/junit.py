"""JUnit XML (GitLab `artifacts:reports:junit`, Jenkins `junit` step): one testcase per log.

A crashed log is a testcase with a `<failure>` (type = the primary rule, message = its evidence,
text = every finding, the root traceback and the fix); an unreadable or damaged log (a truncated
.gz, a cut zstd frame) has an `<error>`;
a healthy log passes (findings below the crash level are listed in its `<system-out>`).
Written with the standard library's ElementTree, so the output is always well-formed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import TextIO

from vcrash.redact import Redactor
from vcrash.report.findings import Batch, LogResult, batch_from_report, relative_path
from vcrash.report.model import Report

# Characters XML 1.0 cannot carry at all (logs can contain them: raw control bytes).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str | None) -> str:
    return _XML_INVALID.sub("\ufffd", text or "")


def _classname(path: str) -> str:
    rel = relative_path(path)
    folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
    return "vcrash." + (folder.replace("/", ".").replace(" ", "_").strip(".") or "logs")


def failure_text(res: LogResult, batch: Batch) -> str:
    out: list[str] = []
    for f in res.findings:
        where = f"{relative_path(res.path)}:{f['line']}"
        out.append(f"[{f['severity']}] {f['rule']} ({f['kind']}) at {where}: {f['evidence']}")
        for s in f["explains"]:
            where = f"{s['input']}:{s['line']}" if s.get("input") and s["input"] != res.path else f"line {s['line']}"
            out.append(f"    explains {s['rule']} at {where}: {s['evidence']}")
    primary = res.primary
    if res.traceback:
        out += ["", res.traceback]
    rule = batch.rule(primary["rule"]) if primary else None
    if rule is not None:
        if rule.doc.get("summary"):
            out += ["", rule.doc["summary"]]
        steps = rule.doc.get("resolution") or []
        if steps:
            out += ["", "Fix:"] + [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
    if primary and primary.get("version_advice"):
        out += ["", f"Version: {primary['version_advice']}"]
    if primary:
        out += ["", f"Runbook: vcrash explain {primary['rule']}"]
    return "\n".join(out)


def junit_tree(batch: Batch) -> ET.Element:
    root = ET.Element("testsuites", name="vcrash")
    suite = ET.SubElement(root, "testsuite", name="vcrash")
    failures = errors = 0
    for res in batch.results:
        name = _clean(relative_path(res.path))
        case = ET.SubElement(suite, "testcase", classname=_clean(_classname(res.path)), name=name, file=name,
                             time="0")
        if res.status == "unreadable":
            errors += 1
            ET.SubElement(case, "error", message=_clean(res.error), type="unreadable")
        elif res.status == "damaged":
            errors += 1
            ET.SubElement(case, "error", message=_clean(res.warning), type="damaged")
            if res.findings:
                out = ET.SubElement(case, "system-out")
                out.text = _clean(failure_text(res, batch))
        elif res.status == "crashed":
            failures += 1
            p = res.primary or {}
            fail = ET.SubElement(case, "failure", message=_clean(f"{p.get('rule')}: {p.get('evidence')}"),
                                 type=_clean(p.get("rule")))
            fail.text = _clean(failure_text(res, batch))
            if res.warning:  # crashed before the damage: the rest of the log is unknown
                ET.SubElement(case, "system-err").text = _clean(f"damaged: {res.warning}")
        elif res.findings or res.explained_by:
            # An explained log passes: its failure is the root's, reported in that log's testcase.
            out = ET.SubElement(case, "system-out")
            out.text = _clean("\n".join(filter(None, [res.explained_text(),
                                                      failure_text(res, batch) if res.findings else ""])))
    suite.set("tests", str(len(batch.results)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    suite.set("time", "0")
    for key in ("tests", "failures", "errors"):
        root.set(key, suite.get(key))
    root.set("time", "0")
    return root


def render_junit_batch(batch: Batch, out: TextIO) -> None:
    tree = junit_tree(batch)
    ET.indent(tree, space="  ")
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(tree, encoding="unicode"))
    out.write("\n")


def render_junit(report: Report, out: TextIO, redactor: Redactor) -> None:
    render_junit_batch(batch_from_report(report, redactor), out)

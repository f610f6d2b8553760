"""The report object: the single thing every renderer sees, and its JSON form
(schema `vcrash/report@1`; fields may be added, never renamed or removed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vcrash import __version__
from vcrash.classify.diagnose import Diagnosis
from vcrash.rebuild.model import Traceback
from vcrash.redact import Redactor
from vcrash.split import Stream

if TYPE_CHECKING:
    from vcrash.split.retired import StreamsView

SCHEMA = "vcrash/report@1"


@dataclass
class InputSummary:
    path: str
    lines: int = 0
    bytes: int = 0
    vllm_version: str | None = None
    vllm_versions: list[str] = field(default_factory=list)
    compression: str | None = None
    examined_lines: int = 0
    error: str | None = None  # unreadable input (the rest of the run goes on)
    warning: str | None = None  # e.g. truncated compressed stream
    damaged: bool = False  # the input ended early: read up to the damage, the rest is unknown

    def to_dict(self) -> dict:
        d = {"path": self.path, "lines": self.lines, "bytes": self.bytes, "vllm_version": self.vllm_version}
        if len(self.vllm_versions) > 1:  # upgraded between restarts
            d["vllm_versions"] = self.vllm_versions
        if self.compression:
            d["compression"] = self.compression
        if self.error:
            d["error"] = self.error
        if self.warning:
            d["warning"] = self.warning
        if self.damaged:
            d["damaged"] = True
        d["examined_lines"] = self.examined_lines
        return d


@dataclass
class Report:
    inputs: list[InputSummary]
    streams: "list[Stream] | StreamsView"  # a view reads retired processes back from the spool
    tracebacks: list[Traceback]
    diagnoses: list[Diagnosis]
    rule_pack_version: str
    accounting: dict
    warnings: list[str] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # entries walks and globs did not read, with why

    @property
    def primary(self) -> Diagnosis | None:
        return self.diagnoses[0] if self.diagnoses else None

    def to_dict(self, redactor: Redactor | None = None, lazy: bool = False) -> dict:
        """The JSON contract. `lazy`: streams and tracebacks as iterators, so that a writer can
        emit a 100 K-traceback report without holding every dict at once."""
        r = redactor or Redactor(enabled=False)
        streams = ({"id": s.id, "name": s.name, "pid": s.pid, "role": s.role, "lines": s.lines}
                   | ({"ip": s.ip} if s.ip else {}) for s in self.streams)
        redact = r if r.enabled else None
        dicts = getattr(self.tracebacks, "dicts", None)  # a view over stores writes from the records
        tracebacks = dicts(redact) if dicts is not None else (tb.to_dict(redact) for tb in self.tracebacks)
        return {
            "schema": SCHEMA,
            "vcrash_version": __version__,
            "rule_pack_version": self.rule_pack_version,
            "inputs": [i.to_dict() | ({"explained_by": by} if (by := explaining_roots(self.diagnoses, index)) else {})
                       for index, i in enumerate(self.inputs)],
            "streams": streams if lazy else list(streams),
            "tracebacks": tracebacks if lazy else list(tracebacks),
            "diagnoses": [diagnosis_dict(d, r) for d in self.diagnoses],
            "timeline": [r.event(e) for e in self.timeline],
            "accounting": self.accounting,
            "warnings": self.warnings,
            "skipped": self.skipped,
        }


def explaining_roots(diagnoses: list[Diagnosis], index: int) -> list[dict]:
    """The roots in other inputs that explain symptoms of input `index` (the API server's
    EngineDeadError in api.log under the engine core's root in engine.log): that input did not
    fail on its own."""
    out = []
    for d in diagnoses:
        symptoms = [s for s in d.explains if s.input_index == index]
        if symptoms and d.input_index != index:
            out.append({"input": d.input, "rule": d.rule.id, "line": d.line,
                        "symptoms": [{"rule": s.rule.id, "line": s.line} for s in symptoms]})
    return out


def diagnosis_dict(d: Diagnosis, r: Redactor) -> dict:
    doc = d.rule.doc
    out = {
        "rank": d.rank,
        "rule": d.rule.id,
        "title": d.rule.title,
        "kind": d.rule.kind,
        "severity": d.rule.severity,
        "confidence": d.confidence,
        "input": d.input,
        "stream": d.stream_id,
        "role": d.role,
        "line": d.line,
        "time": d.time,
        "traceback": d.traceback.id if d.traceback else None,
        "exception": ({"type": d.exception.type, "message": r.text(d.exception.message)}
                      if d.exception else None),
        "evidence": r.text(d.evidence),
        "corrupted": d.corrupted,
        "occurrences": d.occurrences,
        "explains": [{"rule": s.rule.id, "line": s.line, "traceback": s.traceback.id if s.traceback else None,
                      "stream": s.stream_id, "occurrences": s.occurrences, "input": s.input} for s in d.explains],
        "summary": doc.get("summary", ""),
        "resolution": list(doc.get("resolution", [])),
        "references": list(doc.get("references", [])),
        "affected_versions": doc.get("affected_versions", ""),
        "fixed_in": doc.get("fixed_in", ""),
        "fixes": [{"version": f.version, "case": f.case, "since": f.since} for f in d.rule.fixes],
        "vllm_version": d.version,
        "version_advice": d.version_advice,
        "reproducer": d.rule.reproducer,
        "fingerprint": d.fingerprint,
        "liveness": d.liveness and r.liveness(d.liveness),
        "notes": d.notes,
    }
    return out

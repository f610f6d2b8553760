"""Verdicts, re-diagnosis through `vcrash analyze`, and sample files made from captured logs."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERDICTS = ("reproduced", "fix-confirmed", "not-affected", "failed")
VERDICT_SCHEMA = "vcrash/repro-verdict@1"


@dataclass
class Step:
    name: str
    outcome: str            # short word: ok, 400, 500, died, alive, timeout, error, skipped...
    detail: str = ""
    http_status: int | None = None
    body_excerpt: str | None = None
    health_after: int | None = None
    engine_alive_after: bool | None = None
    seconds: float | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v is not None and v != "" and v != {}}
        d["name"], d["outcome"] = self.name, self.outcome
        return d


@dataclass
class Verdict:
    rule: str
    scenario: str
    vllm_version: str | None
    device: str
    verdict: str
    details: str
    rediagnosed_as: str | None = None
    duration_s: float = 0.0
    steps: list[Step] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    affected: bool | None = None
    rediagnosis: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        assert self.verdict in VERDICTS, self.verdict
        return {
            "schema": VERDICT_SCHEMA,
            "rule": self.rule,
            "scenario": self.scenario,
            "vllm_version": self.vllm_version,
            "device": self.device,
            "verdict": self.verdict,
            "details": self.details,
            "rediagnosed_as": self.rediagnosed_as,
            "duration_s": round(self.duration_s, 1),
            "affected": self.affected,
            "steps": [s.to_dict() for s in self.steps],
            "logs": self.logs,
            "rediagnosis": self.rediagnosis,
            "timings": {k: round(v, 1) for k, v in self.timings.items()},
        }

    def write(self, out: Path) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        p = out / "verdict.json"
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return p


def rediagnose(log: Path, timeout: float = 180) -> dict:
    """Run `python -m vcrash analyze LOG --format json` and read diagnoses[].rule.

    Returns {"ran": bool, "rule": first rule or None, "rules": [...], "error": str|None}.
    """
    try:
        r = subprocess.run([sys.executable, "-m", "vcrash", "analyze", str(log), "--format", "json"],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ran": False, "rule": None, "rules": [], "error": f"analyze timed out after {timeout}s"}
    except OSError as e:
        return {"ran": False, "rule": None, "rules": [], "error": str(e)}
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        msg = (r.stderr.strip().splitlines() or r.stdout.strip().splitlines() or ["no output"])[-1]
        return {"ran": False, "rule": None, "rules": [],
                "error": f"analyzer not usable (exit {r.returncode}): {msg[:200]}"}
    if not isinstance(doc, dict) or not isinstance(doc.get("diagnoses"), list):
        return {"ran": False, "rule": None, "rules": [], "error": "analyzer output is not vcrash/report@1"}
    rules = [d.get("rule") for d in doc["diagnoses"] if isinstance(d, dict)]
    first = doc["diagnoses"][0] if doc["diagnoses"] else None
    return {"ran": True, "rule": rules[0] if rules else None, "rules": rules,
            "line": first.get("line") if isinstance(first, dict) else None, "error": None,
            "schema": doc.get("schema")}


def make_sample(log: Path, dest: Path, expect: str, origin: str, root_regex: str | None = None,
                max_bytes: int = 300_000) -> bool:
    """Write `dest` = header + log, marking the first line matching `root_regex` with #=ROOT=#.

    Returns False (and writes nothing) when a root pattern is given but not found.
    """
    # split on "\n" only: tqdm-style "\r" redraws stay inside their line, as in the raw log
    text = log.read_bytes().decode("utf-8", "replace")
    lines = [ln + "\n" for ln in text.split("\n")]
    if text.endswith("\n") or not text:
        lines.pop()
    else:
        lines[-1] = lines[-1][:-1]
    marked = root_regex is None
    if root_regex is not None:
        rx = re.compile(root_regex)
        for i, ln in enumerate(lines):
            if rx.search(ln):
                lines[i] = "#=ROOT=# " + ln
                marked = True
                break
    if not marked:
        return False
    body = "".join(lines)
    note = ""
    if len(body.encode()) > max_bytes:
        body, note = _trim_middle(lines, max_bytes)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(f"#=EXPECT=# {expect}\n#=ORIGIN=# {origin}{note}\n" + body)
    return True


def _trim_middle(lines: list[str], max_bytes: int) -> tuple[str, str]:
    """Drop routine lines (uvicorn access, stats) from the middle, keeping head, tail and markers."""
    keep_rx = re.compile(r"#=ROOT=#|Traceback|Error|ERROR|WARNING|Exception|raise |File \"")
    routine = re.compile(r'"(GET|POST) /|Avg prompt throughput|Engine 000:')
    out = [ln for ln in lines if keep_rx.search(ln) or not routine.search(ln)]
    dropped = len(lines) - len(out)
    return "".join(out), f" (trimmed: {dropped} routine access/stats lines removed)"


def now_stamp() -> str:
    return time.strftime("%Y-%m-%d")

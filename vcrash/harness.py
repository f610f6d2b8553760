"""The sample harness behind `vcrash rules test`: every sample runs against the whole pack.

A sample is a log with a header the harness strips (`#=EXPECT=#`, `#=EXPECT-NOT=#`,
`#=ORIGIN=#`) and one body line prefixed `#=ROOT=# ` where the primary diagnosis must point.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from vcrash.analyze import InputAnalysis, Options, build_report
from vcrash.classify.match import Matcher
from vcrash.classify.rules import RulePack
from vcrash.errors import did_you_mean
from vcrash.read import RawLine
from vcrash.report.model import InputSummary, Report
from vcrash.split.reflow import NEWEST_FIRST_NOTE, unwrap_hard_wraps

EXPECT = "#=EXPECT=# "
EXPECT_NOT = "#=EXPECT-NOT=# "
ORIGIN = "#=ORIGIN=# "
ROOT = "#=ROOT=# "
LIVENESS = "#=LIVENESS=# "  # optional: the expected slow/hung verdict of the primary diagnosis


@dataclass
class Sample:
    path: Path
    expect: list[str]
    expect_not: list[str]
    origin: str
    body: list[str]
    root_line: int | None
    liveness: str | None = None
    header_lines: list[str] = field(default_factory=list)


@dataclass
class SampleResult:
    sample: Sample
    got: list[str]
    got_root_line: int | None
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def default_samples_dir() -> Path | None:
    here = Path(__file__).resolve().parents[1] / "samples"
    if here.is_dir():
        return here
    cwd = Path.cwd() / "samples"
    return cwd if cwd.is_dir() else None


def discover(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*.log") if p.is_file())


def parse_sample(path: Path) -> Sample:
    text = path.read_bytes().decode("utf-8", "replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    expect: list[str] = []
    expect_not: list[str] = []
    origin = ""
    liveness = None
    header: list[str] = []
    i = 0
    while i < len(lines) and lines[i].startswith("#=") and not lines[i].startswith(ROOT):
        line = lines[i].rstrip("\r")
        header.append(line)
        if line.startswith(EXPECT):
            expect.append(line[len(EXPECT):].split()[0] if line[len(EXPECT):].split() else "")
        elif line.startswith(EXPECT_NOT):
            expect_not.extend(line[len(EXPECT_NOT):].split())
        elif line.startswith(ORIGIN):
            origin = line[len(ORIGIN):].strip()
        elif line.startswith(LIVENESS):
            liveness = line[len(LIVENESS):].strip()
        i += 1
    body: list[str] = []
    root_line = None
    for line in lines[i:]:
        if line.startswith(ROOT):
            line = line[len(ROOT):]
            root_line = len(body) + 1
        body.append(line)
    if expect == ["none"]:
        expect = []
    return Sample(path, expect, expect_not, origin, body, root_line, liveness, header)


def analyze_lines(name: str, lines: list[str], pack: RulePack, matcher: Matcher | None = None) -> Report:
    matcher = matcher or Matcher(pack)
    state = InputAnalysis(0, name, matcher)
    raws, offset = [], 0
    for lineno, text in enumerate(lines, 1):
        raws.append(RawLine(lineno, offset, text))
        offset += len(text.encode("utf-8", "replace")) + 1
    mended: list[str] = []
    for raw in unwrap_hard_wraps(raws, mended):
        state.feed(raw.lineno, raw.offset, raw.text)
    state.finish(len(lines))
    summary = InputSummary(name, lines=len(lines), bytes=offset, examined_lines=len(lines))
    if mended:
        summary.warning = f"{name}: {'; '.join(mended)}"
    summary.vllm_versions = state.observer.versions
    summary.vllm_version = state.observer.versions[0] if state.observer.versions else None
    return build_report([state], [summary], matcher, pack, Options())


def run_sample(sample: Sample, pack: RulePack, matcher: Matcher | None = None) -> SampleResult:
    report = analyze_lines(str(sample.path), sample.body, pack, matcher)
    got = [d.rule.id for d in report.diagnoses]
    every = set(got) | {s.rule.id for d in report.diagnoses for s in d.explains}
    problems = []
    if not sample.header_lines or not any(h.startswith(EXPECT) for h in sample.header_lines):
        problems.append("no #=EXPECT=# header")
    if got != sample.expect:
        problems.append(f"expected {sample.expect or ['none']}, got {got or ['none']}")
    ids = [r.id for r in pack.rules]
    for rid in [*sample.expect, *sample.expect_not]:
        if pack.get(rid) is None and rid != "interrupted-shutdown":
            problems.append(f"names unknown rule {rid!r}{did_you_mean(rid, ids)}")
    for rid in sample.expect_not:
        if rid in every:
            problems.append(f"{rid} must not be diagnosed")
    got_root = report.diagnoses[0].line if report.diagnoses else None
    if got_root is not None and any(NEWEST_FIRST_NOTE in w for w in report.warnings):
        got_root = len(sample.body) + 1 - got_root  # read bottom-up: lines were counted from the end
    if sample.root_line is not None and got and got_root != sample.root_line:
        problems.append(f"primary diagnosis points at line {got_root}, #=ROOT=# marks line {sample.root_line}")
    if sample.liveness is not None:
        got_live = (report.diagnoses[0].liveness or {}).get("verdict") if report.diagnoses else None
        if got_live != sample.liveness:
            problems.append(f"liveness expected {sample.liveness}, got {got_live}")
    if sample.expect and sample.root_line is None:
        problems.append("no #=ROOT=# marker")
    if not report.accounting.get("balanced", True):
        problems.append(f"traceback accounting does not add up: {report.accounting}")
    return SampleResult(sample, got, got_root, problems)


def bless(result: SampleResult) -> None:
    """Rewrite a sample's markers from the current result, so a change shows up as a diff."""
    s = result.sample
    out = io.StringIO()
    for rid in result.got or ["none"]:
        out.write(f"{EXPECT}{rid}\n")
    for rid in s.expect_not:
        if rid not in result.got:
            out.write(f"{EXPECT_NOT}{rid}\n")
    out.write(f"{ORIGIN}{s.origin}\n")
    if s.liveness is not None:
        out.write(f"{LIVENESS}{s.liveness}\n")
    for lineno, line in enumerate(s.body, 1):
        if result.got and lineno == result.got_root_line:
            out.write(ROOT)
        out.write(line + "\n")
    s.path.write_text(out.getvalue(), encoding="utf-8")

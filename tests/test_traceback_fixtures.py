"""Golden tracebacks from the real interpreters (3.8-3.13), rebuilt exactly.

The fixtures under tests/fixtures/tracebacks/py<ver>/ come from tests/fixtures/make_tracebacks.py:
`<case>.stderr` is what that interpreter printed, `<case>.json` the ground truth read from the live
exception object by a `sys.excepthook` wrapper. Each fixture is rebuilt three ways: raw, with every
line carrying vLLM's log header (the logger.exception copy), and interleaved line by line with another
fixture as two processes, one headed and one raw with a different tag.
"""

from __future__ import annotations

import json
from itertools import zip_longest
from pathlib import Path

import pytest

from vcrash.classify.rules import load_pack
from vcrash.harness import analyze_lines

ROOT = Path(__file__).resolve().parent / "fixtures" / "tracebacks"
PACK = load_pack()

ENGINE_TAG = "(EngineCore_DP0 pid=7) "
ENGINE_HEADER = "ERROR 08-05 01:53:58 [core.py:710] "
API_TAG = "(APIServer pid=1) "

# (python "3.x", case) -> reason. Filled only with cases where the ground truth was double-checked
# and vcrash is wrong; each is strict, so a parser fix turns it into a failure to remove.
KNOWN_BAD: dict[tuple[str, str], str] = {}
# Variant-specific failures: (python, case, variant) -> reason.
KNOWN_BAD_VARIANT: dict[tuple[str, str, str], str] = {}


def _fixtures():
    out = []
    for truth_path in sorted(ROOT.glob("py*/*.json")):
        ver = truth_path.parent.name[2:]
        case = truth_path.stem
        out.append((ver, case, truth_path, truth_path.with_suffix(".stderr")))
    return out


FIXTURES = _fixtures()
BY_VERSION: dict[str, list[str]] = {}
for _v, _c, _, _ in FIXTURES:
    BY_VERSION.setdefault(_v, []).append(_c)


def _load(ver, case):
    truth = json.loads((ROOT / f"py{ver}" / f"{case}.json").read_text())
    lines = (ROOT / f"py{ver}" / f"{case}.stderr").read_text().splitlines()
    return truth, lines


def _params(variant):
    params = []
    for ver, case, _, _ in FIXTURES:
        marks = []
        reason = KNOWN_BAD.get((ver, case)) or KNOWN_BAD_VARIANT.get((ver, case, variant))
        if reason:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        params.append(pytest.param(ver, case, marks=marks, id=f"py{ver}-{case}"))
    return params


def _frame(f):
    return {"file": f["file"], "line": f["line"], "function": f["function"]}


def _got_exception(e):
    frames = [{"file": f.file, "line": f.line, "function": f.function} for f in e.frames]
    return {"type": e.type, "message": e.message, "relation": e.relation, "group_path": e.group_path,
            "frames": frames, "repeated": e.repeated_frames}


def assert_rebuilt_exactly(tb, truth, where):
    want = truth["exceptions"]
    got = [_got_exception(e) for e in tb.exceptions]
    assert not tb.corrupted, f"{where}: corrupted ({tb.corrupted_reason})"
    assert len(got) == len(want), (
        f"{where}: {len(got)} exceptions rebuilt, {len(want)} in the ground truth\n"
        f"got  {[(g['type'], g['relation']) for g in got]}\nwant {[(w['type'], w['relation']) for w in want]}")
    for i, (g, w) in enumerate(zip(got, want)):
        at = f"{where} exception #{i} ({w['type']})"
        assert g["type"] == w["type"], at
        assert g["message"] == w["message"], at
        assert g["relation"] == w["relation"], at
        assert g["group_path"] == w.get("group_path"), at
        if w["frames"] is None:  # RecursionError: count plus both ends; repeats are elided by the printer
            assert len(g["frames"]) + g["repeated"] == w["frame_count"], at
            assert g["frames"][0] == _frame(w["first_frame"]), at
            assert g["frames"][-1] == _frame(w["last_frame"]), at
        else:
            assert g["repeated"] == 0, at
            assert g["frames"] == [_frame(f) for f in w["frames"]], at


def _rebuild(lines):
    return analyze_lines("fixture.log", lines, PACK).tracebacks


def test_fixtures_present():
    versions = sorted(BY_VERSION, key=lambda v: tuple(map(int, v.split("."))))
    assert versions and versions[0] == "3.8", versions
    assert len(FIXTURES) >= 60, len(FIXTURES)
    for ver, case, truth_path, stderr_path in FIXTURES:
        assert stderr_path.exists(), stderr_path
        truth = json.loads(truth_path.read_text())
        assert truth["python"].startswith(ver + "."), truth_path
        assert truth["exceptions"], truth_path


@pytest.mark.parametrize("ver,case", _params("raw"))
def test_raw(ver, case):
    truth, lines = _load(ver, case)
    tbs = _rebuild(lines)
    assert len(tbs) == 1, [t.kind for t in tbs]
    assert not tbs[0].headed
    assert_rebuilt_exactly(tbs[0], truth, f"py{ver}/{case} raw")


@pytest.mark.parametrize("ver,case", _params("headed"))
def test_headed(ver, case):
    truth, lines = _load(ver, case)
    tbs = _rebuild([ENGINE_TAG + ENGINE_HEADER + line for line in lines])
    assert len(tbs) == 1, [t.kind for t in tbs]
    assert tbs[0].headed
    assert "EngineCore_DP0" in tbs[0].stream_id
    assert_rebuilt_exactly(tbs[0], truth, f"py{ver}/{case} headed")


def _partner(ver, case):
    cases = BY_VERSION[ver]
    return cases[(cases.index(case) + 1) % len(cases)]


@pytest.mark.parametrize("ver,case", _params("interleaved"))
def test_interleaved_two_processes(ver, case):
    """`case` printed by the engine through the logger (headed), its partner raw by the API server."""
    other = _partner(ver, case)
    truth_a, lines_a = _load(ver, case)
    truth_b, lines_b = _load(ver, other)
    mixed = []
    for a, b in zip_longest(lines_a, lines_b):
        if a is not None:
            mixed.append(ENGINE_TAG + ENGINE_HEADER + a)
        if b is not None:
            mixed.append(API_TAG + b)
    tbs = _rebuild(mixed)
    engine = [t for t in tbs if "EngineCore_DP0" in t.stream_id]
    api = [t for t in tbs if "APIServer" in t.stream_id]
    assert len(engine) == 1 and len(api) == 1, [(t.stream_id, t.kind) for t in tbs]
    assert len(tbs) == 2
    assert engine[0].headed and not api[0].headed
    assert_rebuilt_exactly(engine[0], truth_a, f"py{ver}/{case} interleaved (engine, headed)")
    assert_rebuilt_exactly(api[0], truth_b, f"py{ver}/{other} interleaved (api server, raw)")

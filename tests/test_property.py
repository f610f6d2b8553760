"""Property-based tests of the parser (split -> rebuild -> classify) on generated and mutated logs.

- The parser never raises, whatever the lines.
- Tracebacks planted in noise, interleaved across streams with different prefixes (raw, process
  tags, the vLLM log header on every line, torch rank prefixes), are all found: their exception
  type and message appear in report.tracebacks.
- Nothing is lost: every `Traceback (most recent call last):` header of the input lies inside a
  region the rebuilder emitted (rebuilt, duplicate or corrupted), the `accounting` section adds
  up (`balanced`), and `traceback_headers` equals the number of headers planted. The same holds
  on every sample under samples/ (discovered at test time).
"""

from __future__ import annotations

import os
import random
import re
import traceback as pytraceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from vcrash.analyze import InputAnalysis, Options, build_report
from vcrash.classify.match import Matcher
from vcrash.classify.rules import load_pack
from vcrash.harness import analyze_lines, discover, parse_sample
from vcrash.rebuild.grammar import EMBEDDED_HEAD_ENDS
from vcrash.split.wrappers import rich_traceback, strip_ansi
from vcrash.report.model import InputSummary

TB_HEAD_TEXT = "Traceback (most recent call last):"
# Generated logs are large, so shrinking a failure can take many minutes: the suite does not
# shrink (it reports the failing log as generated); bench/fuzz.py runs longer and shrinks.
MAX_EXAMPLES = int(os.environ.get("VCRASH_PROPERTY_EXAMPLES", "100"))
PHASES = tuple(Phase) if os.environ.get("VCRASH_PROPERTY_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate)
SETTINGS = settings(deadline=None, max_examples=MAX_EXAMPLES, phases=PHASES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PACK = load_pack()
MATCHER = Matcher(PACK)


def analyze_with_regions(name: str, lines: list[str]):
    """analyze_lines, plus the (first, last) raw line of every region the rebuilder emitted."""
    state = InputAnalysis(0, name, MATCHER)
    spans: list[tuple[int, int]] = []
    emit = state.rebuilder._emit

    def spy(machine):
        spans.append((machine.buf[0][0], machine.buf[-1][0]))
        emit(machine)

    state.rebuilder._emit = spy
    offset = 0
    for lineno, text in enumerate(lines, 1):
        text = text.replace("\x00", "")  # what read.decode() does for every input the CLI reads
        state.feed(lineno, offset, text)
        offset += len(text.encode("utf-8", "replace")) + 1
    state.finish()
    summary = InputSummary(name, lines=len(lines), bytes=offset, examined_lines=len(lines))
    report = build_report([state], [summary], MATCHER, PACK, Options())
    return report, spans


from vcrash.split.reflow import looks_joined  # noqa: E402


_CONTAINER_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)? ")


def header_lines(lines: list[str]) -> list[int]:
    """Raw lines holding a traceback header that is not a group member's (`| Traceback …`); a
    line that lone CRs joined (not a progress bar redrawn) holds one when one of its parts does."""
    from vcrash.split import is_redraw

    from vcrash.split.user_text import masked

    out = []
    for lineno, whole in enumerate(lines, 1):
        whole = masked(whole)  # a header a user quoted in a prompt is none
        parts = [p for p in whole.split("\r") if p.strip()] if "\r" in whole.rstrip("\r") else [whole]
        if len(parts) > 1 and is_redraw(parts):
            parts = parts[-1:]
        if any(_holds_header(part) for part in parts):
            out.append(lineno)
    return out


def _holds_header(text: str) -> bool:
    text = strip_ansi(text)  # also the ESC-less "[1;36m" of pasted logs
    text = _CONTAINER_STAMP.sub("", text, count=1)  # docker --timestamps' RFC 3339 prefix
    text = re.sub(r"^(?:\^C)+", "", text)  # a terminal's Ctrl-C echo before what came next
    idx = text.find(TB_HEAD_TEXT)
    before = text[:idx].rstrip()
    # A group member's margin is a bar after its indentation; "time | ERROR | stderr |" (a
    # launcher re-logging stderr) is a log prefix.
    margin = before == "|" or before.endswith("  |")
    # A header after other text counts when that text ends like a message or a log prefix.
    if idx >= 0 and (not before or before.endswith(EMBEDDED_HEAD_ENDS)) and not margin \
            and text[idx + len(TB_HEAD_TEXT):].strip() == "":
        return True
    if idx >= 0 and looks_joined(text) and not margin:
        return True  # a whole traceback on one line (a paste that lost its newlines)
    return text.startswith("╭") and rich_traceback(text) is not None  # rich's panel: its title is the header


def check_accounting(report, spans, lines, expected_headers: int | None = None) -> None:
    acc = report.accounting
    assert acc["balanced"], acc
    assert acc["regions"] == acc["rebuilt"] + acc["corrupted"] + acc["duplicates"], acc
    assert acc["regions"] == len(spans), (acc, len(spans))
    assert acc["rebuilt"] + acc["corrupted"] == len(report.tracebacks), acc
    assert acc["corrupted"] == sum(tb.corrupted for tb in report.tracebacks), acc
    assert acc["duplicates"] == sum(len(tb.duplicates) for tb in report.tracebacks), acc
    if expected_headers is not None:
        assert acc["traceback_headers"] == expected_headers, acc
    for lineno in header_lines(lines):
        assert any(a <= lineno <= b for a, b in spans), f"header at line {lineno} is in no region"


# -- generated logs ---------------------------------------------------------------------------
IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
EXC_TYPE = st.builds(lambda mod, name, suffix: (f"{mod}." if mod else "") + name.capitalize() + suffix,
                     st.one_of(st.none(), st.sampled_from(["torch", "vllm.v1.engine", "asyncio", "my_mod"])),
                     IDENT, st.sampled_from(["Error", "Exception", "Timeout", "Failure"]))
# A message: printable, starts with a non-space, and cannot be mistaken for structure.
MESSAGE = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 _.,:;=/()<>'\-]{0,60}", fullmatch=True).map(str.rstrip)
CODE = st.from_regex(r"[a-z_][a-z0-9_ =.()\[\],+*'-]{0,50}", fullmatch=True)


@st.composite
def frames(draw, n_max=8):
    out = []
    for _ in range(draw(st.integers(1, n_max))):
        path = draw(st.sampled_from(["/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py",
                                     "/app/server.py", "<frozen importlib._bootstrap>", "uvloop/loop.pyx",
                                     "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"]))
        out.append(f'  File "{path}", line {draw(st.integers(1, 9999))}, in {draw(IDENT)}')
        if draw(st.booleans()):
            code = draw(CODE)
            out.append(f"    {code}")
            if draw(st.integers(0, 3)) == 0:
                out.append("    " + "~" * draw(st.integers(0, 4)) + "^" * draw(st.integers(1, 6)))
    if draw(st.integers(0, 5)) == 0:
        out.append(f"  [Previous line repeated {draw(st.integers(1, 996))} more times]")
    return out


@st.composite
def python_traceback(draw, uid: int):
    """(lines, headers, (type, message) of the last exception). The message carries a unique id."""
    blocks = draw(st.integers(1, 3))
    lines: list[str] = []
    exc = ("", "")
    for b in range(blocks):
        if b:
            sep = draw(st.sampled_from(["The above exception was the direct cause of the following exception:",
                                        "During handling of the above exception, another exception occurred:"]))
            lines += ["", sep, ""]
        lines.append(TB_HEAD_TEXT)
        lines += draw(frames())
        exc = (draw(EXC_TYPE), f"{draw(MESSAGE)} [planted {uid}.{b}]")
        lines.append(f"{exc[0]}: {exc[1]}")
    return lines, blocks, exc


def _raise_group(depth: int, width: int, uid: int):
    def leaf(i):
        try:
            raise ValueError(f"leaf {uid}.{i}")
        except ValueError as e:
            return e

    def build(d):
        members = [leaf(f"{d}.{i}") for i in range(width)]
        if d > 0:
            members.append(build(d - 1))
        return ExceptionGroup(f"group {uid} depth {d}", members)

    try:
        raise build(depth)
    except ExceptionGroup as e:
        return pytraceback.format_exception(e)


@st.composite
def group_traceback(draw, uid: int):
    depth, width = draw(st.integers(0, 12)), draw(st.integers(1, 3))
    text = "".join(_raise_group(depth, width, uid))
    lines = text.rstrip("\n").split("\n")
    return lines, 0, ("ExceptionGroup", f"group {uid} depth {depth} ({width + (depth > 0)} sub-exception"
                      f"{'s' if width + (depth > 0) > 1 else ''})")


PREFIXES = {
    # name -> (prefix for line i, is_raw_unprefixed)
    "raw": lambda pid: "",
    "tag": lambda pid: f"(EngineCore_DP0 pid={pid}) ",
    "worker": lambda pid: f"(VllmWorker TP{pid % 8} pid={pid}) ",
    "headed": lambda pid: f"(EngineCore_DP{pid % 4} pid={pid}) ERROR 01-02 03:04:05 [core.py:{pid % 1000}] ",
    "headed-bare": lambda pid: f"ERROR 01-02 03:04:{pid % 60:02d} [worker_{pid}.py:77] ",
    "rank": lambda pid: f"[rank{pid % 8}]: ",
    "ray": lambda pid: f"(RayWorkerWrapper pid={pid}, ip=10.0.0.{pid % 250}) ",
}
NOISE_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=80).filter(
    lambda s: "most recent call" not in s and "pid=" not in s and "[rank" not in s)
NOISE_HEADER = "(APIServer pid=1) INFO 01-02 03:04:05 [api_server.py:1] "


@st.composite
def planted_log(draw):
    """Tracebacks in distinct streams, interleaved line by line with each other and with noise."""
    n = draw(st.integers(1, 5))
    kinds = draw(st.lists(st.sampled_from(sorted(PREFIXES)), min_size=n, max_size=n))
    # Lines without a process tag (raw, or only the vLLM header) are one stream, and so are the
    # lines of one rank: at most one planted traceback in each.
    seen_shared = set()
    streams: list[list[str]] = []
    planted: list[tuple[str, str]] = []
    headers = 0
    for i, kind in enumerate(kinds):
        shared = {"raw": "untagged", "headed-bare": "untagged", "rank": "rank"}.get(kind)
        if shared in seen_shared:
            kind, shared = "tag", None
        seen_shared.add(shared)
        seen_shared.add(kind)
        pid = 100 + i * 37
        prefix = PREFIXES[kind](pid)
        if kind == "headed":
            # logger.exception: a context record and then every traceback line under the same header.
            body_lines = [f"EngineCore failed, planted {i}"]
        else:
            body_lines = []
        if draw(st.integers(0, 3)) == 0:
            lines, h, exc = draw(group_traceback(i))
        else:
            lines, h, exc = draw(python_traceback(i))
        headers += h
        planted.append(exc)
        streams.append([prefix + t for t in body_lines + lines])
    noise = [NOISE_HEADER + t for t in draw(st.lists(NOISE_TEXT, max_size=40))]
    if "untagged" not in seen_shared:
        noise += [t for t in draw(st.lists(NOISE_TEXT, max_size=10)) if not t.startswith(("(", "[", " ", "\t"))]
    streams.append(noise)
    rnd = draw(st.randoms(use_true_random=False))
    rnd.shuffle(noise)
    out: list[str] = []
    cursors = [0] * len(streams)
    live = [i for i, s in enumerate(streams) if s]
    while live:
        i = rnd.choice(live)
        out.append(streams[i][cursors[i]])
        cursors[i] += 1
        if cursors[i] == len(streams[i]):
            live.remove(i)
    return out, planted, headers


@SETTINGS
@given(planted_log())
def test_planted_tracebacks_are_found_and_accounted(case):
    lines, planted, headers = case
    report, spans = analyze_with_regions("gen.log", lines)
    check_accounting(report, spans, lines, expected_headers=headers)
    got = {(e.type, e.message_head) for tb in report.tracebacks for e in tb.exceptions}
    for exc in planted:
        assert exc in got, f"planted {exc} not found; got {sorted(got)[:10]}"
    found = [tb for tb in report.tracebacks if not tb.corrupted]
    assert len(found) >= len(planted), [tb.corrupted_reason for tb in report.tracebacks]


# -- mutated logs -----------------------------------------------------------------------------
MUTATIONS = ("drop", "dup", "cut", "junk", "swap", "strip", "crlf", "cr", "nul", "ansi", "blank")


def mutate(lines: list[str], rnd: random.Random, n: int) -> list[str]:
    lines = list(lines)
    for _ in range(n):
        if not lines:
            lines.append("")
        i = rnd.randrange(len(lines))
        op = rnd.choice(MUTATIONS)
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][: rnd.randrange(len(lines[i]) + 1)]
        elif op == "junk":
            lines.insert(i, bytes(rnd.randrange(256) for _ in range(rnd.randrange(40))).decode("utf-8", "replace"))
        elif op == "swap" and len(lines) > 1:
            j = rnd.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "strip":
            lines[i] = lines[i].lstrip()
        elif op == "crlf":
            lines[i] += "\r"
        elif op == "cr":
            lines[i] = lines[i] + "\r" + lines[rnd.randrange(len(lines))]
        elif op == "nul":
            lines[i] = lines[i].replace(" ", "\x00", 1)
        elif op == "ansi":
            lines[i] = "\x1b[31m" + lines[i] + "\x1b[0m"
        elif op == "blank":
            lines.insert(i, "")
    return lines


@SETTINGS
@given(planted_log(), st.randoms(use_true_random=False), st.integers(1, 25))
def test_mutated_logs_never_raise_and_balance(case, rnd, n):
    lines, _planted, _headers = case
    lines = mutate(lines, rnd, n)
    note("mutated log:\n" + "\n".join(map(repr, lines)))
    report, spans = analyze_with_regions("mut.log", lines)
    check_accounting(report, spans, lines)


STRUCTURAL = st.sampled_from([
    TB_HEAD_TEXT, "  + Exception Group Traceback (most recent call last):", '  File "x.py", line 1, in f',
    '  File "x.py", line 1', "    code()", "    ^^^^", "ValueError: boom", "KeyError", "",
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
    "  +-+---------------- 1 ----------------", "    +---------------- ... ----------------",
    "    | ValueError: v", "    +------------------------------------", "  | ExceptionGroup: g (1 sub-exception)",
    "Fatal Python error: Segmentation fault", "Current thread 0x00007f (most recent call first):",
    '  File "x.py", line 3 in f', "terminate called after throwing an instance of 'c10::Error'",
    "  what():  CUDA error", "frame #0: c10::Error::Error() (0x1 in libc10.so)",
    "Exception raised from foo at bar.cpp:1 (most recent call first):", "Process EngineCore_DP0:",
    "Exception in thread Thread-1:", "Task exception was never retrieved", "  [Previous line repeated 5 more times]",
    "    ...<3 lines>...", "    | ... (max_group_depth is 10)", "  and 3 more exceptions",
])
PREFIX = st.sampled_from(["", "(EngineCore_DP0 pid=7) ", "ERROR 01-02 03:04:05 [core.py:1] ",
                          "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:1] ", "[rank1]: ",
                          "2025-01-01T00:00:00.000000Z stdout F ", "api-1  | "])


@SETTINGS
@given(st.lists(st.one_of(st.tuples(PREFIX, STRUCTURAL).map("".join), st.text(max_size=60)), max_size=120))
def test_structural_soup_never_raises(lines):
    """Random sequences of grammar tokens under random prefixes: never raise, always balance."""
    lines = [t.replace("\n", " ") for t in lines]
    report, spans = analyze_with_regions("soup.log", lines)
    check_accounting(report, spans, lines)
    report.to_dict()


@SETTINGS
@given(st.lists(st.text(max_size=200), max_size=60))
def test_arbitrary_text_never_raises(lines):
    lines = [t.replace("\n", " ") for t in lines]
    report = analyze_lines("any.log", lines, PACK, MATCHER)
    assert report.accounting["balanced"]
    report.to_dict()


# -- deterministic cases the generators reach only rarely -------------------------------------
def test_deep_group_is_one_clean_traceback():
    lines = "".join(_raise_group(15, 2, 1)).rstrip("\n").split("\n") + ["next unrelated line", "INFO done"]
    report, spans = analyze_with_regions("grp.log", lines)
    check_accounting(report, spans, lines)
    assert len(report.tracebacks) == 1
    tb = report.tracebacks[0]
    assert not tb.corrupted, tb.corrupted_reason
    assert tb.exceptions[0].type == "ExceptionGroup"
    assert tb.end_line < len(lines) - 1, "the region swallowed the lines after the group"


# -- samples ----------------------------------------------------------------------------------
SAMPLES_DIR = Path(__file__).resolve().parents[1] / "samples"


def _samples() -> list[Path]:
    return discover(SAMPLES_DIR) if SAMPLES_DIR.is_dir() else []


def test_every_sample_accounts_for_every_header():
    samples = _samples()
    if not samples:
        pytest.skip("no samples/ yet")
    problems = []
    for path in samples:
        sample = parse_sample(path)
        try:
            report, spans = analyze_with_regions(str(path), sample.body)
            check_accounting(report, spans, sample.body,
                             expected_headers=len([i for i in header_lines(sample.body)
                                                   if _header_payload_ok(sample.body[i - 1])])
                             + sum(_json_record_headers(line) for line in sample.body))
        except AssertionError as exc:
            problems.append(f"{path.relative_to(SAMPLES_DIR)}: {str(exc).splitlines()[0][:200]}")
    assert not problems, "\n".join(problems)


_JSONISH = re.compile(r"^\s*\{")


def _json_record_headers(raw: str) -> int:
    """Headers among the lines a docker json-file record holds in "log" (each line of it is a
    line of the log)."""
    import json

    if not raw.startswith("{"):
        return 0
    try:
        record = json.loads(raw)
    except ValueError:
        return 0
    if not isinstance(record, dict) or not isinstance(record.get("log"), str) or "message" in record:
        return 0
    return sum(_holds_header(part) for part in record["log"].rstrip("\n").split("\n"))


def _header_payload_ok(raw: str) -> bool:
    # JSON-lines records can hold several lines in one; their headers are counted by payload.
    return not _JSONISH.match(raw)

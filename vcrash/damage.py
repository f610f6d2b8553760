"""Mechanical damage for the recall harness: what pasting, excerpting and re-shipping do to a log.

Each damage is a function `(Sample) -> list[str] | None` (None: it does not apply to this
sample). Users paste logs cut, joined, re-prefixed and re-wrapped; every sample under
`samples/` is damaged in each of these ways and must still give its rule, or, where the damage
removed the evidence, a finding that is neither silent nor a symptom.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

from vcrash.harness import Sample
from vcrash.rebuild import grammar as g
from vcrash.split import Splitter

# What the variant must still give: the sample's own rule, or (the evidence is gone) a
# non-silent finding whose primary is not a symptom.
SAME = "same"
NONSILENT = "nonsilent"


@dataclass(frozen=True)
class Damage:
    name: str
    apply: Callable[[Sample], "list[str] | None"]
    expect: str
    what: str


def _payloads(sample: Sample) -> list[str]:
    splitter = Splitter("damage")
    return [splitter.split(i, 0, text)[0].payload for i, text in enumerate(sample.body, 1)]


def _root_region(sample: Sample) -> tuple[int, int] | None:
    """0-based [start, root] of the traceback around the #=ROOT=# line: from its nearest
    'Traceback' header (or first frame) to the root line."""
    if sample.root_line is None:
        return None
    root = sample.root_line - 1
    payloads = _payloads(sample)
    if g.exception_line(payloads[root].strip()) is None:
        return None  # the root is a plain log line, not a traceback's exception line
    start = None
    for i in range(root - 1, max(-1, root - 400), -1):
        p = payloads[i]
        if g.TB_HEAD.match(p):
            start = i
            break
    if start is None:
        return None
    return start, root


def header_dropped(sample: Sample) -> list[str] | None:
    region = _root_region(sample)
    if region is None:
        return None
    start, root = region
    payloads = _payloads(sample)
    return [t for i, t in enumerate(sample.body) if not (start <= i <= root and g.TB_HEAD.match(payloads[i]))]


def cut_before_exception(sample: Sample) -> list[str] | None:
    region = _root_region(sample)
    return None if region is None else sample.body[: region[1]]


def cut_after_exception(sample: Sample) -> list[str] | None:
    region = _root_region(sample)
    return None if region is None else sample.body[: region[1] + 1]


def cut_mid_exception(sample: Sample) -> list[str] | None:
    """The log ends inside the root exception line: its message cut after two thirds (at least
    24 characters of it kept)."""
    region = _root_region(sample)
    if region is None:
        return None
    line = sample.body[region[1]]
    payload = _payloads(sample)[region[1]]
    message_start = len(line) - len(payload) + payload.find(": ") + 2 if ": " in payload else None
    if message_start is None or len(line) - message_start < 36:
        return None
    keep = message_start + max(24, (len(line) - message_start) * 2 // 3)
    return sample.body[: region[1]] + [line[:keep]]


def tail_only(sample: Sample) -> list[str] | None:
    """Only the last lines of the root traceback survive (a code line, a caret, the exception)."""
    region = _root_region(sample)
    if region is None:
        return None
    start, root = region
    return sample.body[max(start + 1, root - 2): root + 1] + sample.body[root + 1: root + 4]


def excerpts_joined(sample: Sample) -> list[str] | None:
    """The start of the log up to the root traceback's first frames, then its last frames on:
    what two excerpts of one post look like pasted together."""
    region = _root_region(sample)
    if region is None:
        return None
    start, root = region
    if root - start < 6:
        return None
    mid = start + 3
    return sample.body[:mid] + sample.body[root - 2:]


def quoted(sample: Sample) -> list[str]:
    return ["> " + t if t else ">" for t in sample.body]


def double_quoted(sample: Sample) -> list[str]:
    return ["> > " + t for t in sample.body]


_ESC = "\x1b"


def esc_lost(sample: Sample) -> list[str]:
    return [t.replace(_ESC, "") for t in sample.body]


def esc_replaced(sample: Sample) -> list[str]:
    return [t.replace(_ESC, "\ufffd") for t in sample.body]


def crlf_mix(sample: Sample) -> list[str]:
    return [t + ("\r" if i % 2 else "") for i, t in enumerate(sample.body)]


def caret_m(sample: Sample) -> list[str]:
    return [t + "^M" for t in sample.body]


def markdown_escaped(sample: Sample) -> list[str]:
    return [t.replace("[", "\\[").replace("]", "\\]").replace("_", "\\_") for t in sample.body]


def wrapped_80(sample: Sample) -> list[str]:
    out: list[str] = []
    for t in sample.body:
        while len(t) > 80:
            out.append(t[:80])
            t = t[80:]
        out.append(t)
    return out


def wrapped_padded(sample: Sample) -> list[str]:
    """A terminal copy that wrapped long lines at 100 columns and joined them back with the 16
    spaces that padded each screen row in place of every wrap."""
    return [(" " * 16).join(t[i:i + 100] for i in range(0, len(t), 100)) if len(t) > 100 else t
            for t in sample.body]


_VLLM_PREFIX = re.compile(
    r"^(?P<tag>(?:\x1b\[[0-9;]*m)?\((?P<name>[^()]*?) ?pid=(?P<pid>\d+)[^)]*\)(?:\x1b\[[0-9;]*m)? )?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"\[?(?P<file>[^\s\[\]:]+):(?P<line>\d+)\] ?"
)


def _reprefix(sample: Sample, fmt: Callable[[re.Match], str]) -> list[str] | None:
    out, changed = [], 0
    for t in sample.body:
        m = _VLLM_PREFIX.match(t)
        if m:
            out.append(fmt(m) + t[m.end():])
            changed += 1
        else:
            out.append(t)
    return out if changed else None


def prefix_python_logging(sample: Sample) -> list[str] | None:
    return _reprefix(sample, lambda m: f"2025-{m['md']} {m['hms']},123 - vllm - {m['level']} - ")


def prefix_custom(sample: Sample) -> list[str] | None:
    # date time LEVEL pid [file:line]: a deployment's own logging format
    return _reprefix(sample, lambda m: f"2025-{m['md']} {m['hms']}.456 {m['level']} {m['pid'] or 1} "
                                       f"[{m['file']}:{m['line']}] ")


def prefix_iso_level(sample: Sample) -> list[str] | None:
    return _reprefix(sample, lambda m: f"2025-{m['md']}T{m['hms']}.123Z {m['level']} ")


def prefix_cloud_logging(sample: Sample) -> list[str]:
    """Google Cloud Logging's view of a container: severity, RFC 3339 time, a resource label;
    the line after it loses its leading whitespace (the console trims it)."""
    return [f"INFO 2025-11-19T20:16:{i % 60:02d}.{i:09d}Z [resource.labels.containerName: vllm] {t.lstrip()}"
            for i, t in enumerate(sample.body)]


def prefix_log_table(sample: Sample) -> list[str]:
    """A log console's table copied as text (CloudWatch): "  | <time> | " before each line, and
    the table's separator row after the first."""
    rows = [f"  | 2026-02-12T23:31:{i % 60:02d}.632Z | {t}" for i, t in enumerate(sample.body)]
    return rows[:1] + ["-- | -- | --"] + rows[1:]


def prefix_journald(sample: Sample) -> list[str]:
    return [f"Oct 21 09:15:47 gpu-node-3 vllm[{311}]: {t}" for t in sample.body]


_DUNDER = re.compile(r"__(\w+?)__")


def markdown_rendered(sample: Sample) -> list[str]:
    """A paste shown as markdown, then copied: backticks gone, `__init__` turned into bold `init`."""
    return [_DUNDER.sub(r"\1", t.replace("`", "")) for t in sample.body]


def double_spaced(sample: Sample) -> list[str]:
    """A paste with an empty line after every line (a copy from a rich-text view)."""
    return [t for line in sample.body for t in (line, "")]


def prefix_service_label(sample: Sample) -> list[str]:
    return [f"[vllm]: {t}" for t in sample.body]


def prefix_relogged_stderr(sample: Sample) -> list[str]:
    """A launcher that re-logs the server's stderr through its own logger (FastChat's workers):
    every line but vLLM's own records behind 'time | ERROR | stderr | '."""
    return [t if _VLLM_PREFIX.match(t) else f"2024-03-20 19:18:27 | ERROR | stderr | {t}" for t in sample.body]


def prefix_logfmt_relay(sample: Sample) -> list[str]:
    """A Go service relaying the server's output as logfmt records (LocalAI's backends): every
    line a quoted, escaped `line="…"` field between the record's other fields."""
    def record(t: str) -> str:
        value = t.replace("\\", "\\\\").replace('"', '\\"')
        return (f'Jul 22 17:17:15 DEBUG GRPC stderr id="qwen-127.0.0.1:41633" line="{value}" '
                'caller={caller.file="/build/pkg/model/process.go"  caller.L=219 } ')
    return [record(t) for t in sample.body]


def prefix_platform_shell(sample: Sample) -> list[str]:
    """A hosting platform's console: '[time] [/bin/sh]: ' before every line, and an empty wrapped
    line after each."""
    w = "[2026-01-22 20:05:33] [/bin/sh]: "
    return [x for t in sample.body for x in (w + t, w)]


_TAG_AT_START = re.compile(r"^(?P<pre>(?:\x1b\[[0-9;]*m)?)\((?P<name>[^()]*?) pid=(?P<pid>\d+)\)(?P<post>(?:\x1b\[[0-9;]*m)?) ")
_HEADER_SECONDS = re.compile(r"^((?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d)( \[?[^\s\[\]:]+:\d+\])")


def tag_bracketed(sample: Sample) -> list[str] | None:
    """The process tag as some platforms print it, '[NAME][pid=N] ', with milliseconds in the
    vLLM header's time."""
    out, changed = [], 0
    for t in sample.body:
        m = _TAG_AT_START.match(t)
        if m and m["name"]:
            rest = _HEADER_SECONDS.sub(r"\1.129\2", t[m.end():], count=1)
            out.append(f"{m['pre']}[{m['name']}][pid={m['pid']}]{m['post']} {rest}")
            changed += 1
        else:
            out.append(t)
    return out if changed else None


def prefix_buildkite_gutter(sample: Sample) -> list[str]:
    """A CI job's web log copied (Buildkite): '  | [ISO time] ' before every line, '  |' for an
    empty one, and a lone '--' section separator before and after."""
    body = [f"  | [2025-03-10T15:07:20Z] {t}" if t.strip() else "  |" for t in sample.body]
    return ["--", "  |"] + body + ["  |", "--"]


def prefix_csv_export(sample: Sample) -> list[str]:
    """A log service's CSV export (CloudWatch): 'epoch-ms,' before every line, the line quoted
    with its quotes doubled when it holds a quote or a comma, ESC spelled '#033', a CR '#015'."""
    out = []
    for i, t in enumerate(sample.body):
        t = t.replace("\x1b", "#033") + ("#015" if i % 3 == 0 else "")
        if '"' in t or "," in t:
            t = '"' + t.replace('"', '""') + '"'
        out.append(f"{1756144012376 + 37 * i},{t}")
    return out


_PATH_HEAD = re.compile(r'File "/(?:[^/"]+/){2}')


def paths_redacted(sample: Sample) -> list[str] | None:
    """A user who cut the private start of every frame's path, opening quote and all
    ('File "/home/alice/venv/…' -> 'File venv/…')."""
    out = [_PATH_HEAD.sub("File ", t) for t in sample.body]
    return out if out != sample.body else None


def newlines_lost(sample: Sample) -> list[str] | None:
    """The root traceback's lines arrive as one line (a paste that lost its newlines)."""
    region = _root_region(sample)
    if region is None:
        return None
    start, root = region
    payloads = _payloads(sample)
    joined = " ".join(p.strip() for p in payloads[start: root + 1])
    return sample.body[:start] + [joined] + sample.body[root + 1:]


def newest_first(sample: Sample) -> list[str]:
    """The log as a view that lists the newest line first shows it (cloud log explorers,
    serverless consoles): every line in reverse order."""
    return list(reversed(sample.body))


def escaped_line_ends(sample: Sample) -> list[str]:
    """Each line's message copied out of a raw field: a literal backslash-n at its end."""
    return [t + "\\n" for t in sample.body]


def tag_paren_lost(sample: Sample) -> list[str] | None:
    """The root exception's line as an excerpt cut one character into it shows it (or a paste
    that starts there): its process tag without the opening parenthesis."""
    region = _root_region(sample)
    if region is None or not sample.body[region[1]].startswith("("):
        return None
    root = region[1]
    return sample.body[:root] + [sample.body[root][1:]] + sample.body[root + 1:]


def docker_json_file(sample: Sample) -> list[str]:
    """The log as docker's json-file driver stores it (what a container's *-json.log holds): one
    compact JSON record per line, the text and its newline in "log", the stream and an RFC 3339
    time with nanoseconds beside it."""
    return [json.dumps({"log": t + "\n", "stream": "stderr" if "ERROR" in t or not t.startswith("(") else "stdout",
                        "time": f"2026-12-04T10:{i // 60 % 60:02d}:{i % 60:02d}.{i * 7919 % 10**9:09d}Z"},
                       separators=(",", ":"))
            for i, t in enumerate(sample.body)]


def prefix_cri(sample: Sample) -> list[str]:
    """The log as a Kubernetes node keeps it (/var/log/containers, CRI's format): an RFC 3339
    time with nanoseconds, the stream, the F(ull) tag, then the line."""
    return [f"2026-12-06T10:{i // 60 % 60:02d}:{i % 60:02d}.{i * 7919 % 10**9:09d}Z "
            f"{'stderr' if 'ERROR' in t or not t.startswith('(') else 'stdout'} F {t}"
            for i, t in enumerate(sample.body)]


def tags_coloured(sample: Sample) -> list[str]:
    """Every process tag in vLLM's SGR colour (bold cyan, reset after), as a terminal or a
    container's TTY shows it."""
    out = []
    for t in sample.body:
        m = _LEADING_TAG.match(t)
        if m is None or _ESC in t[:m.end()]:
            out.append(t)
            continue
        tag = t[:m.end()].rstrip(" ")
        out.append(f"{_ESC}[1;36m{tag}{_ESC}[0;0m{t[len(tag):]}")
    return out


def journald_json(sample: Sample) -> list[str]:
    """`journalctl -u vllm -o json`: one JSON object per line, the line itself in "MESSAGE",
    the time as microseconds since the epoch, the unit's fields around it."""
    return [json.dumps({"__CURSOR": f"s=5b1f;i={0x1a2b + i:x}", "__REALTIME_TIMESTAMP": str(1764842400000000 + i * 1013),
                        "_PID": "311", "SYSLOG_IDENTIFIER": "vllm", "_SYSTEMD_UNIT": "vllm.service", "PRIORITY": "6",
                        "MESSAGE": t})
            for i, t in enumerate(sample.body)]


def damageable(sample: Sample) -> bool:
    """A sample with an expected rule that is not itself a pasted, damaged log (damage on damage
    tests the combination, not the mechanism)."""
    return bool(sample.expect) and not sample.path.name.startswith("pasted-")


_LEADING_TAG = re.compile(r"^\((?:[^()]{1,80}? )?pid=\d+(?:, ip=[^)\s]+)?\) ?")


def pasted_from_untagged(sample: Sample) -> list[str] | None:
    """A paste that starts at the root traceback (or at a root exception line that has none), its
    first line without the process tag: the selection began after the tag."""
    if sample.root_line is None:
        return None
    root = sample.root_line - 1
    if g.exception_line(_payloads(sample)[root].strip()) is None:
        return None
    region = _root_region(sample)
    if region is None and root and g.body_shaped(_payloads(sample)[root - 1]):
        return None  # frames without a header before it: the paste would start mid-traceback
    start = region[0] if region is not None else root
    m = _LEADING_TAG.match(sample.body[start])
    if m is None:
        return None
    return [sample.body[start][m.end():]] + sample.body[start + 1:]


DAMAGES: list[Damage] = [
    Damage("header-dropped", header_dropped, SAME, "the root traceback's 'Traceback' line removed"),
    Damage("cut-after-exception", cut_after_exception, SAME, "the log ends at the root exception line"),
    Damage("tail-only", tail_only, SAME, "only the root traceback's last code line(s) and exception line"),
    Damage("excerpts-joined", excerpts_joined, SAME, "the root traceback's middle frames cut out"),
    Damage("cut-mid-exception", cut_mid_exception, SAME, "the log ends two thirds into the root exception's message"),
    Damage("cut-before-exception", cut_before_exception, NONSILENT, "the log ends before the root exception line"),
    Damage("quoted", quoted, SAME, "every line behind '> '"),
    Damage("double-quoted", double_quoted, SAME, "every line behind '> > '"),
    Damage("esc-lost", esc_lost, SAME, "colour codes without their ESC byte"),
    Damage("esc-replaced", esc_replaced, SAME, "ESC bytes shown as U+FFFD"),
    Damage("crlf-mix", crlf_mix, SAME, "every other line ends in CR"),
    Damage("caret-m", caret_m, SAME, "a literal ^M at each line end"),
    Damage("markdown-escaped", markdown_escaped, SAME, "brackets and underscores backslash-escaped"),
    Damage("markdown-rendered", markdown_rendered, SAME, "backticks gone and __dunders__ made bold (a rendered paste copied back)"),
    Damage("double-spaced", double_spaced, SAME, "an empty line after every line"),
    Damage("wrapped-80", wrapped_80, SAME, "long lines hard-wrapped at 80 columns"),
    Damage("wrapped-padded", wrapped_padded, SAME, "long lines wrapped at 100 columns and joined back with 16 spaces of padding"),
    Damage("prefix-python-logging", prefix_python_logging, SAME, "vLLM header replaced by 'date - name - LEVEL - '"),
    Damage("prefix-custom", prefix_custom, SAME, "vLLM header replaced by 'date time LEVEL pid [file:line]'"),
    Damage("prefix-iso-level", prefix_iso_level, SAME, "vLLM header replaced by 'ISO-time LEVEL'"),
    Damage("prefix-journald", prefix_journald, SAME, "journald prefix in front of every line"),
    Damage("prefix-log-table", prefix_log_table, SAME, "every line a log console's table row '  | time | ', a separator row after the first"),
    Damage("prefix-cloud-logging", prefix_cloud_logging, SAME, "every line behind Cloud Logging's 'SEVERITY time [resource.labels.…]', indentation trimmed"),
    Damage("prefix-service-label", prefix_service_label, SAME, "a deployment's '[vllm]: ' label in front of every line"),
    Damage("prefix-relogged-stderr", prefix_relogged_stderr, SAME,
           "every line but vLLM's own records behind 'time | ERROR | stderr | ' (FastChat)"),
    Damage("prefix-logfmt-relay", prefix_logfmt_relay, SAME, "every line the quoted line= field of a logfmt record (a Go service relaying stderr)"),
    Damage("prefix-platform-shell", prefix_platform_shell, SAME,
           "'[time] [/bin/sh]: ' before every line and an empty wrapped line after each"),
    Damage("tag-bracketed", tag_bracketed, SAME, "process tags as '[NAME][pid=N]', milliseconds in the header time"),
    Damage("prefix-buildkite-gutter", prefix_buildkite_gutter, SAME,
           "Buildkite's '  | [ISO time] ' gutter on every line, '  |' empty lines, '--' separators"),
    Damage("newlines-lost", newlines_lost, SAME, "the root traceback pasted as one line"),
    Damage("prefix-csv-export", prefix_csv_export, SAME,
           "a log service's CSV export: 'epoch-ms,' first, quoted lines, ESC as '#033', CR as '#015'"),
    Damage("paths-redacted", paths_redacted, SAME, "each frame's path cut before its third folder, opening quote included"),
    Damage("newest-first", newest_first, SAME, "every line in reverse order (a log view listing the newest first)"),
    Damage("escaped-line-ends", escaped_line_ends, SAME, "a literal '\\n' at the end of every line"),
    Damage("tag-paren-lost", tag_paren_lost, SAME, "the root exception line cut into its tag: its '(' lost"),
    Damage("docker-json-file", docker_json_file, SAME, "every line a record of docker's json-file driver: {\"log\": …, \"stream\": …, \"time\": …}"),
    Damage("journald-json", journald_json, SAME, "every line the MESSAGE of a `journalctl -o json` record"),
    Damage("prefix-cri", prefix_cri, SAME, "every line behind CRI's 'time stream F ' (a Kubernetes node's container log)"),
    Damage("tags-coloured", tags_coloured, SAME, "every process tag in vLLM's bold-cyan SGR colour"),
    Damage("pasted-from-untagged", pasted_from_untagged, SAME,
           "the paste starts at the root traceback, its first line without its process tag"),
]

"""Outer wrappers that other programs put around a vLLM line: colour codes, container and CI
timestamps, CRI, docker-compose, journald/syslog, kubectl prefixes and box borders.

Each grammar is a small named function `text -> (text, facts) | None`, registered in
`OUTER_WRAPPERS` in the order they are tried; the splitter applies them until none matches.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Callable

# Real escapes, OSC sequences, and the broken forms pasted logs keep (ESC lost, or shown as
# ^[ / #033 / \033 / \x1b / \e).
_ANSI = re.compile(
    r"\x1b\[[0-9;?]*[A-Za-z]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|(?:\^\[|#033|\\033|\\x1b|\\e|\\u001b)\[[0-9;]*[A-Za-z]"
    r"|\ufffd?\[(?:\d{1,3};)*\d{1,3}m"
    r"|\x1b"
)


# Cheap test first: most lines hold a '[' (the vLLM header) but no colour code. Kept as
# separate tests: `re` finds a pattern that starts with a literal '[' by a fast skip to each '['
# (0.2 us on a vLLM line), an alternation with the escape character in front costs it 1 us.
_ANSI_QUICK = re.compile(r"\x1b|\[[0-9;]*[0-9][A-Za-z]")
_BARE_CODE = re.compile(r"\[[0-9;]*[0-9][A-Za-z]")
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_SPELLED_ESCAPES = ("^[[", "#033[", "\\033[", "\\x1b[", "\\e[", "\\u001b[")  # _ANSI's third branch, spelled out


def unescape_markdown(text: str) -> str:
    """Undo what a markdown editor does to a pasted log line: `\\[`, `\\]`, `\\_`, `\\*`
    escapes, the `[core.py:720[]` form a re-escaped closing bracket leaves, and links
    (`[~/x/llm.py:292](http://host:8888/…)`, JupyterLab's frame paths) reduced to their text."""
    if "\\" in text:
        text = _MD_ESCAPE.sub(r"\1", text)
    if "[]" in text:
        text = _MD_BROKEN_CLOSE.sub(r":\1]", text)
    if "](" in text:
        text = _MD_LINK.sub(r"\1", text)
    return text


_MD_ESCAPE = re.compile(r"\\([\[\]_*`#<>()|~])")
_MD_BROKEN_CLOSE = re.compile(r":(\d+)\[\]")
_MD_LINK = re.compile(r"\[([^\[\]\n]{1,400})\]\((?:https?|file)://[^)\s]{0,2000}\)")


def strip_ansi(text: str) -> str:
    if "\x1b" not in text:
        if "[" not in text or _BARE_CODE.search(text) is None:
            return text
        return _ANSI.sub("", text)
    # vLLM colours its process tags: plain SGR codes only, removed by a cheap pattern when
    # nothing else of _ANSI's (other escapes, spelled-out or bare codes) is left after them.
    plain = _SGR.sub("", text)
    # Every spelled escape holds a backslash, "033[" or "^[[": three plain tests first.
    if "\x1b" not in plain and _BARE_CODE.search(plain) is None and not (
            ("\\" in plain or "033[" in plain or "^[[" in plain) and any(e in plain for e in _SPELLED_ESCAPES)):
        return plain
    return _ANSI.sub("", text)


Facts = dict
Wrapper = Callable[[str], "tuple[str, Facts] | None"]

_RFC3339 = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)"
    # A time-zone name, never a log level that follows the time.
    r"(?: (?!(?:INFO|ERROR|DEBUG|WARN|TRACE|FATAL|CRIT)[A-Z]*\b)[A-Z]{2,5})?[ \t]+"
)
# CI runners (Buildkite, GitHub Actions "[time]" exports) put the ISO time in brackets, then one
# space: the indentation of a traceback's raw lines after it is theirs.
_BRACKETED_TS = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\][ \t]?")
# CRI's "stdout F " after the time; a sidecar's "1 stdout: " (a pid, then the stream) likewise.
_CRI = re.compile(r"^(?:stdout|stderr) [FP] |^\d{1,7} (?:stdout|stderr): ")
_COMPOSE = re.compile(r"^(?P<svc>[A-Za-z0-9][\w.-]*?)(?:[-_]\d+)?\s*\| ?")
_SYSLOG = re.compile(
    r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (?P<host>\S+) (?P<prog>[\w.\-/@]+?)(?:\[(?P<pid>\d+)\])?: "
)
_KUBECTL_PREFIX = re.compile(r"^\[pod/(?P<pod>[^\]/\s]+)(?:/(?P<container>[^\]\s]+))?\] ")
_BOX = re.compile(r"^[│┃]\s?(?P<body>.*?)\s*[│┃]?$")
# A log shipper's or deployment's service label, "[vllm]: ", before what vLLM printed: taken only
# when a rank prefix, a process tag, a vLLM header or traceback text follows (a bracket alone is
# too common).
# A process tag after it may be in brackets ("[EngineCore_DP0][pid=7] "), and another wrapper's
# timestamp may follow it. A pod's name with its uuid runs past 40 characters.
_SERVICE_LABEL = re.compile(
    r"^\[(?!rank\d+\])(?P<svc>[A-Za-z][\w.-]{0,100}(?: [\w.-]{1,40})?)\]:? "
    r"(?=(?:\^C)*(?:\[rank\d+\]:|\([^()]{1,80}? pid=\d+\))|\[[^\[\]()]{1,80}\]\[pid=\d+\]"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?:\d\d-\d\d |\[[\w.-]+\.py:\d+\] )|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d"
    r"|Traceback \(most recent call last\)|\s+(?:File \"|\S)|[\w.]+(?:Error|Exception)\b"
    r"|(?:INVALID_ARGUMENT|FAILED_PRECONDITION|RESOURCE_EXHAUSTED|DEADLINE_EXCEEDED|UNAVAILABLE|INTERNAL): )")
# A platform's label that names the program by its path ("[/bin/sh]: "), never vLLM's own text:
# whatever follows is the line, an empty one included (its console wraps empty lines too).
_PATH_LABEL = re.compile(r"^\[(?P<svc>/[\w./-]{1,60})\]: ?")
# Python logging laid out in '|'-separated fields after the time: FastChat's workers re-log stderr
# as "2024-03-20 19:18:27 | ERROR | stderr | <line>" (the time is taken first).
_PIPE_RECORD = re.compile(
    r"^\|[ \t]*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[ \t]*\|[ \t]*(?P<name>[\w.<>-]{1,60})[ \t]*\| ?")


def rfc3339_match(text: str):
    """The match of rfc3339_timestamp's time at the start of `text` (its group "ts"), or None."""
    return _RFC3339.match(text)


def rfc3339_timestamp(text: str) -> tuple[str, Facts] | None:
    m = _RFC3339.match(text)
    if not m:
        return None
    return text[m.end():], {"timestamp": m.group("ts")}


def bracketed_timestamp(text: str) -> tuple[str, Facts] | None:
    if not text.startswith("[") or not text[1:2].isdigit():
        return None
    m = _BRACKETED_TS.match(text)
    if not m:
        return None
    return text[m.end():], {"timestamp": m.group("ts")}


def cri_stream(text: str) -> tuple[str, Facts] | None:
    m = _CRI.match(text)
    if not m:
        return None
    return text[m.end():], {}


def docker_compose(text: str) -> tuple[str, Facts] | None:
    # Only a single service token followed by '|' counts; tracebacks' group margins start with
    # spaces or '+', so they never match.
    if "|" not in text[:80]:
        return None
    m = _COMPOSE.match(text)
    if not m or m.group("svc").lower() in {"info", "warning", "error", "debug"}:
        return None
    return text[m.end():], {"service": m.group("svc")}


# A log service's CSV export (CloudWatch, "timestamp,message"): the time in epoch milliseconds,
# then the line as a CSV field: in quotes, inner quotes doubled, when it holds a quote or comma.
# The exporter spells control bytes the syslog way: ESC as "#033" (the ANSI pass takes it),
# CR as "#015".
_CSV_EPOCH = re.compile(r"^(?P<ms>1[0-9]{12}),")


def csv_export(text: str) -> tuple[str, Facts] | None:
    m = _CSV_EPOCH.match(text)
    if m is None:
        return None
    rest = text[m.end():]
    if rest.startswith('"') and rest.rstrip("\r").endswith('"') and len(rest.rstrip("\r")) >= 2:
        rest = rest.rstrip("\r")[1:-1].replace('""', '"')
    if rest.endswith("#015"):
        rest = rest[:-4]
    stamp = datetime.fromtimestamp(int(m.group("ms")) / 1000, timezone.utc)
    return rest, {"timestamp": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"}


def syslog(text: str) -> tuple[str, Facts] | None:
    m = _SYSLOG.match(text)
    if not m:
        return None
    return text[m.end():], {"timestamp": m.group("ts"), "host": m.group("host")}


# A serverless platform's log view: the worker's id and the stream's level, no space between
# ("duuu9mr59pks4j[info]").
_WORKER_LEVEL = re.compile(r"^(?P<worker>[a-z0-9]{8,32})\[(?:info|error|warn|warning|debug)\]")  # what follows is the line, indentation and all


def worker_level(text: str) -> tuple[str, Facts] | None:
    m = _WORKER_LEVEL.match(text)
    if not m:
        return None
    return text[m.end():], {"service": m.group("worker")}


# Google Cloud Logging's export and console copy: the entry's severity (INFO for anything on
# stdout), its RFC 3339 time and a resource label, then the container's line.
_CLOUD_LOGGING = re.compile(
    r"^(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY) "
    r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) \[resource\.labels\.[\w.]+: [^\]]{0,200}\] ?")


def cloud_logging(text: str) -> tuple[str, Facts] | None:
    m = _CLOUD_LOGGING.match(text)
    return (text[m.end():], {"timestamp": m.group("ts")}) if m else None


def kubectl_prefix(text: str) -> tuple[str, Facts] | None:
    m = _KUBECTL_PREFIX.match(text)
    if not m:
        return None
    return text[m.end():], {"pod": m.group("pod")}


def service_label(text: str) -> tuple[str, Facts] | None:
    m = _PATH_LABEL.match(text) if text[1:2] == "/" else _SERVICE_LABEL.match(text)
    if not m:
        return None
    return text[m.end():], {"service": m.group("svc")}


def pipe_record(text: str) -> tuple[str, Facts] | None:
    if not text.startswith("|"):
        return None
    m = _PIPE_RECORD.match(text)
    if not m:
        return None
    return text[m.end():], {"logger": m.group("name")}


# A log viewer's table copied as text (the CloudWatch console, Ray's dashboard): a timestamp
# cell (after a one-letter flag cell, the console's indent, or neither), at most two short cells
# (stream, level), then the line. A group member's "  | " margin is never followed by a date.
_LOG_TABLE_ROW = re.compile(
    r"^(?:[A-Z] \| | {0,2}\| )(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?) \| "
    r"(?:(?:[\w.-]{1,30})?[ \t]*\| ){0,2}")
# DJL Serving (SageMaker LMI) relays its Python worker's output behind its own log record.
_DJL_RELAY = re.compile(r"^\[(?:INFO |WARN |ERROR|DEBUG|TRACE)\] PyProcess - W-\d+-[\w.-]+-std(?:out|err): ")


# A Go service relaying a child's output as logfmt records (LocalAI's backends: `DEBUG GRPC stderr
# id="model-127.0.0.1:41633" line="…" caller={…}`): the quoted `line=` (or `msg=`) value is the line.
_LOGFMT_RELAY = re.compile(
    r'^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d )?(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR) (?:[A-Za-z]\w* ){0,3}'
    r'(?:\w+=(?:"(?:[^"\\]|\\.)*"|[^\s"]+) +){0,6}(?:line|msg)="(?P<value>(?:[^"\\]|\\.)*)"(?= |$)')
_LOGFMT_ESCAPE = re.compile(r'\\(["\\nt])')


def logfmt_relay(text: str) -> tuple[str, Facts] | None:
    m = _LOGFMT_RELAY.match(text)
    if m is None:
        return None
    value = m.group("value")
    if "\\" in value:
        value = _LOGFMT_ESCAPE.sub(lambda e: {"n": " ", "t": "\t"}.get(e.group(1), e.group(1)), value)
    return value, {}


def log_table_row(text: str) -> tuple[str, Facts] | None:
    m = _LOG_TABLE_ROW.match(text)
    return (text[m.end():], {"timestamp": m.group("ts")}) if m else None


def djl_relay(text: str) -> tuple[str, Facts] | None:
    m = _DJL_RELAY.match(text)
    return (text[m.end():], {}) if m else None


def ci_gutter(text: str) -> tuple[str, Facts] | None:
    """Buildkite's web log, copied: "  | " before every line, whose bracketed time follows, and
    "  |" alone for an empty line. (An exception group's margin is "  | " too, but never before
    a bracketed date, and its empty lines keep the space after the bar.)"""
    if text.startswith("  | [") and text[5:6].isdigit():
        return text[4:], {}
    if text == "  |":
        return "", {}
    return None


def box_border(text: str) -> tuple[str, Facts] | None:
    if not text or text[0] not in "│┃":
        return None
    m = _BOX.match(text)
    return (m.group("body"), {}) if m else None


# rich's traceback panel (typer and rich CLIs: lighteval, harnesses): a box whose title is the
# header, a row per frame ("path.py:407 in func"), numbered source rows (❱ marks the frame's
# line), the bottom border; the exception line follows the box. Read as CPython prints it.
_RICH_TOP = re.compile(r"^╭─+ ?Traceback \(most recent call last\) ?─+╮?\s*$")
_RICH_FRAME = re.compile(r"^[│┃] (?P<file>\S[^│]*?\.py):(?P<line>\d+) in (?P<func>[\w.<>]+)\s*[│┃]?\s*$")
_RICH_CODE = re.compile(r"^[│┃]\s*(?P<mark>❱)?\s*\d+\s*[│┃](?P<code>.*?)\s*[│┃]?\s*$")
_RICH_EMPTY = re.compile(r"^(?:[│┃]\s*[│┃]?|╰─+╯?)\s*$")


def rich_traceback(text: str) -> tuple[str, Facts] | None:
    if text[0] == "╭":
        return ("Traceback (most recent call last):", {}) if _RICH_TOP.match(text) else None
    m = _RICH_FRAME.match(text)
    if m is not None:
        return f'  File "{m.group("file")}", line {m.group("line")}, in {m.group("func")}', {}
    m = _RICH_CODE.match(text)
    if m is not None:
        # A source row (❱ marks the frame's own line; the rest are context), its text kept: a
        # table that numbers its rows the same way must not lose them.
        code = m.group("code").replace("│", " ").strip()
        return ("    " + code if code else ""), {}
    if _RICH_EMPTY.match(text):
        return "", {}
    return None


_QUOTE = re.compile(r"^(?:> ?)+")


def quote_prefix(text: str) -> tuple[str, Facts] | None:
    # Markdown and e-mail quoting of a pasted log: "> ", "> > ", ">>".
    if not text.startswith(">"):
        return None
    return text[_QUOTE.match(text).end():], {}


_EMPHASIS = re.compile(r"^\*{2,}(?=[(\[])")


def markdown_emphasis(text: str) -> tuple[str, Facts] | None:
    # A pasted line made bold (or its markers left by a rendered copy): "****(EngineCore_DP0
    # pid=1804) RuntimeError: …". Only before a tag or bracket: abseil's "*** SIGSEGV received"
    # keeps its stars.
    m = _EMPHASIS.match(text)
    return (text[m.end():], {}) if m else None


_FENCE_LANG = re.compile(r"^[\w+.-]{0,20}$")


def markdown_fence(text: str) -> tuple[str, Facts] | None:
    # A code fence of a pasted log: alone ("```python"), glued to the first or last line, or
    # around one line ("```ValueError: …```").
    if text.startswith("`") and text.endswith("`") and len(text) > 2 and not text.startswith("```"):
        return text[1:-1], {}  # inline code around one pasted line
    if not text.startswith("```") and not text.endswith("```"):
        return None
    body = text[3:] if text.startswith("```") else text
    if body.endswith("```"):
        body = body[:-3]
    elif text.startswith("```") and _FENCE_LANG.match(body.strip()):
        body = ""  # an opening fence and its language
    return body, {}


def sample_marker(text: str) -> tuple[str, Facts] | None:
    # vcrash's own sample files mark the root line inline; analyzing a sample directly must
    # see the original line.
    if text.startswith("#=ROOT=# "):
        return text[9:], {}
    return None


OUTER_WRAPPERS: list[tuple[str, Wrapper]] = [
    ("sample-marker", sample_marker),
    ("quote", quote_prefix),
    ("markdown-emphasis", markdown_emphasis),
    ("markdown-fence", markdown_fence),
    ("log-table-row", log_table_row),  # before docker-compose, which takes its flag cell for a service
    ("rfc3339-timestamp", rfc3339_timestamp),
    ("csv-export", csv_export),
    ("bracketed-timestamp", bracketed_timestamp),
    ("cri", cri_stream),
    ("logfmt-relay", logfmt_relay),  # before syslog, whose time it shares
    ("syslog", syslog),
    ("cloud-logging", cloud_logging),
    ("kubectl-prefix", kubectl_prefix),
    ("worker-level", worker_level),
    ("docker-compose", docker_compose),
    ("service-label", service_label),
    ("pipe-record", pipe_record),
    ("rich-traceback", rich_traceback),
    ("box-border", box_border),
    ("djl-relay", djl_relay),
    ("ci-gutter", ci_gutter),
]

# The ASCII characters each wrapper's text can start with (None: any; markdown-fence also
# looks at the end). A line starting with another ASCII character skips those wrappers.
_DIGITS = "0123456789"
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_FIRST_CHARS: dict[str, str | None] = {
    "sample-marker": "#", "quote": ">", "markdown-emphasis": "*", "markdown-fence": None, "rfc3339-timestamp": _DIGITS, "csv-export": "1",
    "bracketed-timestamp": "[", "cri": "s" + _DIGITS, "syslog": _UPPER, "cloud-logging": "DINWECA", "kubectl-prefix": "[",
    "worker-level": _DIGITS + _UPPER.lower(),
    "docker-compose": _DIGITS + _UPPER + _UPPER.lower(), "service-label": "[", "pipe-record": "|",
    "rich-traceback": "", "box-border": "", "ci-gutter": " ", "log-table-row": _UPPER + " |", "djl-relay": "[", "logfmt-relay": _UPPER,
}
_WRAPPERS_BY_FIRST = {chr(c): [(name, w) for name, w in OUTER_WRAPPERS
                               if _FIRST_CHARS[name] is None or chr(c) in _FIRST_CHARS[name]]
                      for c in range(128)}


# First characters no outer wrapper can start with: the common case (a process tag, a vLLM
# header, indented traceback text) skips the registry entirely.
_NEVER_WRAPPED = frozenset("( \t+-_=.<'\"{}")


def wrappers_for(first: str) -> list[tuple[str, Wrapper]]:
    """The wrappers a text starting with this character may have."""
    return _WRAPPERS_BY_FIRST.get(first, OUTER_WRAPPERS)


def strip_outer(text: str, candidates: Callable[[str], list] = wrappers_for) -> tuple[str, Facts]:
    facts: Facts = {}
    # Indented text is never wrapped, but for a CI log's gutter (one prefix test).
    if not text or text[0] in _NEVER_WRAPPED and not text.startswith("  |"):
        return text, facts
    for _ in range(6):  # wrappers nest (compose around docker -t around CRI); bounded
        if not text:
            break
        for _name, wrapper in candidates(text[0]):
            got = wrapper(text)
            if got is not None:
                text, more = got
                for key, value in more.items():
                    facts.setdefault(key, value)
                break
        else:
            break
    return text, facts

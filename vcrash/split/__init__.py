"""Stage 2, split: one raw line -> Line(stream, level, time, payload, raw position).

Order: ANSI, outer wrappers (timestamps, CRI, compose, syslog, kubectl), JSON-lines records,
process tags (vLLM, Ray, torch rank), then the record header (vLLM, uvicorn, c10, NCCL,
Python logging). Unknown shapes fall through with an untagged stream and the whole text as
payload; nothing here raises on odd input.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from sys import intern

from vcrash.memo import MAX_KEYED_TEXT, Memo
from vcrash.split.retired import RetiredStreams
from vcrash.split.headers import VLLM_HEADER, Header, first_level_word_at, parse_header
from vcrash.split.tags import Tag, find_inner_tag, role_of, split_at_inner_tags, strip_tags
from vcrash.split.user_text import masked
from vcrash.split.reflow import looks_joined, split_joined
from vcrash.split.wrappers import rfc3339_match, strip_ansi, strip_outer, unescape_markdown

UNTAGGED = "-"
# The tag: "(NAME pid=N) " then vLLM's usual header ("LEVEL MM-DD HH:MM:SS [file.py:N] "), or a
# traceback's raw lines, parsed as strip_tags and parse_header would without their loops (a test
# holds the result equal on every sample line and on look-alikes).
_TAGGED = re.compile(r"\((?P<name>[^()]+?) pid=(?P<pid>\d+)\) ?")
# The common record whole: a tagged record in vLLM's header whose message is printable ASCII
# without a backslash, bracket or caret (the only "pid=" is its tag's: split() checks), behind an
# SGR-coloured tag and a container runtime's timestamp (and CRI's stream field) or not. Every step of _split but _plain's
# first branch leaves it as it is, so split() builds its Line at once (tests/test_split.py holds
# it equal on every sample line and on look-alikes). The file name never starts with a digit:
# "[1m" is a bare colour code.
_PLAIN_MESSAGE = r"[ !\"#$%&'()*+,./0-9:;<=>?@A-Z_`a-z{|}~-]"
# `docker logs -t`'s and CRI's time, then CRI's stream field: what strip_outer takes off a line.
CONTAINER_TIME = r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) (?:std(?:out|err) [FP] )?"
_PLAIN_RECORD = re.compile(
    r"(?:" + CONTAINER_TIME + r")?"
    r"(?:\x1b\[[0-9;]*m)?\((?P<name>[A-Za-z0-9_]+) pid=(?P<pid>\d+)\)"
    r"(?:\x1b\[[0-9;]*m)? (?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL) (?P<time>\d\d-\d\d \d\d:\d\d:\d\d) "
    r"\[(?P<src>[A-Za-z_][A-Za-z0-9_.]*:\d+)\] (?P<msg>" + _PLAIN_MESSAGE + r"+)")
# The same tag before text with no header (a traceback's raw lines): a timestamp before it is the
# line's time, and after one a bare level word would start a header (parse_header).
_PLAIN_RAW = re.compile(
    r"(?:" + CONTAINER_TIME + r")?"
    r"(?:\x1b\[[0-9;]*m)?\((?P<name>[A-Za-z0-9_]+) pid=(?P<pid>\d+)\)(?:\x1b\[[0-9;]*m)? ?(?P<rest>"
    + _PLAIN_MESSAGE + r"*)")
_PLAIN_RANKED = re.compile(r"\[rank(?P<rank>\d+)\]: ?(?P<rest>" + _PLAIN_MESSAGE + r"*)")  # torch's rank prefix
_CTRL_C_ECHO = re.compile(r"^(?:\^C)+")
_RANKED = re.compile(r"\[rank(?P<rank>\d+)\]: ?")  # torch's prefix before a rank's raw lines
MAX_NAMED_PIDS = 1 << 16  # pid -> process name entries kept (100 K processes must not keep 100 K)
# Live process records kept (~260 bytes each: ~34 MB at most) before idle ones retire to the spool.
# Retiring costs the parse memo and, when the process writes again, a new record: a round robin
# over 100 K processes would pay both on every line.
MAX_LIVE_STREAMS = 1 << 17


@dataclass(slots=True)
class Stream:
    id: str  # "<input>:<name>:<pid>"
    name: str
    pid: int | None
    role: str
    ip: str | None = None
    lines: int = 0
    seq: int = 0  # order of first appearance in its input


@dataclass(slots=True)
class Line:
    lineno: int
    offset: int
    stream: Stream
    payload: str
    kind: str  # vllm | uvicorn | c10 | nccl | pylog | json | raw
    level: str | None = None
    time: str | None = None  # "MM-DD HH:MM:SS" (vLLM/c10) or an ISO timestamp (wrappers)
    src: str | None = None  # file:line of the logging call, for grouping headed records
    rank: int | None = None
    repeated: int | None = None
    raw: str = ""

    @property
    def record_key(self) -> tuple | None:
        """Lines of one multi-line vLLM log record share this key (level, time, call site)."""
        if self.kind in ("vllm", "pylog", "json") and self.src is not None:
            return (self.level, self.time, self.src)
        return None


_PERCENT_NEXT = re.compile(r"\s*\d{1,3}(?:\.\d+)?%")


# Headers of the text after a process tag or rank prefix: a traceback's raw lines repeat in every
# process and rank that printed it.
_HEADERS: Memo[Header | bool] = Memo()
MAX_KEYED_LINE = 1024  # longer texts are parsed each time rather than held by the memo


def _header_of(rest: str, after_timestamp: bool) -> Header | None:
    if after_timestamp or len(rest) > MAX_KEYED_LINE:
        return parse_header(rest, after_timestamp=after_timestamp)
    kept = _HEADERS.get(rest)
    if kept is None:
        # No header is kept as False, not as a tuple: an untracked value adds nothing for the
        # collector to walk (a tuple per unique line made it run four times as often).
        kept = _HEADERS.put(rest, parse_header(rest) or False)
    return kept or None


def is_redraw(parts: list[str]) -> bool:
    """Are CR-separated parts a progress bar drawn over itself ("Loading: 10%", "Loading: 50%":
    the same label, then a percentage) rather than lines that lost their LF (log records share a
    prefix too, and a CR can join two writers' lines)?"""
    if len(parts) < 2:
        return True
    label = os.path.commonprefix(parts)
    label = label.rstrip("0123456789.")  # "…: 1" of "…: 10%" / "…: 15%" is not label
    return all(_PERCENT_NEXT.match(p, len(label)) for p in parts)


_PLAIN_FIRST = frozenset("(\x1b[")  # the first characters of _plain_whole's shapes without a time
_STAMPED = object()  # a stamped line's memo key tag, and "the time is the line's own stamp"
_RECORD_LINE = object()  # the memo key tag of a line inside a shipper's JSON record
_AFTER_TAG = object()  # the memo key tag of a plain line kept by what follows its process tag or rank
# CRI's stream field after its time (`stderr F `): what _PLAIN_RECORD's CONTAINER_TIME takes too.
_CRI_FIELDS = ("stdout F ", "stderr F ", "stdout P ", "stderr P ")
_CRI_FIELD_LENGTH = len("stdout F ")
# A process tag (SGR-coloured or not, Ray's with its node's ip) or a rank prefix at a line's very
# start: what follows decides the rest of its parse, the tag only the stream (100 K processes'
# lines differ by their pid alone). Not before vLLM's record header: its time makes the rest
# differ anyway (a crash loop's records paid the lookup for nothing).
_LEADING_TAG = re.compile(r"(\x1b\[[0-9;]*m)?(?:\(([A-Za-z0-9_]+) pid=(\d+)(?:, ip=([0-9A-Fa-f.:]+))?\)|\[rank(\d+)\]:)"
                          r"(?!(?:\x1b\[[0-9;]*m)? ?(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d )")


def _stream_is_the_tags(line: Line, tag, after: str) -> bool:
    """Did the line's leading tag (a _LEADING_TAG match), and nothing else, name its stream? Another
    tag or rank prefix in what follows may name it, the tag's own by chance."""
    if "pid=" in after or "[rank" in after or "ip=" in after:
        return False
    _lead, name, pid, ip, rank = tag.groups()
    st = line.stream
    if rank is None:
        return (st.name, st.pid, st.ip, line.rank) == (name, int(pid), ip, None)
    return (st.name, st.pid, st.ip, line.rank) == (f"rank{rank}", None, None, int(rank))


def _stamp_is_only_wrapper(text: str, rest: str) -> bool:
    """Does _split read `text` as its stamp, then `rest` exactly as it would read `rest` behind
    any other stamp? It does when none of its steps before the outer wrappers changes the text
    and no wrapper tried before the time's (a code fence's closing backticks) can take it."""
    return (not text.endswith(("`", "\r", "^M")) and "\r" not in rest and "\\" not in rest and "[]" not in rest
            and "](" not in rest and rest.count("pid=") <= 1 and strip_ansi(text) is text)


def _process_output(record: dict) -> tuple[str, str | None] | None:
    """What a log shipper's JSON record holds of the process's own output, and its time: the
    lines as the process wrote them, not a logging record's message."""
    text = record.get("log")
    if isinstance(text, str) and "message" not in record:  # docker json-file, fluent-bit, Vector
        when = record.get("time")
        return text, when if isinstance(when, str) else None
    text = record.get("MESSAGE")
    if isinstance(text, str):  # journalctl -o json
        micros = record.get("__REALTIME_TIMESTAMP")
        return text, _epoch_micros_iso(micros)
    text = record.get("textPayload")
    if isinstance(text, str):  # Cloud Logging's export
        when = record.get("timestamp")
        return text, when if isinstance(when, str) else None
    return None


def _epoch_micros_iso(micros) -> str | None:
    """journald's microseconds since the epoch (a string of digits) as an RFC 3339 UTC time."""
    if not isinstance(micros, str) or not micros.isdigit() or len(micros) > 17:
        return None
    seconds, fraction = divmod(int(micros), 1_000_000)
    try:
        stamp = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{fraction:06d}Z"


@dataclass
class Splitter:
    """Keeps the stream table of one input (pid -> name, for NCCL lines and rank prefixes)."""

    input: str
    streams: dict[tuple, Stream] = field(default_factory=dict)
    names_by_pid: dict[int, str] = field(default_factory=dict)
    _memo: Memo[tuple] = field(default_factory=Memo, repr=False)
    _memo_ok: bool = True  # cleared when a parse used state that may change (a pid's name)
    _retired: RetiredStreams = field(default_factory=RetiredStreams, repr=False)
    _idle: dict[str, Stream] = field(default_factory=dict, repr=False)  # lost their machine, not retired yet
    _crowded: bool = False  # more processes than MAX_LIVE_STREAMS came: idle ones retire at once

    def stream(self, name: str | None, pid: int | None, ip: str | None = None) -> Stream:
        if name is None and pid is not None:
            name = self.names_by_pid.get(pid)
            self._memo_ok = False
        key = (name or UNTAGGED, pid, ip)
        st = self.streams.get(key)
        if st is None:
            label = name or UNTAGGED
            sid = f"{self.input}:{label}:{pid if pid is not None else ''}"
            if ip:
                sid += f"@{ip}"
            st = Stream(sid, label, pid, role_of(name), ip, 0, self._retired.next_seq(key, sid))
            self.streams[key] = st
            if name and pid is not None and pid not in self.names_by_pid:
                names = self.names_by_pid
                if len(names) >= MAX_NAMED_PIDS:
                    # The oldest half goes: a pid named long ago that writes a nameless line
                    # (NCCL, a rank prefix) again is listed under no name.
                    for old in list(itertools.islice(names, len(names) // 2)):
                        del names[old]
                names[pid] = name
        return st

    def went_idle(self, streams: list[Stream], machines) -> None:
        """These streams lost their state machine. Once more than MAX_LIVE_STREAMS records are
        live, those among them still without one (`machines`: the rebuilder's, by stream id)
        retire."""
        if self._crowded:
            self.retire(streams)
            return
        idle = self._idle
        for st in streams:
            idle[st.id] = st
        if len(self.streams) > MAX_LIVE_STREAMS:
            # More processes than records kept: keeping some would not spare their returns a
            # new record, only cost memory; from now on idle ones retire at once.
            self._crowded = True
            self.retire([st for sid, st in idle.items() if sid not in machines])
            idle.clear()

    def retire_idle(self, machines, keep: int) -> None:
        """Past `keep` live records, every one without a state machine retires (all_streams()
        still lists them)."""
        if len(self.streams) > keep:
            self.retire([st for st in self.streams.values() if st.id not in machines])
            self._idle.clear()

    def retire(self, streams: list[Stream]) -> None:
        """Idle processes' stream records leave memory for the spool (a log with 100 K processes
        must not keep 100 K of them); one that writes again gets a new record, counted together
        with the old one in all_streams()."""
        for st in streams:
            if self.streams.get((st.name, st.pid, st.ip)) is st:
                del self.streams[(st.name, st.pid, st.ip)]
                self._retired.add(st)
        self._memo.clear()  # its parses hold retired records

    def forget_streams(self) -> None:
        """Drop every stream record (a splitter read only for its timestamps)."""
        self.streams.clear()
        self._idle.clear()
        self.names_by_pid.clear()
        self._memo.clear()

    def all_streams(self):
        """Every process stream of the input, in order of first appearance, live or retired."""
        return self._retired.merged_with(self.streams.values())

    def all_stream_records(self):
        """all_streams() as (id, name, pid, role, ip, lines, seq) tuples."""
        return self._retired.merged_records(self.streams.values())

    def split(self, lineno: int, offset: int, text: str) -> list[Line]:
        # Repeated lines (warnings, a crash loop's tracebacks, hostile runs of one line) parse
        # once: a plain line's parse depends only on its text and on the streams known so far.
        if len(text) > MAX_KEYED_TEXT:
            # Parsed each time: 4,096 kept lines of 256 KB each would hold a GB.
            lines = self._split(lineno, offset, masked(text))
            self._memo_ok = True
            return lines
        parsed = self._memo.get(text)
        if parsed is not None:
            parsed[0].lines += 1
            return [Line(lineno, offset, *parsed)]  # every field after the position, raw last
        shown = masked(text)  # a request's prompt is the user's text, not the server's
        if shown is text and text:
            # _plain_whole's shapes start with a tag, a colour code or a rank prefix, or else with
            # a container's time, which the stamped path may take instead.
            stamp = rfc3339_match(text) if text[0].isdigit() else None
            if stamp is not None:
                body = stamp.end()
                if text.startswith(_CRI_FIELDS, body):
                    body += _CRI_FIELD_LENGTH
                tag = _LEADING_TAG.match(text, body) if text.startswith(("(", "\x1b", "["), body) else None
                if tag is not None:
                    return self._stamped_tagged(lineno, offset, text, stamp, body, tag)
                if not text.startswith(("(", "\x1b"), stamp.end()):
                    return self._stamped(lineno, offset, text, stamp)
            if stamp is not None or text[0] in _PLAIN_FIRST:
                tag = _LEADING_TAG.match(text) if stamp is None else None
                if tag is not None:
                    return self._tagged(lineno, offset, text, tag)
                parsed = self._plain_whole(text)
                if parsed is not None:
                    self._memo.put(text, parsed)
                    return [Line(lineno, offset, *parsed)]
        return self._split_kept(lineno, offset, text, shown)

    def _split_kept(self, lineno: int, offset: int, text: str, shown: str | None = None) -> list[Line]:
        """_split, its parse kept by the whole text where it depends on nothing else."""
        shown = text if shown is None else shown
        lines = self._split(lineno, offset, shown)
        if len(lines) == 1 and lines[0].raw is shown and lines[0].kind != "json" and self._memo_ok:
            ln = lines[0]
            self._memo.put(text, (ln.stream, ln.payload, ln.kind, ln.level, ln.time, ln.src, ln.rank, ln.repeated,
                                  shown))
        self._memo_ok = True
        return lines

    def _tagged(self, lineno: int, offset: int, text: str, tag) -> list[Line]:
        """A line that starts with a process tag (Ray's with its node's ip) or a rank prefix: its
        parse is kept by the text after the tag (a round robin over 100 K processes parses each
        kind of line once), the stream taken from each line's own tag. Kept only where the
        parse's stream is the tag's: a tag inside the rest, or a pid's remembered name, decide
        it otherwise."""
        lead, _name, _pid, ip, rank = tag.groups()
        key = (_AFTER_TAG, lead, ip is not None, rank is None, text[tag.end():])
        # A line seen again is kept whole too, so that its next copies (one process's repeated line)
        # hit split()'s first lookup; a line seen once (its time differs) costs one entry only.
        kept = self._memo.get(key)
        if kept is not None:
            payload, kind, level, time, src, repeated = kept
            stream, rank = self._tag_stream(tag)
            self._memo.put(text, (stream, payload, kind, level, time, src, rank, repeated, text))
            return [Line(lineno, offset, stream, payload, kind, level, time, src, rank, repeated, text)]
        parsed = self._plain_whole(text) if ip is None else None
        if parsed is not None:
            stream, payload, kind, level, time, src, _rank, repeated, _raw = parsed
            self._memo.put(key, (payload, kind, level, time, src, repeated))
            return [Line(lineno, offset, *parsed)]
        lines = self._split(lineno, offset, text)
        if len(lines) == 1 and self._memo_ok and lines[0].raw is text and lines[0].kind != "json":
            ln = lines[0]
            if _stream_is_the_tags(ln, tag, key[-1]):
                self._memo.put(key, (ln.payload, ln.kind, ln.level, ln.time, ln.src, ln.repeated))
            else:
                self._memo.put(text, (ln.stream, ln.payload, ln.kind, ln.level, ln.time, ln.src, ln.rank,
                                      ln.repeated, text))
        self._memo_ok = True
        return lines

    def _tag_stream(self, tag) -> tuple[Stream, int | None]:
        """The stream a _LEADING_TAG match names (one more line of it), and its rank."""
        _lead, name, pid, ip, rank = tag.groups()
        if rank is None:
            stream = self.stream(intern(name), int(pid), ip)
        else:
            rank = int(rank)
            stream = self.stream(f"rank{rank}", None, None)
        stream.lines += 1
        return stream, rank

    def _stamped(self, lineno: int, offset: int, text: str, stamp) -> list[Line]:
        """A line behind a container runtime's time (`docker logs -t`): every line's text differs,
        but what follows the time repeats as often as in a log without it. Its parse is kept by
        that rest, with the time taken from each line's own stamp."""
        rest, ts = text[stamp.end():], stamp.group("ts")
        key = (_STAMPED, rest)
        kept = self._kept_line(key, lineno, offset, ts, text)
        if kept is not None:
            return kept
        lines = self._split(lineno, offset, text)
        if self._memo_ok and _stamp_is_only_wrapper(text, rest):
            self._keep_line(key, lines, ts, rest, text)
        self._memo_ok = True
        return lines

    def _stamped_tagged(self, lineno: int, offset: int, text: str, stamp, body: int, tag) -> list[Line]:
        """A stamped line (CRI's stream field after the time or not) whose `body` starts with a
        process tag or rank prefix, `tag`: kept by what follows the tag, with the line's own
        time and its tag's stream."""
        rest, ts = text[stamp.end():], stamp.group("ts")
        lead, _name, _pid, ip, rank = tag.groups()
        key = (_STAMPED, text[stamp.end():body], lead, ip is not None, rank is None, text[tag.end():])
        kept = self._kept_line(key, lineno, offset, ts, text, tag)
        if kept is not None:
            return kept
        parsed = self._plain_whole(text) if ip is None and text[body] in "(\x1b" else None
        if parsed is not None:
            lines = [Line(lineno, offset, *parsed)]  # (_plain_whole reads the stamp and CRI's field itself)
        else:
            lines = self._split(lineno, offset, text)
        if self._memo_ok and (parsed is not None or _stamp_is_only_wrapper(text, rest)):
            self._keep_line(key, lines, ts, rest, text, tag)
        self._memo_ok = True
        return lines

    def _kept_line(self, key: tuple, lineno: int, offset: int, time: str | None, raw: str,
                   tag=None) -> list[Line] | None:
        """The line kept under `key` by _keep_line, with this line's own time and raw text (and,
        kept by what follows `tag`, its stream)."""
        parsed = self._memo.get(key)
        if parsed is None:
            return None
        if tag is None:
            stream, payload, kind, level, kept_time, src, rank, repeated = parsed
            stream.lines += 1
        else:
            payload, kind, level, kept_time, src, repeated = parsed
            stream, rank = self._tag_stream(tag)
        return [Line(lineno, offset, stream, payload, kind, level, time if kept_time is _STAMPED else kept_time,
                     src, rank, repeated, raw)]

    def _keep_line(self, key: tuple, lines: list[Line], time: str | None, text: str, raw: str, tag=None) -> None:
        """Keep a one-line parse whose time is `time` (a stamp's, a record's: _STAMPED in the memo)
        unless `text` gave one of its own, which then stays. With `tag` (a _LEADING_TAG match in
        `raw`), kept without its stream, and only where the tag alone named it."""
        if len(lines) != 1:
            return
        ln = lines[0]
        if ln.raw is not raw or ln.kind == "json" or time is not None and ln.time == time and time in text:
            return  # (the time found in the text itself: which of the two it is cannot be told)
        kept_time = _STAMPED if time is not None and ln.time == time else ln.time
        if tag is None:
            self._memo.put(key, (ln.stream, ln.payload, ln.kind, ln.level, kept_time, ln.src, ln.rank, ln.repeated))
        elif _stream_is_the_tags(ln, tag, raw[tag.end():]):
            self._memo.put(key, (ln.payload, ln.kind, ln.level, kept_time, ln.src, ln.repeated))

    def _plain_whole(self, text: str) -> tuple | None:
        """What _split makes of a whole plain tagged line (_PLAIN_RECORD, _PLAIN_RAW,
        _PLAIN_RANKED), as the memo keeps it; None for every other line."""
        if text.endswith("`"):
            return None  # behind a container's time, a code fence glued to its end is taken off first
        m = _PLAIN_RECORD.fullmatch(text)
        if m is not None:
            _stamp, name, pid, level, time, src, msg = m.groups()
            if level != "INFO" and not first_level_word_at(text, m.start("level")) or "pid=" in msg \
                    or looks_joined(msg):
                return None  # (INFO is the first level word parse_header tries)
            stream = self.stream(intern(name), int(pid), None)
            stream.lines += 1
            return stream, msg, "vllm", level, time, src, None, None, text
        ranked = text.startswith("[")
        m = _PLAIN_RANKED.fullmatch(text) if ranked else _PLAIN_RAW.fullmatch(text)
        if m is None:
            return None
        rest = m.group("rest")
        stamp = None if ranked else m.group("ts")
        # _plain's second and third branches: no other tag after it, no header in what follows.
        if "pid=" in rest or rest.startswith("(") or _header_of(rest, stamp is not None) is not None \
                or looks_joined(rest):
            return None
        rank = None
        if ranked:
            rank = int(m.group("rank"))
            stream = self.stream(f"rank{rank}", None, None)
        else:
            stream = self.stream(intern(m.group("name")), int(m.group("pid")), None)
        stream.lines += 1
        return stream, rest, "raw", None, stamp, None, rank, None, text

    def _split(self, lineno: int, offset: int, text: str, raw: str | None = None,
               outer: dict | None = None) -> list[Line]:
        """`raw` and `outer`: a line inside a record (a docker json-file record's "log"), its
        record's raw text and facts (which win over those of the line's own wrappers)."""
        raw = text if raw is None else raw
        stripped = text.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            # A JSON record first: its backslashes are JSON's escapes (a spelled-out colour
            # code among them), its process tags and line ends are inside its strings.
            lines = self._json_record(lineno, offset, stripped, raw, dict(outer or {}))
            if lines is not None:
                return lines
        # Colour codes first: a reset code after a CR would otherwise look like the last frame.
        text = strip_ansi(text)
        if text.endswith("\r"):
            text = text.rstrip("\r")
        if text.endswith("^M"):  # a carriage return pasted as its caret notation
            text = text[:-2]
        if "\\" in text or "[]" in text or "](" in text:
            text = unescape_markdown(text)
        if "\r" in text:
            parts = [p for p in text.split("\r") if p.strip()]
            if not is_redraw(parts):
                # A lone CR that ends a line (old Mac line ends, CRLF/CR mixes): each part is a line.
                return [line for part in parts for line in self._again(lineno, offset, part, raw, outer)]
            # tqdm redraws: the last non-empty frame is what the terminal showed.
            text = parts[-1] if parts else ""
        if text.count("pid=") > 1:
            pieces = split_at_inner_tags(text)
            if len(pieces) > 1:
                # Lines whose newlines were lost but whose process tags were kept: each tag
                # starts a line again.
                return [line for piece in pieces for line in self._again(lineno, offset, piece, raw, outer)]
        text, facts = strip_outer(text)
        if outer:
            facts = {**facts, **outer}
        if text.startswith("^C") and len(text) > 2:
            # A terminal's echo of Ctrl-C, glued to what the process printed next (the
            # KeyboardInterrupt traceback's header): the echo is a line of its own.
            echo = self._plain(lineno, offset, "^C", raw, facts)
            rest = text[_CTRL_C_ECHO.match(text).end():]
            return [echo] + (self._unwrapped(lineno, offset, rest, raw, facts) if rest else [])
        return self._unwrapped(lineno, offset, text, raw, facts)

    def _again(self, lineno: int, offset: int, text: str, raw: str, outer: dict | None) -> list[Line]:
        """A piece of a line, split as a line of its own (inside a record: with its facts)."""
        if outer is None:
            return self.split(lineno, offset, text)
        return self._split(lineno, offset, text, raw, outer)

    def _unwrapped(self, lineno: int, offset: int, text: str, raw: str, facts: dict) -> list[Line]:
        stripped = text.lstrip()
        if stripped.startswith("{") and stripped.rstrip().endswith("}"):
            lines = self._json_record(lineno, offset, stripped, raw, facts)
            if lines is not None:
                return lines
        line = self._plain(lineno, offset, text, raw, facts)
        if looks_joined(line.payload):
            return self._rejoined(line)
        return [line]

    def _rejoined(self, line: Line) -> list[Line]:
        """A traceback pasted as one line: its lines again, all in the first one's record."""
        pieces = split_joined(line.payload)
        out = []
        for i, piece in enumerate(pieces):
            if i:
                line.stream.lines += 1
            out.append(Line(line.lineno, line.offset, line.stream, piece, line.kind, line.level, line.time,
                            line.src, line.rank, line.repeated, line.raw))
        return out or [line]

    def _plain(self, lineno: int, offset: int, text: str, raw: str, facts: dict) -> Line:
        m = _TAGGED.match(text)
        # The tag, then vLLM's header right after it: the common line, in two anchored matches
        # (one pattern for both made a raw traceback line behind a tag match its tag twice).
        h = VLLM_HEADER.match(text, m.end()) if m is not None else None
        if h is not None and not text.endswith("cluster]") and first_level_word_at(text, h.start("level")):
            # What strip_tags and parse_header make of it.
            stream = self.stream(intern(m.group("name")), int(m.group("pid")), None)
            stream.lines += 1
            # "MM-DD HH:MM:SS" and "file:line" are spans of the line as they stand (one space, one colon).
            return Line(lineno, offset, stream, text[h.end():], "vllm", h.group("level"),
                        text[h.start("md"):h.end("hms")], text[h.start("file"):h.end("line")], None, None, raw)
        if m is not None and not text.endswith("cluster]") and not text.startswith(("(", "[rank"), m.end()):
            # One tag, then no other tag or rank prefix: the header, if any, is the rest's.
            rest = text[m.end():]
            header = _header_of(rest, "timestamp" in facts)
            stream = self.stream(intern(m.group("name")), int(m.group("pid")), None)
            stream.lines += 1
            if header is None:
                return Line(lineno, offset, stream, rest, "raw", time=facts.get("timestamp"), raw=raw)
            return Line(lineno, offset, stream, rest[header.end:], header.kind, header.level,
                        header.time or facts.get("timestamp"), header.src, None, None, raw)
        m = _RANKED.match(text) if text.startswith("[rank") and not text.endswith("cluster]") else None
        if m is not None and not text.startswith(("(", "[rank"), m.end()):
            rest = text[m.end():]
            if _header_of(rest, "timestamp" in facts) is None:
                # Raw text of a rank (its traceback): what strip_tags and the rank's stream make of it.
                rank = int(m.group("rank"))
                stream = self.stream(f"rank{rank}", None, None)
                stream.lines += 1
                return Line(lineno, offset, stream, rest, "raw", time=facts.get("timestamp"), rank=rank, raw=raw)
        tag = Tag()
        text = strip_tags(text, tag)
        header = parse_header(text, after_timestamp="timestamp" in facts)
        if header is not None and header.kind == "vllm" and tag.pid is None:
            inner = find_inner_tag(text[: header.end])
            if inner is not None:
                tag.name, tag.pid = inner.group("name"), int(inner.group("pid"))
        # A torch rank prefix after the vLLM tag stays on the tag's stream.
        if header is None and text.startswith("[rank"):
            text = strip_tags(text, tag)
            header = parse_header(text, after_timestamp="timestamp" in facts)
        name, pid = tag.name, tag.pid
        if pid is None and header is not None and header.pid is not None:
            pid = header.pid  # NCCL lines carry the worker pid
        if name is None and pid is None and tag.rank is not None:
            name = f"rank{tag.rank}"
        stream = self.stream(name, pid, tag.ip)
        stream.lines += 1
        if header is None:
            return Line(lineno, offset, stream, text, "raw", time=facts.get("timestamp"),
                        rank=tag.rank, repeated=tag.repeated, raw=raw)
        return Line(lineno, offset, stream, text[header.end:], header.kind, header.level,
                    header.time or facts.get("timestamp"), header.src, tag.rank, tag.repeated, raw)

    def _record_line(self, lineno: int, offset: int, part: str, raw: str, facts: dict) -> list[Line]:
        """One line of a shipper's record, split as a line (`_split` with the record's facts).
        Records differ by their time, their lines repeat (a crash loop's tracebacks): a line's
        parse is kept by its text, the record's time put back in."""
        stamp = facts.get("timestamp")
        key = (_RECORD_LINE, part, stamp is None)
        kept = self._kept_line(key, lineno, offset, stamp, raw)
        if kept is not None:
            return kept
        memo_ok, self._memo_ok = self._memo_ok, True
        lines = self._split(lineno, offset, part, raw, facts)
        if self._memo_ok:
            self._keep_line(key, lines, stamp, part, raw)
        self._memo_ok = memo_ok and self._memo_ok
        return lines

    def _json_record(self, lineno: int, offset: int, text: str, raw: str, facts: dict) -> list[Line] | None:
        try:
            rec = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(rec, dict):
            return None
        # docker's json-file driver: the real line is inside "log"; a shipper's multiline parser
        # (fluent-bit, Vector) puts a whole traceback in one record, one line per "\n".
        # journald's JSON export and Cloud Logging's do the same in "MESSAGE" and "textPayload".
        output = _process_output(rec)
        if output is not None:
            text_of_lines, when = output
            facts = dict(facts)
            if when is not None:
                facts.setdefault("timestamp", when)
            out: list[Line] = []
            for part in text_of_lines.rstrip("\n").split("\n"):
                # Each line of the record is read as a line of its own (its wrappers, colour
                # codes, nested process tags, a ^C echo), with the record's time.
                for line in self._record_line(lineno, offset, part, raw, facts):
                    untagged = line.stream.name == UNTAGGED and line.stream.pid is None
                    if out and untagged and line.stream is not out[0].stream:
                        # An untagged continuation line belongs to the record's process.
                        line.stream.lines -= 1
                        if not line.stream.lines:
                            self.streams.pop((UNTAGGED, None, None), None)
                            self._memo.clear()
                        line.stream = out[0].stream
                        line.stream.lines += 1
                    out.append(line)
            return out
        message = rec.get("message", rec.get("msg"))
        if not isinstance(message, str):
            return None
        level = rec.get("levelname") or rec.get("level")
        level = str(level).upper() if level else None
        name = rec.get("processName")
        pid = rec.get("process")
        pid = pid if isinstance(pid, int) else None
        name = name if isinstance(name, str) else None
        tag = Tag()
        message = strip_tags(message, tag)  # 0.10.1–0.30 wrap JSON in a tag; some put it inside
        stream = self.stream(tag.name or name, tag.pid or pid)
        when = rec.get("asctime") or rec.get("timestamp") or rec.get("time") or facts.get("timestamp")
        when = str(when) if when is not None else None
        src = f"{rec.get('filename', rec.get('name', 'json'))}:{rec.get('lineno', lineno)}"
        out: list[Line] = []
        body = message.split("\n")
        exc = rec.get("exc_info") or rec.get("exc_text") or rec.get("stack_info")
        if isinstance(exc, str) and exc:
            body += exc.rstrip("\n").split("\n")
        for part in body:
            stream.lines += 1
            out.append(Line(lineno, offset, stream, part.rstrip("\r"), "json", level, when, src, raw=raw))
        return out


__all__ = ["Line", "Splitter", "Stream", "Header", "UNTAGGED"]

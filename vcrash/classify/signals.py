"""What single lines tell, outside tracebacks: the vLLM version, server restarts (epochs),
liveness signals (progress vs stall) and evidence events for line rules."""

from __future__ import annotations

import bisect
import re
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from vcrash.literals import LiteralGate
from vcrash.memo import MAX_KEYED_TEXT, Memo
from vcrash.split import Line

VERSION_PATTERNS = [
    re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v(?P<v>[^)\s]+)\)"),
    re.compile(r"vLLM API server version (?P<v>\d[^\s,]*)"),
    re.compile(r"vLLM server version (?P<v>\d[^\s,]*), serving model"),
    re.compile(r"Dumping input data for V1 LLM engine \(v(?P<v>[^)\s]+)\)"),
    re.compile(r"^\s*[\W_]*\s*version\s+(?P<v>\d+\.\d+\.\d+\S*)\s*[\W_]*$"),  # 0.16+ ASCII banner
]
VERSION_TOKENS = ("version", "LLM engine (v")
STARTUP_MARKERS = re.compile(
    r"vLLM API server version|vLLM server version|Initializing an? (?:V[01] )?LLM engine|Started server process"
)

METRICS = re.compile(
    r"Avg prompt throughput: (?P<pt>[\d.]+) tokens/s, Avg generation throughput: (?P<gt>[\d.]+) tokens/s, "
    r"Running: (?P<run>\d+) reqs"
)
# Not uvicorn's access line: it is written when a response starts, and a streaming response
# starts (200) before the engine produced anything; nor "Added request": arrivals go on during a hang.
PROGRESS = re.compile(
    r"Loading weights took|Loading safetensors checkpoint shards|Loading pt checkpoint shards|Model loading took|"
    r"Starting to load model|Memory profiling takes|torch\.compile takes|Compiling a graph|Compil(?:ation|ing) .*took|"
    r"Capturing CUDA graph|Graph capturing finished|init engine .*took|Dynamo bytecode transform time|"
    r"Finished request|\bstep \d+|batch \d+ done|Prefill|Decod(?:e|ing) step|"
    r"Application startup complete"
)
STALL = re.compile(r"No available (?:shared memory broadcast )?block found in (?P<s>\d+) seconds?")
LIVENESS_TOKENS = ("throughput:", "block found in", "Loading", "took", "takes", "Capturing", "Compil")
# Cheap substring gate in front of PROGRESS (an alternation is slow to search on every line).
# Each PROGRESS alternative holds one of these ("Finished request", not "request": every request
# log line has that, and the alternation cost 27 us on each).
_PROGRESS_GATE = ("Load", "took", "takes", "Compil", "Capturing", "apturing", "Dynamo", "Finished request", "step ",
                  "batch ", "Prefill", "Decod", "Starting to load", "startup complete")

# Server lifecycle moments for the timeline (first of each kind per server run).
LIFECYCLE = [
    ("server-start", re.compile(r"vLLM API server version|vLLM server version|Started server process")),
    ("engine-init", re.compile(r"Initializing an? (?:V[01] )?LLM engine")),
    ("ready", re.compile(r"Application startup complete")),
    ("http-500", re.compile(r'" 500 Internal Server Error')),
    ("shutdown", re.compile(r"^Shutting down$|Shutting down FastAPI|Finished server process|"
                            r"Parent process exited|WorkerProc shutting down")),
]
_LIFECYCLE_GATE = ("version", "Started server", "LLM engine", "startup complete", " 500 ", "Shutting down",
                   "Finished server", "Parent process exited", "WorkerProc shutting")
MAX_LIFECYCLE = 100
# The API server's port: what the logs of one server run share besides time and pids. vLLM's
# "Starting vLLM API server 0 on http://0.0.0.0:8000", uvicorn's "Uvicorn running on http://…",
# the non-default args line ('port': 8001), an old Namespace(… port=8001 …) and an echoed argv.
PORT_PATTERNS = [
    re.compile(r"(?:API server(?: \d+)?|Uvicorn running) on https?://(?:\[[^\]]*\]|[^\s/\[\]]+?):(?P<p>\d{1,5})\b"),
    re.compile(r"non-default args: \{.*?'port': (?P<p>\d{1,5})\b"),
    re.compile(r"Namespace\(.*?[(,] ?port=(?P<p>\d{1,5})\b"),
    re.compile(r"(?:^|\s)--port[= ](?P<p>\d{1,5})\b"),
]
PORT_TOKENS = (" on http", "'port': ", "Namespace(", "--port")
# An operator asked the server to stop: EngineDeadError and engine-exit lines after this, with
# no root cause before it, are teardown noise (0.32.0 logs both on a plain SIGTERM).
# A batch scheduler ending the job (Slurm's time limit or scancel) is a stop from outside too, and
# vLLM's SIGTERM handler raises KeyboardInterrupt("terminated"); so is a terminal's "^C" echo.
VOLUNTARY_STOP = re.compile(r"\[shutdown\] API server: shutdown triggered|received signal=SIG(?:TERM|INT)\b|"
                            r"Received (?:SIGTERM|SIGINT)|Received signal (?:15|2)\b|^KeyboardInterrupt(?:: terminated)?$|"
                            r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+|^\^C$")
# A logger record can stay open until IDLE_LINES lines of other processes have passed (the
# rebuilder's idle flush), and its timeout is judged when it closes: the ring must hold those
# lines' signals plus the history before the crash.
MAX_SIGNALS = 15000
SIGNAL_TEXT = 300  # what a signal keeps of its line's text


@dataclass(slots=True)
class Signal:
    line: int
    stream_id: str
    role: str
    time: str | None  # the line's timestamp, or the latest one seen before it
    kind: str  # progress | stall
    text: str
    dated: str = "line"  # line (its own timestamp) | before (the last one before it) | bar (its own fields)
    bar_base: str | None = None  # a bar: the timestamp before its first frame (its start)
    bar_elapsed: float = 0.0  # a bar: its elapsed field
    # A metrics line: its prompt throughput (tokens/s), when its text holds the whole metrics
    # match (the liveness verdicts take the best of a window's: parsed once, here).
    prompt_rate: float | None = None


# A progress bar's fields: "Loading safetensors checkpoint shards:  96% Completed | 156/163
# [09:22<00:38, 3.60s/it]" (tqdm and vLLM's own bars: weights, graph capture, compile, download).
BAR = re.compile(r"(?P<label>[^\[\]]{0,120}?):?\s*(?P<pct>\d{1,3})%[^\[]{0,200}\[(?P<el>(?:\d+:)?\d{1,2}:\d\d)"
                 r"<(?P<rem>(?:\d+:)?\d{1,2}:\d\d|\?)")
# Durations the log measured itself: what a start-up deadline has to cover.
DURATIONS = [
    ("weight loading", re.compile(r"Loading weights took (?P<s>\d+(?:\.\d+)?) ?s")),
    ("weight loading", re.compile(r"Model loading took [\d.]+ ?GiB and (?P<s>\d+(?:\.\d+)?) ?s")),
    ("torch.compile", re.compile(r"torch\.compile takes? (?P<s>\d+(?:\.\d+)?) ?s")),
    ("torch.compile", re.compile(r"Compil(?:ation|ing) .{0,60}took (?P<s>\d+(?:\.\d+)?) ?s")),
    ("graph capture", re.compile(r"Graph capturing finished in (?P<s>\d+(?:\.\d+)?) ?s")),
    ("memory profiling", re.compile(r"Memory profiling takes (?P<s>\d+(?:\.\d+)?) ?s")),
    ("engine init", re.compile(r"init engine .{0,80}took (?P<s>\d+(?:\.\d+)?) ?s")),
]
# Where start-up had got to: the weights loaded, the memory profile begun, CUDA graph capture
# begun (an OOM that names no phase of its own happened in the last one reached).
STARTUP_PHASES = [
    ("weights loaded", re.compile(r"Loading (?:model )?weights took|Model loading took")),
    ("memory profiling", re.compile(r"\b[Pp]rofil(?:ing|e run)\b")),
    ("graph capture", re.compile(r"Capturing (?:cudagraphs|CUDA graphs?|the model for CUDA graphs|CUDA graph shapes)")),
]
# How big the work in flight was: the scheduler dump and request logs.
PROMPT_SIZE = re.compile(r"prompt_token_ids_len=(?P<n>\d+)|num_prompt_tokens=(?P<m>\d+)|"
                         r"(?:input|prompt) (?:tokens|length)[=:] ?(?P<k>\d+)")
# The literal each PROMPT_SIZE alternative starts with (request logs hold "max_tokens=" and
# "truncate_prompt_tokens=" in every line, which a looser gate let through to the regex).
_PROMPT_SIZE_GATE = ("prompt_token_ids_len=", "num_prompt_tokens=", "input tokens", "prompt tokens", "input length",
                     "prompt length")


def _any_in(tokens: tuple[str, ...]):
    """A substring gate as one search: `any(t in text for t in tokens)` without a generator per
    line (the observer sees every line; this is about twice as fast)."""
    return re.compile("|".join(re.escape(t) for t in tokens)).search


def bar_seconds(field: str) -> float:
    parts = [int(p) for p in field.split(":")]
    total = 0
    for p in parts:
        total = total * 60 + p
    return float(total)


@lru_cache(maxsize=4096)
def parse_time(text: str | None, year_hint: int | None = None) -> float | None:
    """Seconds since the epoch for vLLM's "MM-DD HH:MM:SS" (year inferred) or ISO timestamps."""
    if not text:
        return None
    try:
        if len(text) == 14 and text[2] == "-" and text[5] == " ":
            # vLLM's "MM-DD HH:MM:SS": sliced by hand, strptime is ten times slower.
            return datetime(year_hint or 2000, int(text[0:2]), int(text[3:5]), int(text[6:8]), int(text[9:11]),
                            int(text[12:14])).timestamp()
        iso = text.replace(",", ".").rstrip("Z")
        if "." in iso:
            head, frac = iso.split(".", 1)
            digits = "".join(ch for ch in frac if ch.isdigit())[:6]
            tz = frac[len("".join(ch for ch in frac if ch.isdigit())):]
            iso = f"{head}.{digits}{tz}" if digits else f"{head}{tz}"
        return datetime.fromisoformat(iso.replace(" ", "T", 1)).timestamp()
    except (ValueError, OverflowError):
        return None


_lifecycle_gate = _any_in(_LIFECYCLE_GATE)
_progress_gate = _any_in(_PROGRESS_GATE)
_port_gate = _any_in(PORT_TOKENS)
_prompt_size_gate = _any_in(_PROMPT_SIZE_GATE)


def _may_hold_a_fact(text: str) -> bool:
    """False only for a payload none of observe()'s gates would open (a pure function of the
    text, so the verdict can be remembered). True may also mean "look closer": the test is for
    any of the gates' literals, a superset of the gates (tests/test_literals.py checks)."""
    return _fact_gate(text)


# Every literal that can open one of observe()'s gates (STARTUP_MARKERS' alternatives each
# hold "version", "LLM engine" or "Started server process"; "%" stands for "%" and "<").
FACT_TOKENS = (*VERSION_TOKENS, "LLM engine", "Started server process", *_LIFECYCLE_GATE, *PORT_TOKENS, "shutdown",
               "SIG", "signal", "KeyboardInterrupt", "CANCELLED", "^C", "took", "takes", "finished in", "apturing", "rofil", *_PROMPT_SIZE_GATE,
               "throughput:", "block found in", *_PROGRESS_GATE, "%")
_fact_gate = LiteralGate(FACT_TOKENS)


def _new_year(month_before: int, month: int) -> bool:
    """Months that went back half a year or more: the log crossed 12-31 -> 01-01."""
    return month < month_before and month_before - month >= 6


class LineObserver:
    """Collects per-input facts from lines, bounded in memory whatever the log size."""

    def __init__(self):
        self.versions: list[str] = []
        self._year_offset = 0
        self.epoch_start: dict[int, tuple[str, int]] = {}  # epoch -> its first timestamp and line
        self._last_month: int | None = None
        self._last_stamped = 0  # the line of the last timestamp ticked
        # (first line, year offset, the line ticked before it, its month) for MM-DD stamps
        self.year_changes: list[tuple[int, int, int, int]] = []
        self._bars: dict[tuple[str, str], tuple[str, float]] = {}  # (stream, label) -> (start, last elapsed)
        # (run, what) -> (seconds, line) of the slowest (every rank logs its own): one entry per
        # start-up phase, where a list of every such line grew with the log.
        self.durations: dict[tuple[int, str], tuple[float, int]] = {}
        self.prompt_sizes: list[tuple[int, int]] = []  # (tokens, line)
        self.timestamped = 0  # lines with a timestamp of their own
        self.epoch = 0
        self.epoch_of_line: list[tuple[int, int]] = []  # (first line, epoch)
        self.signals: deque[Signal] = deque(maxlen=MAX_SIGNALS)
        self._progress_lines: list[int] = []  # progress signals' lines, as of the signal below
        self._progress_lines_of: Signal | None = None
        self._crash_seen_in_epoch = False
        self.lifecycle: list[dict] = []
        self.phase_starts: dict[tuple[int, str], int] = {}  # (epoch, start-up phase) -> its first line
        self.stop_requested: dict[int, int] = {}  # epoch -> first line of a voluntary stop
        self._lifecycle_seen: set[tuple[int, str]] = set()
        self.ports: dict[int, set[int]] = {}  # epoch -> the API ports this run's lines name
        self._clock: str | None = None  # latest timestamp seen; raw lines (tqdm) have none
        self.year: int | None = None  # from the first full timestamp (wrappers, Python logging)
        self._inert: Memo[bool] = Memo()  # recent payloads that hold no fact (repeated lines skip the gates)

    @property
    def clock(self) -> str | None:
        """The latest timestamp seen."""
        return self._clock

    def mark_crash(self) -> None:
        self._crash_seen_in_epoch = True

    def seconds(self, text: str | None, lineno: int | None = None) -> float | None:
        """A timestamp in seconds; vLLM's year-less MM-DD gets the year of the log, moved on
        where the log crossed 12-31 -> 01-01 before `lineno`."""
        if not text:
            return None
        offset = 0
        if len(text) == 14 and text[2] == "-":
            for first, value, before, month_before in self.year_changes:
                if lineno is None or first <= lineno:
                    offset = value
                    continue
                if before < lineno and text[:2].isdigit() and _new_year(month_before, int(text[:2])):
                    # Between the last line ticked in the old year and the first ticked in the
                    # new one (the bulk scan skips the lines in between, and a window read back
                    # dates its own): the line's month says which side it is on.
                    offset = value
                break
        return parse_time(text, (self.year or 2000) + offset)

    def signal_seconds(self, s: Signal) -> float | None:
        """When a signal happened: its line's time, or for a bar its start plus its elapsed field
        (never before the last timestamp seen before it)."""
        t = self.seconds(s.time, s.line)
        if s.dated == "bar" and s.bar_base is not None:
            start = self.seconds(s.bar_base, s.line)
            if start is not None:
                t = max(start + s.bar_elapsed, t if t is not None else start)
        return t

    def _tick(self, line: Line) -> None:
        t = line.time
        if len(t) == 14 and t[2] == "-" and t[:2].isdigit():
            month = int(t[:2])
            if self._last_month is not None and _new_year(self._last_month, month):
                self._year_offset += 1  # 12-31 -> 01-01
                self.year_changes.append((line.lineno, self._year_offset, self._last_stamped, self._last_month))
            self._last_month = month
            self._last_stamped = line.lineno
        self.timestamped += 1
        self.epoch_start.setdefault(self.epoch, (t, line.lineno))

    def clock_from(self, line: Line) -> None:
        """A timestamp from a line the fast path skipped: the clock moves, nothing else."""
        self._clock = line.time

    def observe(self, line: Line) -> None:
        text = line.payload
        if line.time:
            self._clock = line.time
            if self.year is None and len(line.time) >= 10 and line.time[4] == "-" and line.time[:4].isdigit():
                self.year = int(line.time[:4])
            self._tick(line)
        if text in self._inert:
            return
        if not _may_hold_a_fact(text):
            if len(text) <= MAX_KEYED_TEXT:  # a memo of long lines would hold their text
                self._inert.put(text, True)
            return
        if "version" in text or "LLM engine (v" in text:
            for pattern in VERSION_PATTERNS:
                m = pattern.search(text)
                if m:
                    version = m.group("v").lstrip("v")
                    if version not in self.versions:
                        self.versions.append(version)
                    break
        if self._crash_seen_in_epoch and STARTUP_MARKERS.search(text):
            self.epoch += 1
            self.epoch_of_line.append((line.lineno, self.epoch))
            self._crash_seen_in_epoch = False
            if line.time:
                # The run starts with its start-up line (always read), not with the next line
                # that has a time (which the bulk scan may skip).
                self.epoch_start[self.epoch] = (line.time, line.lineno)
        if len(self.lifecycle) < MAX_LIFECYCLE and _lifecycle_gate(text):
            for label, pattern in LIFECYCLE:
                if (self.epoch, label) not in self._lifecycle_seen and pattern.search(text):
                    self._lifecycle_seen.add((self.epoch, label))
                    self.lifecycle.append({"line": line.lineno, "time": line.time or self._clock,
                                           "stream": line.stream.id, "role": line.stream.role,
                                           "kind": label, "text": text[:300]})
                    break
        if _port_gate(text):
            for pattern in PORT_PATTERNS:
                m = pattern.search(text)
                if m and 0 < int(m.group("p")) < 65536:
                    self.ports.setdefault(self.epoch, set()).add(int(m.group("p")))
                    break
        if self.epoch not in self.stop_requested and ("shutdown" in text or "SIG" in text or "signal" in text
                                                      or "KeyboardInterrupt" in text or "CANCELLED" in text
                                                      or text == "^C"):
            if VOLUNTARY_STOP.search(text):
                self.stop_requested[self.epoch] = line.lineno
        if "apturing" in text or "rofil" in text or "took" in text:
            for phase, pattern in STARTUP_PHASES:
                if (self.epoch, phase) not in self.phase_starts and pattern.search(text):
                    self.phase_starts[(self.epoch, phase)] = line.lineno
        if "took" in text or "takes" in text or "finished in" in text:
            for what, pattern in DURATIONS:
                m = pattern.search(text)
                if m:
                    secs, best = float(m.group("s")), self.durations.get((self.epoch, what))
                    if best is None or secs > best[0]:
                        self.durations[(self.epoch, what)] = (secs, line.lineno)
                    break
        if _prompt_size_gate(text) and len(self.prompt_sizes) < 10000:
            for m in PROMPT_SIZE.finditer(text):
                n = int(next(g for g in m.groups() if g))
                self.prompt_sizes.append((n, line.lineno))
        self._signals_of(line, text)

    def observe_signals(self, line: Line) -> bool:
        """observe()'s liveness signals alone, the same ones (what a window read back keeps):
        none of the other facts, and none of their gates, on every metrics line of the window.
        True when the line made one."""
        if line.time:
            self._clock = line.time
        return self._signals_of(line, line.payload)

    def _signals_of(self, line: Line, text: str) -> bool:
        # Every branch needs a FACT_TOKENS literal, so observe()'s inert lines make none.
        if "throughput:" in text:
            m = METRICS.search(text)
            if m:
                rate = float(m.group("pt"))
                if rate > 0 or float(m.group("gt")) > 0:
                    self._signal(line, "progress", text)
                elif int(m.group("run")) > 0:
                    self._signal(line, "stall", text)
                else:
                    return False
                if m.end() <= SIGNAL_TEXT:
                    self.signals[-1].prompt_rate = rate
                return True
        if "block found in" in text and STALL.search(text):
            self._signal(line, "stall", text)
        elif _progress_gate(text) and PROGRESS.search(text):
            self._signal(line, "progress", text)
        elif "%" in text and "<" in text and BAR.search(text):
            self._signal(line, "progress", text)  # any other progress bar (downloads, compile)
        else:
            return False
        return True

    def _signal(self, line: Line, kind: str, text: str) -> None:
        sig = Signal(line.lineno, line.stream.id, line.stream.role, line.time or self._clock, kind, text[:SIGNAL_TEXT],
                     "line" if line.time else "before")
        if not line.time and "%" in text and self._clock is not None:
            self._date_bar(sig, line, text)
        self.signals.append(sig)

    def _date_bar(self, sig: Signal, line: Line, text: str) -> None:
        """A bar line without a timestamp of its own is dated by the bar: its start (the last
        timestamp before its first frame) plus its elapsed field."""
        m = BAR.search(text)
        if m is None:
            return
        elapsed = bar_seconds(m.group("el"))
        key = (line.stream.id, m.group("label").strip())
        start, last = self._bars.get(key, (None, None))
        if start is None or last is None or elapsed < last:
            start = self._clock  # a new bar (or the same one drawn again from zero)
        self._bars[key] = (start, elapsed)
        if len(self._bars) > 256:
            self._bars.pop(next(iter(self._bars)))
        sig.dated, sig.bar_base, sig.bar_elapsed = "bar", start, elapsed

    def progress_after(self, lineno: int) -> bool:
        """Did work visibly go on after this line, in the same server run (a hang indicator
        that resolved, not a restart after it)?"""
        # Runs only go forward, so a progress line of this run after the line exists when the
        # first progress line after it is of this run. Found by bisection: 400 K processes'
        # hang warnings each walked the signals back.
        signals = self.signals
        if self._progress_lines_of is not (signals[-1] if signals else None):
            self._progress_lines = [s.line for s in signals if s.kind == "progress"]
            self._progress_lines_of = signals[-1] if signals else None
        lines = self._progress_lines
        i = bisect.bisect_right(lines, lineno)
        return i < len(lines) and self.epoch_at(lines[i]) == self.epoch_at(lineno)

    def epoch_at(self, lineno: int) -> int:
        # Lines arrive in order, so the starts are sorted: a crash loop of thousands of restarts
        # made the walk through them quadratic.
        i = bisect.bisect_right(self.epoch_of_line, (lineno, float("inf")))
        return self.epoch_of_line[i - 1][1] if i else 0

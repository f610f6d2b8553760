"""The pipeline, left to right: read -> split -> rebuild -> classify -> report object.

`InputAnalysis` consumes one input line by line (so follow mode can drive it incrementally);
`analyze()` runs it over every source and builds the single report object.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import re
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from vcrash import scan_ahead
from vcrash.checkpoints import Checkpoints
from vcrash.classify.diagnose import (Diagnosis, MatchedTraceback, RunLinks, attach_symptoms, build_diagnoses,
                                      version_advice)
from vcrash.classify.liveness import assess_liveness, window_seconds
from vcrash.classify.match import HANDLED_CONTEXT, Matcher
from vcrash.classify.matches import Matches
from vcrash.classify.rules import PHASES, Rule, RulePack
from vcrash.classify.signals import LIVENESS_TOKENS, MAX_LIFECYCLE, LineObserver
from vcrash.read import (InputError, Source, TruncatedInput, chunks_in, iter_chunks, iter_lines, needle_lines,
                         normalize_newlines, open_binary, remote_url)
from vcrash.rebuild import grammar as g
from vcrash.rebuild.model import Event, Traceback, TracebackBase
from vcrash.rebuild.store import TracebacksView
from vcrash.rebuild import stream as rebuild_stream
from vcrash.rebuild.stream import Rebuilder
from vcrash.report.model import InputSummary, Report
from vcrash.reread import WindowReader
from vcrash.split import CONTAINER_TIME, UNTAGGED, Splitter, Stream
from vcrash.split.headers import ERROR_HEADER_NEEDLES
from vcrash.split.retired import StreamsView
from vcrash.split.reflow import SNIFF_LINES, needs_mending, unwrap_hard_wraps

# Every input takes the bulk scan, which gives the same report as the per-line path
# (tests/test_fast_path.py, bench/fast_vs_full.py) apart from the per-process line counts.
# The first FULL_PREFIX_LINES lines are read: the start-up region names every process (pids
# link the logs of one server run across inputs). In an input of CENSUS_MIN_BYTES or more, those
# the bulk scan would skip only go through the splitter (a census); a paste is read in full.
FULL_PREFIX_LINES = 300
CENSUS_MIN_BYTES = 1 << 20
CENSUS_TAG_REACH = 120  # a process tag closes within a line's first bytes (behind colour codes)
_CONTAINER_STAMP = re.compile(CONTAINER_TIME)
# The splitter that reads skipped lines only for their timestamps forgets its streams past this.
CLOCK_SPLITTER_STREAMS = 4096
# Needles that can start or continue something interesting: traceback and faulthandler heads
# ("most recent call"), error records, exception lines, C++ aborts. Not WARNING: a warning that
# matters carries a rule's or a signal's own token, and 5% warning traffic would otherwise send
# every one of them through the per-line path.
BASE_NEEDLES = (b"most recent call", b"ERROR", b"Error", b"CRITICAL", b"terminate called",
                b"Fatal Python", b"Exception", b"version",
                # a requested stop (what is logged after it is teardown, not a crash)
                b"shutdown", b"SIGTERM", b"SIGINT", b"signal", b"KeyboardInterrupt",
                # where a traceback's tail can start when its head was cut off
                b'File "', b"raise ", b"^^^",
                # progress bars (liveness) and request sizes (deadline sizing)
                b"it/s]", b"s/it]", b"B/s]", b"num_prompt_tokens=", b"token_ids_len=")
MAX_TIMELINE = 200
MAX_EVENT_STREAMS = 64  # streams with an event of their own per rule, server run and role


@dataclass
class Options:
    fast: bool | None = None  # None: the bulk scan unless the input is a hard-wrapped paste
    year: int | None = None  # for vLLM's year-less timestamps when the log has no full one
    # Rule selectors (ids or dash-cut prefixes, see vcrash.config): findings of rules left out
    # are dropped from the report; the rules still match, so their evidence is not re-read as
    # a crash no rule knows.
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()


@dataclass
class InputAnalysis:
    """All per-input state; feed() takes raw lines in order."""

    index: int
    name: str
    matcher: Matcher
    splitter: Splitter = field(init=False)
    rebuilder: Rebuilder = field(init=False)
    observer: LineObserver = field(init=False)
    matched: Matches = field(init=False)  # replaced ones too: see live_matches()
    replaced: dict[int, TracebackBase] = field(default_factory=dict)  # id -> a traceback a copy replaced
    # Census: the stream of each process tag seen, and the census lines since the last read line
    # whose time is not taken yet.
    _census_tags: dict[str, Stream] = field(default_factory=dict)
    census_untimed: list[tuple[int, int, str]] = field(default_factory=list)
    events: dict[tuple[str, str], list] = field(default_factory=dict)  # (rule, stream) -> [Event, rule, epoch, count]
    # (rule, server run, role) -> the keys of its first MAX_EVENT_STREAMS streams' events
    _event_groups: dict[tuple[str, int, str], list] = field(default_factory=dict)
    tb_heads: int = 0
    # The input's last line number, once read to its end: an exception line there may have
    # been cut mid-message (a truncated paste).
    last_line: int | None = None
    _at_end: bool = False
    # Hang indicators that work resumed after, found by re-reading the metrics lines the bulk
    # scan skipped (id of the Event).
    recovered: set[int] = field(default_factory=set)
    # The first error lines outside tracebacks: the finding of last resort when nothing else is.
    error_lines: list[Event] = field(default_factory=list)
    # The signals as they stood when a timeout was matched: a long log's later lines must not
    # push its evidence out of the bounded buffer.
    liveness_signals: dict[int, list] = field(default_factory=dict)
    # On the fast path, the observer's signals with the metrics lines read back after each
    # timeout (None: the observer's own): what the verdicts read for the progress after it.
    after_signals: list | None = None
    _signals_copy: tuple | None = None  # (count, last signal, the list) of the last copy made
    # Where the log's clock moved, on the fast path: where to re-read the
    # window before a timeout to collect the metrics lines the bulk scan skipped.
    checkpoints: Checkpoints | None = None
    _cut_candidate: object = None  # the last line fed, when it was an unmatched error line outside tracebacks
    resume_points: list | None = None  # a gzip file's (vcrash/gunzip.py): where its re-reads start
    window_reader: WindowReader | None = None  # the re-reads' stream, open from window to window
    scan_ahead: object = None  # scan_ahead.ScanAhead, while its process can read a window's half
    # Windows before a timeout asked of the scan-ahead process as soon as the timeout was found,
    # read there while this process goes on with the pass: (start, end) -> the request's number.
    early_windows: dict[tuple, int] = field(default_factory=dict)
    # Those not asked yet: (traceback position, its start line, window) while a region that
    # started before the traceback is still open (an earlier-starting copy may replace it).
    _planned_windows: list[tuple] = field(default_factory=list)
    _focus_version: int = -1  # the rebuilder's open_version that _focus_value was made for
    _focus_value: tuple[bytes, ...] | None = None

    def __post_init__(self):
        self.splitter = Splitter(self.name)
        self._clock_splitter = Splitter(self.name)  # parses skipped lines' timestamps only
        self.rebuilder = Rebuilder(self.name)
        self.matched = Matches(self.rebuilder.tracebacks, self.rebuilder.replacements)
        self.rebuilder.on_traceback = self._on_traceback
        self.rebuilder.epoch_of = lambda line: self.observer.epoch_at(line)
        self.rebuilder.on_replace = self._on_replace
        self.rebuilder.on_evict = lambda streams: self.splitter.went_idle(streams, self.rebuilder.machines)
        self.observer = LineObserver()

    def set_clock(self, text: str) -> None:
        """Fast path: a skipped line's timestamp, so that lines without one of their own get the
        time they would have on the per-line path."""
        clock_splitter = self._clock_splitter
        if len(clock_splitter.streams) > CLOCK_SPLITTER_STREAMS:
            clock_splitter.forget_streams()  # never reported: only its times are read
        for line in clock_splitter.split(0, 0, text):
            if line.time:
                self.rebuilder.clock = line.time
                self.observer.clock_from(line)

    def feed(self, lineno: int, offset: int, text: str, context: bool = False) -> None:
        """One raw line. `context`: the fast path read it only as a possible context line of the
        traceback that starts right after it; it goes to the rebuilder, not to the observer."""
        rebuilder, observer, checkpoints = self.rebuilder, self.observer, self.checkpoints
        last_unmatched = None
        for line in self.splitter.split(lineno, offset, text):
            last_unmatched = None
            payload = line.payload
            # A log message that ends in a traceback's header ("…: <error>, Traceback (most recent
            # call last):"): its message is read as a log line's although it opens a region.
            headed_message = False
            if "most recent call last" in payload:
                bare = g.TB_HEAD.match(payload) is not None
                headed_message = not bare and g.embedded_tb_head(payload) is not None
                if bare or headed_message:
                    self.tb_heads += 1
                    observer.mark_crash()  # a later start-up line begins a new server run
            rebuilder.feed(line)
            if self._planned_windows:
                self.ask_planned_windows()
            if checkpoints is not None and line.time:
                checkpoints.note(lineno, offset, line.time)
            if context:
                if line.time:
                    observer.clock_from(line)  # its time still moves the clock
                continue
            observer.observe(line)
            if self.matcher.line_rules:
                for rule in self.matcher.match_line(line):
                    # A traceback rule named by the line pattern of one of its signatures: that
                    # pattern was written for this very line.
                    self._event(line, rule, None, line_pattern=not rule.is_line_rule)
            if headed_message or not rebuilder.in_region(line.stream.id):
                # Outside any traceback: the message of a failure logged as a line.
                hits = self.matcher.match_message_line(line)
                for rule, implied, how in hits:
                    self._event(line, rule, implied, line_pattern=how == "line")
                if not hits and line.level in (None, "ERROR", "CRITICAL"):
                    last_unmatched = line  # if the input ends here, its message may be cut
                if len(self.error_lines) < MAX_ERROR_LINES and is_error_line(line):
                    self.observer.mark_crash()
                    self.error_lines.append(Event(self.name, line.stream.id, line.stream.role, line.lineno,
                                                  line.payload[:500], line.time, line.level, offset=line.offset))
        self._cut_candidate = last_unmatched

    def census(self, lineno: int, offset: int, text: str) -> None:
        """Fast path, a start-up line that holds no needle: the bulk scan would skip it, so only
        its process is listed (pids tie the logs of one run together) and its time taken. A
        line of a process already listed (same tag) is counted, and its time read only if the
        next line read needs it."""
        self.rebuilder.skip(1)
        end = text.find(")", 0, CENSUS_TAG_REACH)
        # A container runtime's time before the tag is no part of it (every line's differs).
        stamp = _CONTAINER_STAMP.match(text)
        start = stamp.end() if stamp is not None else 0
        tag = text[start:end + 1] if end > start and "pid=" in text[start:end] and "\r" not in text else None
        stream = self._census_tags.get(tag) if tag is not None else None
        if stream is not None and self.splitter.streams.get((stream.name, stream.pid, stream.ip)) is stream \
                and text.count("pid=") == 1:
            stream.lines += 1
            self.census_untimed.append((lineno, offset, text))
            return
        if self.census_untimed:
            self.census_time()  # older than this line: this line's own time, if any, comes after
        lines = self.splitter.split(lineno, offset, text)
        if tag is not None and len(lines) == 1 and lines[0].stream.name != UNTAGGED:
            if len(self._census_tags) >= CLOCK_SPLITTER_STREAMS:
                self._census_tags.clear()  # a cache: 100 K processes' start-up lines must not keep 100 K streams
            self._census_tags[tag] = lines[0].stream
        for line in lines:
            if line.time:
                self._census_clock(lineno, offset, line)

    def _census_clock(self, lineno: int, offset: int, line) -> None:
        self.rebuilder.clock = line.time
        self.observer.clock_from(line)
        if self.checkpoints is not None:
            self.checkpoints.note(lineno, offset, line.time)

    def census_time(self) -> None:
        """The clock as the census lines since the last read one leave it: from the latest of
        them with a time."""
        untimed = self.census_untimed
        for lineno, offset, text in reversed(untimed):
            line = next((ln for ln in self._clock_splitter.split(lineno, offset, text) if ln.time), None)
            if line is not None:
                self._census_clock(lineno, offset, line)
                break
        untimed.clear()

    def _event(self, line, rule: Rule, implied: str | None, line_pattern: bool = False) -> None:
        if rule.kind != "symptom" or implied:
            self.observer.mark_crash()  # a start-up line after it begins a new server run
        key = (rule.id, line.stream.id)
        slot = self.events.get(key)
        if slot is None:
            group = (rule.id, self.observer.epoch, line.stream.role)
            kept = self._event_groups.get(group)
            if kept is not None and len(kept) >= MAX_EVENT_STREAMS:
                # 100 K processes logging one warning each: counted on the group's first event,
                # not an Event (and a copy of the signals) each.
                self.events[kept[0]][3] += 1
                return
            self._event_groups.setdefault(group, []).append(key)
            ev = Event(self.name, line.stream.id, line.stream.role, line.lineno, line.payload[:500],
                       line.time, line.level, offset=line.offset, exception_type=implied,
                       line_pattern=line_pattern)
            self.events[key] = [ev, rule, self.observer.epoch, 1]
            if rule.liveness:
                self.liveness_signals[id(ev)] = self._signals_now()
                self._ask_window_early(ev, rule)
        else:
            slot[3] += 1
            slot[0].last_line = line.lineno

    def _ask_window_early(self, evidence, rule, position: int | None = None) -> None:
        """A timeout found during the pass: its window before it (every checkpoint it needs lies
        behind us) goes to the scan-ahead process, so that it is read there meanwhile; a
        traceback's once no region that started before it is open (a copy that would replace
        it). Used after the pass only if the window read then is the same; a few at most, so the
        requests never fill their pipe while the child is still scanning."""
        helper = self.scan_ahead
        if helper is None or not helper.alive() or not self.checkpoints:
            return
        from vcrash.classify.signals import parse_time

        year = self.observer.year or 2000
        window = _evidence_window(self.checkpoints, evidence, rule, year,
                                  lambda i: parse_time(self.checkpoints[i][2], year))
        if window is None or window[2] - window[0] < SPLIT_WINDOW_BYTES:
            return
        self._planned_windows.append((position, getattr(evidence, "start_line", None), window))
        self.ask_planned_windows()

    def ask_planned_windows(self) -> None:
        """Asks the planned windows whose evidence no open region can replace any more."""
        helper, planned, kept = self.scan_ahead, self._planned_windows, []
        if self.rebuilder.open_count() > MAX_OPEN_FOR_EARLY:
            self._planned_windows = []  # a hostile shape: read after the pass, as without the child
            return
        machines = self.rebuilder.machines
        earliest_open = min((machines[sid].start for sid in self.rebuilder.open_sids()), default=None)
        for position, start_line, window in planned:
            if start_line is not None and earliest_open is not None and earliest_open < start_line:
                kept.append((position, start_line, window))
                continue
            key = (window[0], window[2])  # a window's signals do not depend on the year (their times are text)
            if key in self.early_windows or len(self.early_windows) >= MAX_EARLY_WINDOWS or not helper.alive():
                continue
            asked = helper.ask(("window", self.observer.year, window[0], window[2]))
            if asked is not None:
                self.early_windows[key] = asked
        self._planned_windows = kept

    def _signals_now(self) -> list:
        """The observer's signals as they stand (read only): one list while none came since."""
        signals = self.observer.signals
        last = signals[-1] if signals else None
        copy = self._signals_copy
        if copy is None or copy[0] != len(signals) or copy[1] is not last:
            copy = self._signals_copy = (len(signals), last, list(signals))
        return copy[2]

    def _on_traceback(self, tb: Traceback, kept: TracebackBase | None = None, position: int = 0) -> None:
        """`kept`: what the rebuilder holds for `tb` at `position` (a stand-in read back from
        disk, past its budget): matches and signals refer to it."""
        kept = tb if kept is None else kept
        self.observer.mark_crash()
        stream_name = tb.stream_id.split(":")[-2] if ":" in tb.stream_id else tb.stream_id
        # Its exception line is the input's last (or the last but a closing fence or blank line).
        cut_tail = self._at_end and self.last_line is not None and tb.end_line >= self.last_line - 1
        for rule, exc, strength in self.matcher.match_traceback(tb, stream_name, cut_tail=cut_tail):
            self.matched.add(MatchedTraceback.of(tb, rule, exc, self.index, self.observer.epoch_at(tb.start_line),
                                                 strength, kept), position)
            if rule.liveness:
                self.rebuilder.tracebacks.pin(kept)  # its identity keys the signals
                self.liveness_signals[id(kept)] = self._signals_now()
                self._ask_window_early(tb, rule, position)

    def _on_replace(self, old: TracebackBase, new: Traceback, kept: TracebackBase, position: int) -> None:
        # Dropped from the matches when they are read (live_matches): filtering the list here
        # made a crash loop of replaced copies quadratic. Held, so that its id is not reused.
        self.replaced[id(old)] = old
        if self._planned_windows:
            self._planned_windows = [w for w in self._planned_windows if w[0] != position]
        self._on_traceback(new, kept, position)

    def live_matches(self, liveness_only: bool = False) -> Iterator[MatchedTraceback]:
        return self.matched.live(self.replaced, self.index, liveness_only)

    def finish(self, last_line: int | None = None) -> None:
        self.last_line = last_line
        self._at_end = True
        line = self._cut_candidate
        if line is not None and line.lineno == last_line:
            # The input ends in an exception line no rule matched: the excerpt may have cut it.
            for rule, exc_type in self.matcher.match_cut_last_line(line):
                self._event(line, rule, exc_type)
        self.rebuilder.flush()

    def focus(self) -> tuple[bytes, ...] | None:
        """Fast path, while a traceback is open: needles that find every line that can touch an
        open region (its stream's tag, NCCL or JSON pid; a bare frame line may open one), or None
        when an open region is in an untagged stream or many are open (then every line is read:
        a needle per open stream would cost more than reading)."""
        version = self.rebuilder.open_version
        if version != self._focus_version:
            self._focus_version, self._focus_value = version, self._focus_needles()
        return self._focus_value

    def _focus_needles(self) -> tuple[bytes, ...] | None:
        if self.rebuilder.open_count() > FOCUS_MAX_STREAMS:
            return None
        pids = self.rebuilder.open_pids()
        if not pids or None in pids:
            return None
        needles = [b'File "']
        for pid in sorted(set(pids)):  # one needle set per set of streams, whatever their order
            needles += [b"pid=%d" % pid, b":%d:" % pid, b'"process": %d' % pid]
        return tuple(needles)


FOCUS_MAX_STREAMS = 8


# Other lines the observer draws facts from: versions, server lifecycle moments, start-up
# progress. The bulk scanner costs the same whatever the number of needles; only the routine,
# high-volume progress lines (access lines, "Added request", step logs) are left out.
OBSERVER_NEEDLES = ("Load", "Dynamo", "apturing", "Starting to load", "loading took", "rofil")


def needles_for(matcher: Matcher) -> tuple[bytes, ...]:
    """The fast path's needles; () means "read every line" (a line rule without prefilter
    tokens could match any line). Worked out once per matcher."""
    needles = getattr(matcher, "fast_needles", None)
    if needles is None:
        needles, matcher.fast_raw_only = _needles_for(matcher)
        matcher.fast_needles = needles
    return needles


def raw_only_needles(matcher: Matcher) -> frozenset[bytes]:
    """The needles that only a line without a level needs (what a shell, Slurm or the kernel
    writes when a process dies): a routine vLLM record holding no other needle is read by
    nothing (split/quiet.py)."""
    needles_for(matcher)
    return matcher.fast_raw_only


def _needles_for(matcher: Matcher) -> tuple[tuple[bytes, ...], frozenset[bytes]]:
    if any(not rule.prefilter for rule in matcher.line_rules):
        return (), frozenset()
    from vcrash.classify import signals

    words = set(BASE_NEEDLES) | set(ERROR_HEADER_NEEDLES)
    for tok in (list(matcher.fast_line_tokens) + list(LIVENESS_TOKENS) + list(signals.VERSION_TOKENS)
                + list(getattr(signals, "_LIFECYCLE_GATE", ())) + list(signals.PORT_TOKENS) + list(OBSERVER_NEEDLES)):
        if tok:
            words.add(tok.encode())
    fatal = {tok.encode() for tok in FATAL_LINE_TOKENS if tok}
    for deferred in DEFERRED_NEEDLES:
        words.discard(deferred)
        fatal.discard(deferred)
    # " 500 " only gates the lifecycle pattern '" 500 Internal Server Error', whose lines hold the
    # base needle "Error"; as an anchor it would fire on every number with a 50 in it.
    words.discard(b" 500 ")
    return _pruned(words, fatal)


def _pruned(others: set[bytes], fatal: set[bytes]) -> tuple[tuple[bytes, ...], frozenset[bytes]]:
    """A line holding a longer token holds any token inside it: the shortest are kept (checked
    against the kept ones only, shortest first). With them, the kept tokens that only a line
    without a level needs: fatal words that no other token (nor a traceback head) holds or is
    held by. ~5 ms for the pack's ~500 tokens, paid by every run: the answer for a token set is
    kept in the cache folder."""
    from vcrash.read import CONTEXT_NEEDLES

    words = others | fatal
    import hashlib
    import marshal
    import zlib

    from vcrash.cache import cache_dir, save

    folder = cache_dir()
    path = None
    if folder is not None:
        digest = hashlib.sha256(b"\0".join(sorted(words)) + b"\1" + b"\0".join(sorted(fatal))).hexdigest()[:32]
        path = folder / f"needles-{digest}.bin"
        try:
            key, kept, raw_only, check = marshal.loads(path.read_bytes())
            if key == digest and check == zlib.crc32(b"\0".join(kept) + b"\1" + b"\0".join(raw_only)) \
                    and all(k in words for k in kept) and all(r in fatal for r in raw_only):
                return kept, frozenset(raw_only)
        except Exception:  # absent, unreadable or damaged: worked out again
            pass
    pruned: list[bytes] = []
    for word in sorted(words, key=len):
        if not any(k in word for k in pruned):
            pruned.append(word)
    kept = tuple(sorted(pruned))
    held = (*(others - fatal), *CONTEXT_NEEDLES)
    raw_only = tuple(sorted(n for n in kept if n in fatal and not any(n in w or w in n for w in held)))
    if path is not None:
        save(path, marshal.dumps((digest, kept, raw_only, zlib.crc32(b"\0".join(kept) + b"\1" + b"\0".join(raw_only)))),
             keep=MAX_SAVED_NEEDLE_SETS)
    return kept, frozenset(raw_only)


MAX_SAVED_NEEDLE_SETS = 8


def analyze_source(source: Source, index: int, matcher: Matcher, options: Options) -> tuple[InputAnalysis, InputSummary]:
    state = InputAnalysis(index, source.display, matcher)
    try:
        return _read_source(source, state, options)
    finally:
        if state.scan_ahead is not None:  # also when the read ends in an exception
            state.scan_ahead.close()
            state.scan_ahead = None


def _read_source(source: Source, state: InputAnalysis, options: Options) -> tuple[InputAnalysis, InputSummary]:
    matcher = state.matcher
    summary = InputSummary(source.display)
    try:
        stream, compression, size = open_binary(source)
    except InputError as exc:
        summary.error = str(exc)
        return state, summary
    summary.compression = compression
    fast = options.fast is not False
    stats: dict = {}
    chunks = normalize_newlines(iter_chunks(stream, source.display))
    if fast:
        state.checkpoints = Checkpoints()
    try:
        if options.fast is None:
            first = next(chunks, b"")
            chunks = itertools.chain([first], chunks)
            sniffed = first[:1 << 16].decode("utf-8", "replace").split("\n")[:SNIFF_LINES]
            if needs_mending(sniffed):
                # A hard-wrapped, double-spaced or padded-wrap paste is mended line by line,
                # which the bulk scan cannot do.
                fast = False
                state.checkpoints = None
        scan = dict(
            needles=needles_for(matcher) if fast else (),
            raw_only=raw_only_needles(matcher) if fast else frozenset(),
            full_prefix_lines=FULL_PREFIX_LINES,
            # A server's own log: its start-up lines only list the processes. A paste (small, or
            # on stdin) is read in full: its key line may be prose the needles do not know.
            census=size is not None and size >= CENSUS_MIN_BYTES,
        )
        if fast and scan_ahead.wanted(source, compression, size):
            state.scan_ahead = scan_ahead.ScanAhead(functools.partial(_replay_scan, source, scan), chunks_in(size),
                                                    functools.partial(_window_signals, source, state.name))
        lines = iter_lines(chunks, hot=state.rebuilder.hot, stats=stats, focus=state.focus,
                           skipper=state.rebuilder, ahead=state.scan_ahead, **scan)
        mended: list[str] = []
        if not fast:  # pasted logs: a big file on the fast path is a server's own output
            lines = unwrap_hard_wraps(lines, mended)
        hot = state.rebuilder.hot
        for raw in lines:
            if raw.clock is not None:
                if state.census_untimed:
                    state.census_time()  # they lie before the skipped line this clock comes from
                state.set_clock(raw.clock)
            if raw.census and not hot():
                state.census(raw.lineno, raw.offset, raw.text)
                continue
            if state.census_untimed:
                state.census_time()
            state.feed(raw.lineno, raw.offset, raw.text, raw.context)
        if state.census_untimed:
            state.census_time()
        if mended:
            summary.warning = f"{source.display}: {'; '.join(mended)}"
    except TruncatedInput as exc:
        summary.warning = str(exc)
        summary.damaged = True
    except InputError as exc:  # readable in principle, not here (a zstd window above the limit)
        summary.error = str(exc)
    except OSError as exc:
        summary.error = f"cannot read {source.display}: {exc.strerror or exc}"
    finally:
        try:
            stream.close()
        except Exception:
            pass
    state.resume_points = getattr(stream, "points", None)  # a gzip file's, for the windows read again
    state.finish(stats.get("lines") if summary.error is None and not summary.damaged else None)
    # The pass is over: past MAX_MACHINES live records, the idle ones go to the spool before the
    # report's own records are made (100 K processes: their records and the report's, not both).
    state.splitter.retire_idle(state.rebuilder.machines, keep=rebuild_stream.MAX_MACHINES)
    if fast and summary.error is None:
        try:
            revisit_liveness_windows(source, state)
            revisit_after_windows(source, state)
            revisit_recoveries(source, state)
        finally:
            if state.window_reader is not None:
                state.window_reader.close()
                state.window_reader = None
    summary.lines = stats.get("lines", 0)
    summary.bytes = stats.get("bytes", 0)
    summary.examined_lines = stats.get("examined", 0)
    summary.vllm_versions = state.observer.versions
    summary.vllm_version = state.observer.versions[0] if state.observer.versions else None
    return state, summary


def _replay_scan(source: Source, scan: dict, claims) -> None:
    """In the scan-ahead process: the same bytes through the same iter_lines, scanned only."""
    stream, compression, _ = open_binary(source)
    try:
        if compression is None:
            for _ in iter_lines(normalize_newlines(iter_chunks(stream, source.display)), recorder=claims, **scan):
                pass
    finally:
        stream.close()


# The metrics line is the main liveness signal, and there is one every few seconds per engine:
# the bulk scan skips it and reads it back only in the window before a timeout.
DEFERRED_NEEDLES = (b"throughput:",)
MAX_WINDOW_BYTES = 256 << 20


def _liveness_evidence(state: InputAnalysis) -> list[tuple]:
    """(traceback or event, its rule) for every match of a timeout rule."""
    wanted = [(m.traceback, m.rule) for m in state.live_matches(liveness_only=True)]
    return wanted + [(ev, rule) for ev, rule, *_ in state.events.values() if rule.liveness]


def revisit_liveness_windows(source: Source, state: InputAnalysis) -> None:
    """For each timeout found on the fast path, re-read the log window before it (from the
    checkpoint a timeout-length plus a margin earlier) for the signals the bulk scan skipped.
    Overlapping windows are read once (thousands of processes reporting a timeout made one read
    of the log each)."""
    from vcrash.classify.signals import parse_time

    wanted = _liveness_evidence(state)
    if not wanted or not state.checkpoints:
        return
    year = state.observer.year or 2000
    stamps = [parse_time(cp[2], year) for cp in state.checkpoints]
    starts: dict[tuple[int, float], int] = {}  # (checkpoints before the evidence, time) -> window start
    windows = []  # (start offset, first line, end offset, evidence)
    for evidence, rule in wanted:
        window = _evidence_window(state.checkpoints, evidence, rule, year, stamps.__getitem__, starts)
        if window is not None:
            windows.append((*window, evidence))
    windows.sort(key=lambda w: (w[0], w[2]))
    run: list[tuple] = []
    run_end = 0
    for window in windows:
        if run and window[0] >= run_end:
            _read_liveness_windows(source, state, run)  # starts past the end of every window in the run
            run = []
        run.append(window)
        run_end = max(run_end, window[2]) if len(run) > 1 else window[2]
    if run:
        _read_liveness_windows(source, state, run)


def _evidence_window(checkpoints: Checkpoints, evidence, rule, year: int, stamp: Callable[[int], float | None],
                     starts: dict | None = None) -> tuple[int, int, int] | None:
    """(start offset, first line, end offset) of the window read before a timeout's evidence:
    from the last checkpoint before it at or before its time less the rule's timeout (times may
    go back and forth), found walking back from the evidence (`starts` remembers it for its
    copies); `stamp(i)` is checkpoint i's time. None without a time to go by."""
    from vcrash.classify.signals import parse_time

    end_line = getattr(evidence, "start_line", None) or evidence.line
    end_offset = getattr(evidence, "start_offset", None)
    end_offset = evidence.offset if end_offset is None else end_offset
    t_fire = parse_time(evidence.time, year)
    if t_fire is None:
        return None
    back = window_seconds(rule)
    before = bisect.bisect_left(checkpoints.lines, end_line)
    start = starts.get((before, t_fire - back)) if starts is not None else None
    if start is None:
        start = next((i for i in range(before - 1, -1, -1)
                      if (t := stamp(i)) is not None and t <= t_fire - back), 0)
        if starts is not None:
            starts[(before, t_fire - back)] = start
    # No checkpoint before the evidence that is early enough: the window starts at the top.
    line0, offset0 = checkpoints[start][:2] if before and checkpoints[start][0] < end_line else (1, 0)
    offset0 = max(offset0, end_offset - MAX_WINDOW_BYTES)
    return (offset0, line0, end_offset) if offset0 < end_offset else None


MAX_EARLY_WINDOWS = 4
MAX_OPEN_FOR_EARLY = 64  # more open regions: no window is asked during the pass (each line would look at them all)


def _read_liveness_windows(source: Source, state: InputAnalysis, run: list[tuple]) -> None:
    """One read for overlapping windows (sorted by start): each evidence gets the signals of the
    lines in its own window (as many as the observer keeps), taken when the read passes its end."""
    from vcrash.classify.signals import MAX_SIGNALS, LineObserver

    observer = LineObserver()
    observer.year = state.observer.year
    offsets: deque[int] = deque(maxlen=MAX_SIGNALS)  # where each kept signal's line starts
    pending = deque(sorted(run, key=lambda w: w[2]))  # by end

    taken: list = [None, None, None, []]  # start, signal count, last signal -> the signals (shared, read only)

    def take_until(offset: int) -> None:
        while pending and pending[0][2] <= offset:
            start, _line0, _end, evidence = pending.popleft()
            last = observer.signals[-1] if observer.signals else None
            if taken[0] != start or taken[1] != len(observer.signals) or taken[2] is not last:
                # Nothing new since the last evidence's: its list is this one's (10 K timeouts
                # at the end of a log, one list).
                taken[:] = [start, len(observer.signals), last,
                            [sig for sig, at in zip(observer.signals, offsets) if at >= start]]
            signals = taken[3]
            if not signals:
                continue
            before = state.liveness_signals.get(id(evidence))
            if not before:
                state.liveness_signals[id(evidence)] = signals
                continue
            merged = {sig.line: sig for sig in before}
            merged.update({sig.line: sig for sig in signals})
            state.liveness_signals[id(evidence)] = [merged[k] for k in sorted(merged)]

    def merge(found: list, shift: int) -> None:
        """The scan-ahead process's signals, their lines counted from `shift` + 1."""
        from vcrash.classify.signals import Signal

        for offset, fields in found:
            if pending[0][2] <= offset:
                take_until(offset)
                if not pending:
                    break
            sig = Signal(*fields)
            sig.line += shift
            observer.signals.append(sig)
            offsets.append(offset)

    start, end, first_line = run[0][0], max(w[2] for w in run), run[0][1]
    helper = state.scan_ahead
    early = state.early_windows.pop((start, end), None)
    if early is not None and helper is not None and helper.alive():
        found = helper.answer(early)  # read there during the pass
        if found is not None:
            merge(found, first_line - 1)
            take_until(float("inf"))
            return
    # A long window: its second half read by the scan-ahead process meanwhile, when it is there.
    half, asked = None, None
    if helper is not None and helper.alive() and end - start >= SPLIT_WINDOW_BYTES:
        half = _line_start_after(source, start + (end - start) // 2, end)
        asked = helper.ask(("window", observer.year, half, end)) if half is not None else None
        if asked is None:
            half = None

    def read(lines) -> bool:
        """Observes the lines; False once every evidence has its signals (the read may stop)."""
        for line, offset in lines:
            if pending[0][2] <= offset:
                take_until(offset)
                if not pending:
                    return False
            if observer.observe_signals(line):
                offsets.append(offset)
        return True

    passed: list[int] = []
    if read(_window_lines(source, state, start, end if half is None else half, first_line, passed)) \
            and half is not None and passed:
        found = helper.answer(asked)
        if found is None:  # none, or not exact without the first half: read here
            read(_window_lines(source, state, half, end, first_line + passed[0]))
        else:
            merge(found, first_line + passed[0] - 1)
    take_until(float("inf"))


def revisit_after_windows(source: Source, state: InputAnalysis) -> None:
    """The timeout verdicts read what followed each timeout in its server run, up to a window
    after its time (the same process finishing after the deadline proves it was alive); the bulk
    scan skipped the metrics lines among it. Read them back from each timeout line until a line
    dated past its window, the next server run or MAX_WINDOW_BYTES; overlapping windows are one
    read (thousands of processes reporting a timeout made one read)."""
    from vcrash.classify.signals import MAX_SIGNALS, LineObserver, parse_time

    year = state.observer.year or 2000
    starts = state.observer.epoch_of_line
    windows = []  # (offset, line, latest time, the next run's first line)
    for evidence, rule in _liveness_evidence(state):
        line = getattr(evidence, "start_line", None) or evidence.line
        offset = getattr(evidence, "start_offset", None)
        offset = evidence.offset if offset is None else offset
        t_line = parse_time(evidence.time, year)
        i = bisect.bisect_right(starts, (line, float("inf")))
        next_run = starts[i][0] if i < len(starts) else None
        latest = None if t_line is None else t_line + window_seconds(rule) + AFTER_SLACK_S
        windows.append((offset, line, latest, next_run))
    if not windows:
        return
    windows.sort(key=lambda w: w[0])
    observer = LineObserver()
    observer.year = state.observer.year
    found: list = []
    stop: tuple[int, int | None] = (-1, 0)  # where the last read stopped (a line not read yet)
    for offset, line, latest, next_run in windows:
        if offset >= stop[0]:
            start, first_line = offset, line
        elif stop[1] is not None:
            start, first_line = stop  # inside what the read before covered: on from where it stopped
        else:
            continue  # the read before went to its byte limit or the end, past this window's start
        stop = (start + MAX_WINDOW_BYTES, None)
        for ln, at in _window_lines(source, state, start, start + MAX_WINDOW_BYTES, first_line):
            t = parse_time(ln.time, year) if ln.time else None
            if next_run is not None and ln.lineno >= next_run or latest is not None and t is not None and t > latest:
                stop = (at, ln.lineno)
                break
            if observer.observe_signals(ln):
                found.append(observer.signals[-1])
                if len(found) >= MAX_SIGNALS:
                    break  # as many as the observer keeps (an undated timeout has no time limit)
        if len(found) >= MAX_SIGNALS:
            break
    if found:
        kept = {sig.line: sig for sig in state.observer.signals}
        for sig in found:
            kept.setdefault(sig.line, sig)
        state.after_signals = sorted(kept.values(), key=lambda sig: sig.line)


AFTER_SLACK_S = 60  # lines of several processes are not in strict time order


RECOVERY_WINDOW_BYTES = 64 << 20
WINDOW_FIRST_READ = 64 << 10


def revisit_recoveries(source: Source, state: InputAnalysis) -> None:
    """A hang indicator is void when work visibly resumed after its last occurrence; the metrics
    lines that show it were skipped by the bulk scan, so read them after each such event: the
    first progress after it, within RECOVERY_WINDOW_BYTES of the checkpoint before it, must be
    in its server run. Overlapping windows are read once (400 K processes that each logged a
    hang warning made 400 K reads of the rest of the log)."""
    observer = state.observer
    wanted = [ev for ev, rule, *_ in state.events.values() if rule.recovered_by_progress
              and not observer.progress_after(ev.last_line or ev.line)]
    if not wanted or not state.checkpoints:
        return
    cp_lines = [cp[0] for cp in state.checkpoints]
    windows = []  # (checkpoint offset, its line, the event's last line, the event)
    for ev in wanted:
        last = ev.last_line or ev.line
        i = bisect.bisect_right(cp_lines, last) - 1  # the last checkpoint at or before the event
        if i >= 0:
            line0, offset0, _ = state.checkpoints[i]
            windows.append((offset0, line0, last, ev))
    windows.sort(key=lambda w: (w[0], w[2]))
    run: list[tuple] = []
    for window in windows:
        if run and window[0] >= run[-1][0] + RECOVERY_WINDOW_BYTES:
            _read_recoveries(source, state, run)  # the next window starts past this run's reach
            run = []
        run.append(window)
    if run:
        _read_recoveries(source, state, run)


def _read_recoveries(source: Source, state: InputAnalysis, run: list[tuple]) -> None:
    """Overlapping windows read together (sorted by start): each event takes the first progress
    line after it, if that lies within its own window and its own server run. Once every event
    before the read position has its answer, the read jumps to the next one's window."""
    from vcrash.classify.signals import LineObserver

    observer = LineObserver()
    pending = deque(sorted(run, key=lambda w: w[2]))  # by the event's line (their windows start in that order)
    while pending:
        jump = False
        for line, offset in _window_lines(source, state, pending[0][0], pending[-1][0] + RECOVERY_WINDOW_BYTES,
                                          pending[0][1]):
            observer.observe_signals(line)
            signals = observer.signals
            if not signals or signals[-1].kind != "progress" or signals[-1].line != line.lineno:
                continue
            epoch = state.observer.epoch_at(line.lineno)
            while pending and (pending[0][2] < line.lineno or pending[0][0] + RECOVERY_WINDOW_BYTES <= offset):
                offset0, _line0, last, ev = pending.popleft()
                if last < line.lineno and offset < offset0 + RECOVERY_WINDOW_BYTES \
                        and state.observer.epoch_at(last) == epoch:
                    state.recovered.add(id(ev))
            if pending and pending[0][0] > offset:
                jump = True  # what lies before the next event's window concerns no event
                break
            if not pending:
                break
        if not jump:
            break  # the read ended: the events left saw no progress in their windows


def _window_lines(source: Source, state: InputAnalysis, start: int, end: int, first_line: int,
                  lines_passed: list[int] | None = None):
    """The deferred needle lines between two byte offsets (the first one starts a line), split,
    each with the offset it starts at. `lines_passed` gets the window's line count once read."""
    if state.window_reader is None:
        state.window_reader = WindowReader(source, state.resume_points)
    yield from _lines_between(state.window_reader, Splitter(state.name), start, end, first_line, lines_passed)


def _lines_between(reader: WindowReader, splitter: Splitter, start: int, end: int, first_line: int,
                   lines_passed: list[int] | None):
    stream = reader.at(start)
    if stream is None:
        return
    try:
        def window_chunks():
            # Small reads first, doubling: the reader usually stops at the first progress line
            # after the event, a few hundred KB in (a MiB a read made 6 MB of reading for 300 KB).
            left, size = end - start, WINDOW_FIRST_READ
            while left > 0:
                data = stream.read(min(size, left))
                if not data:
                    return
                left -= len(data)
                size = min(size * 2, 1 << 20)
                yield data

        for raw in needle_lines(window_chunks(), DEFERRED_NEEDLES, lines_passed):
            lineno = first_line + raw.lineno - 1
            for line in splitter.split(lineno, start + raw.offset, raw.text):
                yield line, start + raw.offset
    except (OSError, InputError, TruncatedInput, EOFError, ValueError):
        reader.broken()


# A window this long or longer is read half here, half by the scan-ahead process.
SPLIT_WINDOW_BYTES = 1 << 20


class _LookupSplitter(Splitter):
    """A splitter that says whether it named a process from an earlier line of its own (a
    reader of a window's second half has not seen the first half's)."""

    looked_up = False

    def stream(self, name, pid, ip=None):
        if name is None and pid is not None:
            self.looked_up = True
        return super().stream(name, pid, ip)


def _window_signals(source: Source, name: str, request: tuple):
    """In the scan-ahead process: the liveness signals of the window's lines from `start` to
    `end` (the start of a line), as (offset, the signal's fields with its line counted from 1),
    or None where any of them depends on what came before `start` (a clock or a bar carried over,
    a process named earlier) or there are more than the observer keeps."""
    from vcrash.classify.signals import MAX_SIGNALS, LineObserver

    _kind, year, start, end = request
    observer = LineObserver()
    observer.year = year
    splitter = _LookupSplitter(name)
    reader = WindowReader(source, None)
    found, read = [], []
    try:
        for line, offset in _lines_between(reader, splitter, start, end, 1, read):
            if observer.observe_signals(line):
                sig = observer.signals[-1]
                if sig.dated != "line" or len(found) >= MAX_SIGNALS:
                    return None
                found.append((offset, (sig.line, sig.stream_id, sig.role, sig.time, sig.kind, sig.text, sig.dated,
                                       sig.bar_base, sig.bar_elapsed, sig.prompt_rate)))
    finally:
        reader.close()
    return None if splitter.looked_up or not read else found  # (nothing read: the read failed)


def _line_start_after(source: Source, at: int, end: int) -> int | None:
    """The first line start after byte `at` and before `end` of a plain file, if one is near."""
    try:
        with open(source.path, "rb") as fh:
            fh.seek(at)
            piece = fh.read(min(end - at, 1 << 16))
    except OSError:
        return None
    nl = piece.find(b"\n")
    return at + nl + 1 if 0 <= nl and at + nl + 1 < end else None


def analyze(sources: list[Source], pack: RulePack, options: Options | None = None) -> Report:
    options = options or Options()
    matcher = Matcher(pack)
    states: list[InputAnalysis] = []
    summaries: list[InputSummary] = []
    for index, source in enumerate(sources):
        state, summary = analyze_source(source, index, matcher, options)
        states.append(state)
        summaries.append(summary)
    return build_report(states, summaries, matcher, pack, options)


def build_report(states: list[InputAnalysis], summaries: list[InputSummary], matcher: Matcher, pack: RulePack,
                 options: Options, last_resort: bool = True) -> Report:
    matched = (m for s in states for m in s.live_matches())
    events = [(ev, rule, s.index, epoch, count) for s in states for ev, rule, epoch, count in s.events.values()
              if not (rule.recovered_by_progress and (s.observer.progress_after(ev.last_line or ev.line)
                                                      or id(ev) in s.recovered))]
    runs = run_links(states)
    diags = build_diagnoses(matched, events, runs)
    caused = _caused_by_earlier(diags)
    diags = [d for d in diags if not _teardown_noise(d, diags, by_index_of(states)) and id(d) not in caused]
    if last_resort:
        diags += _last_resort(states, diags, matcher)
    joined = _join_cut_tracebacks(diags, matcher) | _named_by_line_before(diags)
    diags = [d for d in diags if id(d) not in joined]
    placed_copies = _place_startup_ooms(diags, by_index_of(states), pack)
    diags = [d for d in diags if id(d) not in placed_copies]
    if _interrupted_shutdowns(diags, by_index_of(states)) | _promote_unexplained(states, diags, pack, runs):
        diags.sort(key=Diagnosis.sort_key)
    by_index = by_index_of(states)
    for d in diags:
        summary = summaries[d.input_index]
        d.version = summary.vllm_version
        d.version_advice = version_advice(d.rule, d.version)
        stop = by_index[d.input_index].observer.stop_requested.get(d.epoch)
        if stop is not None and d.line > stop and d.rule.kind != "symptom":
            d.notes.append(f"reported after the server was asked to stop (line {stop}): the message may describe "
                           "the stop rather than the failure it names; check the lines before the stop")
        if d.rule.fallback and d.traceback is not None and _cut_before_its_exception(d.traceback):
            placed = [rule.id for rule in matcher.placed_by_frames(d.traceback)]
            if placed:
                d.notes.append("cut before its exception line, in frames where these known failures happen: "
                               f"{', '.join(placed)} (the lost line would tell which, if any)")
        if d.rule.liveness:
            observer = by_index[d.input_index].observer
            state = by_index[d.input_index]
            evidence = d.traceback if d.traceback is not None else d.event
            signals = state.liveness_signals.get(id(evidence), list(observer.signals))
            if observer.year is None and options.year:
                observer.year = options.year
            after = state.after_signals if state.after_signals is not None else list(observer.signals)
            d.liveness = assess_liveness(d, signals, observer, after=after)
    top = attach_symptoms(diags, runs)
    left_out: list[str] = []
    if options.select or options.ignore:
        top, left_out = _selected(top, options)
    tracebacks = TracebacksView([s.rebuilder.tracebacks for s in states])
    streams = StreamsView([s.splitter for s in states])
    warnings = [f"rule {rid}: {why}" for rid, why in matcher.disabled.items()]
    warnings += [s.warning for s in summaries if s.warning]
    if left_out:  # said, so that a silenced crash is never mistaken for a healthy log
        warnings.append(f"not reported (select/ignore): {', '.join(sorted(set(left_out)))}")
    return Report(
        inputs=summaries,
        streams=streams,
        tracebacks=tracebacks,
        diagnoses=top,
        rule_pack_version=pack.version,
        accounting=_accounting(states),
        warnings=warnings,
        timeline=_timeline(states, diags),
    )


MAX_ERROR_LINES = 16


def _case_forms(phrase: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys((phrase, phrase.capitalize(), phrase.title(), phrase.upper())))


# What an error line says when a process or job died, on lines with no level of their own, in
# the case forms logs write (lower, first capital, title, upper): one list makes both the
# pattern and the fast path's needles, so that the bulk scan reads every line the pattern takes.
_FATAL_WHOLE_WORDS = ("fatal", "killed", "aborted", "panic")
_FATAL_PHRASES = ("segmentation fault", "core dumped", "out of memory", "oom-kill", "oom_kill", "oom kill",
                  "failed to start", "died unexpectedly", "exited unexpectedly")
# abseil's failure signal handler (Ray, XLA, Triton's MLIR passes), a C assert() that aborts, and
# Slurm's cancellation: each with a needle that every line it takes holds.
_FATAL_MARKS = ((r"\*\*\* SIG[A-Z]{2,6} received at time=", " received at time="),
                (r": Assertion `.{1,400}' failed\.", ": Assertion `"),
                (r"CANCELLED\b.*\bDUE TO\b", "CANCELLED"))
_FATAL_WORDS = re.compile("|".join(
    [rf"\b{re.escape(form)}\b" for word in _FATAL_WHOLE_WORDS for form in _case_forms(word)]
    + [re.escape(form) for phrase in _FATAL_PHRASES for form in _case_forms(phrase)]
    + [pattern for pattern, _needle in _FATAL_MARKS]))
# A status line of abseil/gRPC (XLA, PJRT, libtpu, TensorRT-LLM): the code, then what failed.
_STATUS_CODES = ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED",
                 "UNAVAILABLE", "INTERNAL", "DATA_LOSS", "UNIMPLEMENTED")
_STATUS_LINE = re.compile(rf"^\s*(?:{'|'.join(_STATUS_CODES)}): \S")
# Raw lines the finding of last resort can come from, as fast-path needles.
FATAL_LINE_TOKENS = (*(form for word in _FATAL_WHOLE_WORDS + _FATAL_PHRASES for form in _case_forms(word)),
                     *(needle for _pattern, needle in _FATAL_MARKS), *(f"{code}: " for code in _STATUS_CODES),
                     "SIGABRT received", "SIGSEGV received", "SIGBUS received")


def is_error_line(line) -> bool:
    """An error line that is not a handled request's: ERROR/CRITICAL, or a raw line that says a
    process died."""
    level = line.level
    text = line.payload
    if level in ("ERROR", "CRITICAL"):
        return bool(text.strip()) and HANDLED_CONTEXT.search(text) is None
    if level is not None:
        return False
    if _STATUS_LINE.match(text):
        return HANDLED_CONTEXT.search(text) is None
    if not _might_be_fatal(text):
        return False
    return _FATAL_WORDS.search(text) is not None and HANDLED_CONTEXT.search(text) is None


def _might_be_fatal(text: str) -> bool:
    # Substring tests are far cheaper than the case-insensitive pattern on every raw line.
    # Each of _FATAL_WORDS' forms holds one of them (tests/test_fast_path.py holds it so).
    return ("ill" in text or "ILL" in text or "atal" in text or "ATAL" in text or "ault" in text or "AULT" in text
            or "bort" in text or "BORT" in text or "ANCEL" in text or "emory" in text or "EMORY" in text
            or "tart" in text or "TART" in text or "ied" in text or "IED" in text or "xited" in text
            or "XITED" in text or "anic" in text or "ANIC" in text or "ump" in text or "UMP" in text
            or "oom" in text or "OOM" in text or "Oom" in text or "SIG" in text or "ssertion" in text)


def _last_resort(states: list[InputAnalysis], diags: list[Diagnosis], matcher: Matcher) -> list[Diagnosis]:
    """An input with error evidence but no finding gets one: its first error line, as a crash no
    rule knows, at low confidence. "No crash found" is only for logs without error evidence."""
    if not matcher.fallback_rules:
        return []
    found = {d.input_index for d in diags}
    out = []
    for s in states:
        if s.index in found:
            continue
        # What a requested stop prints is not a crash.
        lines = [e for e in s.error_lines
                 if (stop := s.observer.stop_requested.get(s.observer.epoch_at(e.line))) is None or e.line < stop]
        if not lines:
            continue
        ev = lines[0]
        d = Diagnosis(matcher.fallback_rules[0], s.name, s.index, ev.stream_id, ev.role, ev.line,
                      s.observer.epoch_at(ev.line), event=ev, occurrences=len(lines), strength="line")
        d.run_age = s.observer.epoch - d.epoch
        d.notes.append("no traceback or known message: the first error line of the log, as a crash no rule knows")
        out.append(d)
    return out


def run_links(states: list[InputAnalysis], with_pids: bool = False) -> RunLinks:
    """Each input's server runs as time windows (first timestamp to the next run's, or to the
    last one seen), its process ids, and its last run: what ties runs of several inputs.
    `with_pids`: the pids of a single input too (scan ties logs together afterwards)."""
    observers = {s.index: s.observer for s in states}
    runs = RunLinks(when=lambda d: observers[d.input_index].seconds(d.time, d.line))
    for s in states:
        obs = s.observer
        runs.last_epoch[s.index] = obs.epoch
        if len(states) > 1 or with_pids:  # pids link runs of different inputs only
            # pid 1 is every container's first process: shared by unrelated pods, it links nothing.
            runs.pids[s.index] = {st.pid for st in s.splitter.all_streams() if st.pid and st.pid > 1}
        for epoch, ports in obs.ports.items():
            runs.ports[(s.index, epoch)] = set(ports)
        starts = sorted((e, obs.seconds(t, line)) for e, (t, line) in obs.epoch_start.items())
        end_of_log = obs.seconds(obs.clock)
        for i, (epoch, start) in enumerate(starts):
            end = starts[i + 1][1] if i + 1 < len(starts) else end_of_log
            if start is not None and end is not None:
                runs.windows[(s.index, epoch)] = (start, max(start, end))
    return runs


def _promote_unexplained(states: list[InputAnalysis], diags: list[Diagnosis], pack: RulePack,
                         runs: RunLinks | None = None) -> bool:
    """A symptom that nothing in its server run explains, logged while the server was serving and
    before any stop, becomes the root its `only_from` rule names (an engine core that vanished
    mid-service was killed from outside: SIGKILL, the host's OOM killer)."""
    targets = {r.only_from: r for r in pack.rules if r.only_from}
    if not targets:
        return False
    by_index = by_index_of(states)
    changed = False
    for d in diags:
        target = targets.get(d.rule.id)
        if target is None:
            continue
        # A root in another input's log of the same run (the engine's own log) explains it too.
        explained = any(o is not d and (runs.same_run(o, d) if runs else
                                        (o.input_index, o.epoch) == (d.input_index, d.epoch))
                        and (o.rule.kind != "symptom" or d.rule.id in o.rule.explains) for o in diags)
        obs = by_index[d.input_index].observer
        marks = [m["kind"] for m in obs.lifecycle if m["line"] < d.line and obs.epoch_at(m["line"]) == d.epoch]
        stop = obs.stop_requested.get(d.epoch)
        serving = ("server-start" in marks or "ready" in marks) and "shutdown" not in marks
        if not marks and d.role == "api-server":
            serving = True  # an excerpt from mid-service: the API server was up, its start-up not pasted
        if not explained and serving and (stop is None or stop > d.line):
            d.promoted_from = d.rule.id
            d.rule = target
            changed = True
    return changed


def _selected(top: list[Diagnosis], options: Options) -> tuple[list[Diagnosis], list[str]]:
    """The findings of selected rules, and the ids of those left out. A root left out takes
    the symptoms it explains with it (they are its consequences, not separate findings)."""
    from vcrash.config import rule_selected

    def keep(d: Diagnosis) -> bool:
        return rule_selected(d.rule.id, list(options.select), list(options.ignore))

    kept = [d for d in top if keep(d)]
    left_out = [d.rule.id for d in top if not keep(d)]
    for i, d in enumerate(kept, 1):
        d.rank = i
        left_out += [e.rule.id for e in d.explains if not keep(e)]
        d.explains = [e for e in d.explains if keep(e)]
    return kept, left_out


def by_index_of(states: list[InputAnalysis]) -> dict[int, InputAnalysis]:
    return {s.index: s for s in states}


# A finding that names no phase of its own (an OOM that only a line or a frameless exception
# shows), before the server was ready, happened in the start-up phase the log had reached: the
# rule that declares that phase for it (`phase_of`, `phases`), with the phase that placed it.
def _phase_rules(pack: RulePack) -> dict[str, list[tuple[str, Rule]]]:
    """Generic rule id -> (phase, rule) in PHASES order (the latest phase first; at one phase a
    user folder's rule before the bundled one)."""
    table: dict[str, list[tuple[str, Rule]]] = {}
    for rule in pack.rules:
        for phase in rule.phases:
            table.setdefault(rule.phase_of, []).append((phase, rule))
    for placed in table.values():
        placed.sort(key=lambda pr: (PHASES.index(pr[0]), pr[1].bundled))
    return table


def _cut_before_its_exception(tb) -> bool:
    """The traceback's last exception line is lost (the paste ended in its frames): the frames
    shown may stop before the ones that would have named the phase."""
    return bool(tb.exceptions) and tb.exceptions[-1].type == "<truncated>"


NAMING_LINE_REACH = 20  # lines between a known failure's line and the unnamed traceback after it


def _named_by_line_before(diags: list[Diagnosis]) -> set[int]:
    """A traceback no rule named, right after its own process logged a line a root rule knows
    (NCCL's "Duplicate GPU detected …" warning, then "RuntimeError: NCCL error: invalid
    usage"; the linker's "cannot find -lcuda", then Triton's CalledProcessError): one failure,
    found at the line that names it. Returns the ids of the tracebacks' findings taken in."""
    taken: set[int] = set()
    lines: dict[tuple, list[Diagnosis]] = {}
    for m in diags:
        if m.traceback is None and m.event is not None and m.rule.kind == "root" and not m.rule.fallback:
            lines.setdefault((m.input_index, m.stream_id, m.epoch), []).append(m)
    if not lines:
        return taken
    for d in diags:
        if not d.rule.fallback or d.traceback is None:
            continue
        start = d.traceback.start_line
        said = next((m for m in lines.get((d.input_index, d.stream_id, d.epoch), ())
                     if 0 < start - m.line <= NAMING_LINE_REACH), None)
        if said is not None:
            taken.add(id(d))
            said.strength = "line-pattern"
            exc = d.exception
            what = f" ({exc.type})" if exc is not None and exc.type != "<truncated>" else ""
            said.notes.append(f"the traceback its process printed right after it (line {start}){what} is this failure")
    return taken


def _join_cut_tracebacks(diags: list[Diagnosis], matcher: Matcher) -> set[int]:
    """A traceback cut before its exception line, in frames that only place a rule's failure
    (cuda-oom-weight-loading's load_model), is joined with what says which failure it was:
    - the phaseless finding it quotes (its context line's OOM) takes the place its frames give;
    - unnamed, after its own process logged that failure's message (linear.py's "Failed to
      create unquantized linear weights: CUDA out of memory", or a phaseless OOM line) in the
      same server run, it is that failure, the message taken in;
    - unnamed, beside a phaseless finding of another process in the same server run (a Ray
      worker's OOM while the driver's load_model traceback was cut), that finding takes the
      place its frames give, and the cut traceback is part of it.
    Returns the ids of the findings taken in."""
    taken: set[int] = set()
    cut = [d for d in diags if d.traceback is not None and _cut_before_its_exception(d.traceback)]
    if not cut:
        return taken
    # Indexed once: a crash loop's thousands of findings must not be searched for each other.
    messages: dict[tuple, list[Diagnosis]] = {}  # (input, stream, run) -> its message findings
    phaseless: dict[tuple, list[Diagnosis]] = {}  # (input, run, rule) -> findings without frames
    for m in diags:
        if m.traceback is None and m.event is not None:
            messages.setdefault((m.input_index, m.stream_id, m.epoch), []).append(m)
        if m.traceback is None or not any(e.frames for e in m.traceback.exceptions):
            phaseless.setdefault((m.input_index, m.epoch, m.rule.id), []).append(m)
    for d in cut:
        if id(d) in taken:
            continue
        placed = matcher.placed_by_frames(d.traceback)
        if not placed:
            continue
        if not d.rule.fallback:
            rule = next((r for r in placed if r.phase_of == d.rule.id), None)
            if rule is not None:
                d.rule = rule
                d.notes.append("placed by its frames: the traceback was cut before its exception line")
            continue
        for rule in placed:
            said = next((m for m in messages.get((d.input_index, d.stream_id, d.epoch), ())
                         if id(m) not in taken and m.line < d.line and m.rule.id in (rule.id, rule.phase_of)), None)
            if said is not None:
                taken.add(id(said))
                d.rule, d.strength = rule, "frames"
                d.notes.append(f"named by the message its process logged before it (line {said.line}); "
                               "the traceback was cut before its exception line")
                break
            other = next((m for m in phaseless.get((d.input_index, d.epoch, rule.phase_of), ())
                          if id(m) not in taken and m is not d), None) if rule.phase_of else None
            if other is not None:
                taken.add(id(d))
                other.rule = rule
                other.notes.append(f"placed by the frames of the traceback at line {d.traceback.start_line}, which was "
                                   "cut before its exception line")
                break
    return taken


def _place_startup_ooms(diags: list[Diagnosis], states: dict[int, InputAnalysis], pack: RulePack) -> set[int]:
    """Places them; returns the ids of those whose phase's finding was already there (the engine
    logs the OOM's message, then its traceback: one failure)."""
    table = _phase_rules(pack)
    copies: set[int] = set()
    if not table:
        return copies
    # (rule, input, run) of every finding, kept up to date as findings are placed: one pass,
    # however many findings a crash loop has.
    found = Counter((o.rule.id, o.input_index, o.epoch) for o in diags)
    for d in diags:
        by_phase = table.get(d.rule.id)
        if by_phase is None or (d.traceback is not None and any(e.frames for e in d.traceback.exceptions)
                                and not _cut_before_its_exception(d.traceback)):
            continue  # frames the phase rules saw and did not claim: not a start-up phase
        if any(found[(rule.id, d.input_index, d.epoch)] for _phase, rule in by_phase):
            copies.add(id(d))  # its traceback's frames named the phase: one failure, already found
            continue
        obs = states[d.input_index].observer
        if len(obs.lifecycle) >= MAX_LIFECYCLE:
            continue  # the marks stopped early (a long crash loop): "not ready yet" cannot be told
        if any(m["kind"] == "ready" and m["line"] < d.line and obs.epoch_at(m["line"]) == d.epoch for m in obs.lifecycle):
            continue  # serving: a runtime failure
        started = any(m["kind"] in ("engine-init", "server-start") and m["line"] < d.line
                      and obs.epoch_at(m["line"]) == d.epoch for m in obs.lifecycle)

        def reached(phase: str) -> bool:
            if phase == "engine start-up":
                return started
            line = obs.phase_starts.get((d.epoch, phase))
            return line is not None and line < d.line

        placed = next(((phase, rule) for phase, rule in by_phase if reached(phase)), None)
        if placed is not None:
            found[(d.rule.id, d.input_index, d.epoch)] -= 1
            found[(placed[1].id, d.input_index, d.epoch)] += 1
            d.rule = placed[1]
            label = "engine start-up, before the weights were loaded" if placed[0] == "engine start-up" else placed[0]
            d.notes.append(f"placed by the start-up phase the log had reached ({label}): the failure itself "
                           "names no phase")
    return copies


def _caused_by_earlier(diags: list[Diagnosis]) -> set[int]:
    """The ids of the causes that an earlier finding of their server run says it brings about:
    early V1's fatal-signal handler SIGKILLs its own process tree, so the shell's "Killed" after
    that line is the handler's doing, not a kill from outside. (Symptoms a finding explains are
    attached instead.) One pass: a crash loop has thousands of findings."""
    causes = [d for d in diags if d.rule.kind != "symptom"]
    wanted = {d.rule.id for d in causes}
    first: dict[tuple, int] = {}  # (explained rule, input, run) -> the first line of a finding explaining it
    for o in diags:
        for rule_id in o.rule.explains:
            if rule_id in wanted:
                key = (rule_id, o.input_index, o.epoch)
                first[key] = min(first.get(key, o.line), o.line)
    return {id(d) for d in causes
            if (line := first.get((d.rule.id, d.input_index, d.epoch))) is not None and line <= d.line}


def _teardown_noise(d: Diagnosis, diags: list[Diagnosis], states: dict[int, InputAnalysis]) -> bool:
    """A symptom logged after an operator stopped the server, with no root cause before the
    stop in that server run, is what the stop itself prints."""
    if not d.rule.void_after_stop:
        return False
    stop = states[d.input_index].observer.stop_requested.get(d.epoch)
    if stop is None or d.line < stop:
        return False
    return not any(r.rule.kind != "symptom" and r.input_index == d.input_index and r.epoch == d.epoch
                   and r.line < stop for r in diags)


# Exceptions a stop itself raises: Ctrl-C, and asyncio tasks cancelled while the loop closes.
_INTERRUPT_TYPES = re.compile(r"^(?:[\w.]+\.)?(?:KeyboardInterrupt|CancelledError)$")


def interrupted_shutdown_rule(fallback: Rule) -> Rule:
    """The catch-all's note form, for an interrupt that only cut a clean shutdown short."""
    return replace(
        fallback, id="interrupted-shutdown", title="A planned stop was interrupted during shutdown",
        kind="context", severity="note", confidence="high", explains=[], fallback=False,
        doc={"summary": "A KeyboardInterrupt or CancelledError traceback after the server had begun a clean "
                        "shutdown (or was asked to stop): the stop was cut short, nothing crashed.",
             "why": "A second Ctrl-C, or a supervisor's SIGINT while uvicorn and the engine wind down, raises "
                    "KeyboardInterrupt in the event loop and cancels its pending tasks; Python prints that "
                    "traceback on the way out.",
             "resolution": ["Nothing to fix for the server. Wait for the shutdown to finish before a second "
                            "interrupt, or give the supervisor a longer stop grace period.",
                            "If the stop itself was not planned, look for what sent the signal."]},
        raw={}, bundled=True)


def derived_rules(pack: RulePack) -> list[Rule]:
    """Rules the analyzer makes from the pack's own (for scan's rule list and `explain`)."""
    fallback = next((r for r in pack.rules if r.fallback), None)
    return [interrupted_shutdown_rule(fallback)] if fallback is not None else []


def _interrupted_shutdowns(diags: list[Diagnosis], states: dict[int, InputAnalysis]) -> bool:
    """A crash no rule knows whose every exception is an interrupt, raised after a shutdown
    sequence or a requested stop in the same server run (or raised by vLLM's SIGTERM handler), is
    the stop, not a failure: it becomes a note. An interrupt while serving (no shutdown before
    it) stays a crash."""
    changed = False
    for d in diags:
        tb = d.traceback
        if not d.rule.fallback or tb is None or not tb.exceptions:
            continue
        if not all(_INTERRUPT_TYPES.match(e.type) for e in tb.exceptions):
            continue
        # After a known crash in the same run it is that crash's teardown: left to the cascade.
        if any(o.input_index == d.input_index and o.epoch == d.epoch and o.rule.kind != "symptom"
               and not o.rule.fallback and o.line < d.line for o in diags):
            continue
        obs = states[d.input_index].observer
        stop = obs.stop_requested.get(d.epoch)
        shutdown = any(m["kind"] == "shutdown" and m["line"] < tb.start_line and obs.epoch_at(m["line"]) == d.epoch
                       for m in obs.lifecycle)
        # vLLM's SIGTERM handler raises KeyboardInterrupt("terminated"): the stop itself.
        terminated = tb.exceptions[-1].message == "terminated"
        # (A Ctrl-C echoed on the traceback's first line is a stop before it.)
        if shutdown or terminated or (stop is not None and stop <= tb.start_line):
            d.rule = interrupted_shutdown_rule(d.rule)
            d.notes.append("an interrupt during a clean shutdown: the stop was cut short, nothing crashed")
            changed = True
    return changed


def _accounting(states: list[InputAnalysis]) -> dict:
    regions = sum(s.rebuilder.regions_opened for s in states)
    rebuilt = sum(len(s.rebuilder.tracebacks) for s in states)
    duplicates = sum(s.rebuilder.duplicates for s in states)
    corrupted = sum(s.rebuilder.corrupted for s in states)
    return {
        "traceback_headers": sum(s.tb_heads for s in states),
        "regions": regions,
        "rebuilt": rebuilt - corrupted,
        "corrupted": corrupted,
        "duplicates": duplicates,
        "balanced": regions == rebuilt + duplicates,
        # Idle streams whose state machine was dropped to bound memory (their regions were
        # flushed first, so nothing here is lost; a later traceback there starts afresh).
        "evicted_streams": sum(s.rebuilder.evicted for s in states),
    }


def _timeline(states: list[InputAnalysis], diags: list[Diagnosis]) -> list[dict]:
    # By input and id, not identity: a spooled traceback's stand-in is made anew on each access.
    rule_of_tb = {(d.traceback.input, d.traceback.id): d.rule.id for d in diags if d.traceback is not None}

    def traceback_item(tb: TracebackBase) -> dict:
        exc = tb.root
        what = f"{exc.type}: {exc.message_head}" if exc and exc.message_head else (exc.type if exc else "?")
        return {"input": tb.input, "line": tb.start_line, "time": tb.time, "stream": tb.stream_id,
                "role": tb.role, "kind": "traceback", "traceback": tb.id, "text": what[:300],
                "context": tb.context, "rule": rule_of_tb.get((tb.input, tb.id)), "duplicates": len(tb.duplicates)}

    def items_of(s: InputAnalysis):
        # (line, item) or (line, (store, position)): a traceback is looked up (a spooled one
        # read back) and becomes a dict only if it is kept.
        yield from zip(s.rebuilder.start_lines, ((s.rebuilder.tracebacks, p) for p in itertools.count()))
        for ev, rule, _epoch, count in s.events.values():
            yield ev.line, {"input": ev.input, "line": ev.line, "time": ev.time, "stream": ev.stream_id,
                            "role": ev.role, "kind": "event", "text": ev.text[:300], "rule": rule.id,
                            "occurrences": count}
        for mark in s.observer.lifecycle:
            yield mark["line"], {"input": s.name, **mark}

    def materialized(pairs) -> list[dict]:
        return [x if isinstance(x, dict) else traceback_item(x[0][x[1]]) for _, x in pairs]

    by_line = lambda pair: pair[0]  # noqa: E731
    if len(states) == 1:
        # The earliest items only (as sorted()[:n]): 100 K tracebacks never become 100 K dicts.
        return materialized(heapq.nsmallest(MAX_TIMELINE, items_of(states[0]), key=by_line))
    order = {st.name: i for i, st in enumerate(states)}
    items = materialized(sorted((((order.get(s.name, 0), line), x) for s in states for line, x in items_of(s)),
                                key=by_line))
    return _interleave(items, {st.name: st.observer for st in states}, order)[:MAX_TIMELINE]


def _interleave(items: list[dict], observers: dict, order: dict[str, int]) -> list[dict]:
    """Several inputs' timelines merged by time: an item without a timestamp keeps the time of
    the one before it in its own log (never earlier), so each log stays in line order."""
    keyed = []
    last: dict[str, float] = {}
    for e in items:
        obs = observers.get(e["input"])
        t = obs.seconds(e.get("time"), e["line"]) if obs is not None else None
        carried = last.get(e["input"], float("-inf"))
        if t is not None and t > carried:
            carried = t
        last[e["input"]] = carried
        keyed.append(((carried, order.get(e["input"], 0), e["line"]), e))
    keyed.sort(key=lambda pair: pair[0])
    return [e for _key, e in keyed]

"""From matched evidence to ranked diagnoses: grouping, root-over-symptom ranking, attaching
explained symptoms, liveness verdicts for timeouts, and version-aware advice."""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

from vcrash.classify.rules import Rule
from vcrash.classify.versions import version_advice as fixed_version_advice
from vcrash.memo import MAX_KEYED_FRAMES, MAX_KEYED_TEXT, Memo
from vcrash.rebuild.model import Event, ExceptionInfo, Traceback, TracebackBase
from vcrash.rebuild.spool import SpooledException

T = TypeVar("T")

KIND_RANK = {"root": 0, "context": 1, "symptom": 2}
CONFIDENCE_ORDER = ["low", "medium", "high"]
STRENGTH_CAP = {"exact": "high", "loose": "medium", "line-pattern": "high", "line": "medium", "frames": "low",
                "fallback": "low"}
STRENGTH_RANK = {"exact": 0, "loose": 1, "line-pattern": 2, "frames": 3, "fallback": 4, "line": 5}
# A rebuilt traceback a rule recognises, then one it recognises by its frames only or a line its
# rule's own line pattern names, then a fatal traceback no rule knows, then a log line that
# quotes a known message (vLLM logs some conditions it works around at ERROR level; a crash's own
# traceback says more).
EVIDENCE_CLASS = {"exact": 0, "loose": 0, "line-pattern": 1, "frames": 1, "fallback": 2, "line": 3}
ABORT_DUMP_CLASS = 4  # an abort's faulthandler dump: after any line that names why (see below)
ROLE_RANK = {"engine-core": 0, "worker": 0, "main": 1, "other": 1, "ray": 1, "api-server": 2}


@dataclass
class Diagnosis:
    rule: Rule
    input: str
    input_index: int
    stream_id: str
    role: str
    line: int
    epoch: int
    traceback: TracebackBase | None = None
    exception: ExceptionInfo | None = None
    event: Event | None = None
    occurrences: int = 1
    explains: list["Diagnosis"] = field(default_factory=list)
    liveness: dict | None = None
    version: str | None = None
    version_advice: str | None = None
    notes: list[str] = field(default_factory=list)
    rank: int = 0
    # How the evidence names the rule: exact (a rebuilt traceback as the rule wrote it), loose
    # (the message inside another wrapper), frames (exception line cut), line (a log line),
    # fallback (no rule knew it).
    strength: str = "exact"
    # How many server runs of its own input came after this one's (0: the latest run). Runs of
    # different inputs are compared by this, never by the order the inputs were given in.
    run_age: int = 0
    # The symptom rule this root replaced when nothing in its own log explained it (see
    # analyze._promote_unexplained): `scan` may still find the root in another log beside it.
    promoted_from: str | None = None
    # The match this diagnosis was built from, until build_diagnoses gives it its exception.
    pending: "MatchedTraceback | None" = field(default=None, repr=False, compare=False)

    @property
    def confidence(self) -> str:
        """The rule's confidence, capped by how weak the evidence is."""
        cap = STRENGTH_CAP.get(self.strength, "high")
        return min(self.rule.confidence, cap, key=CONFIDENCE_ORDER.index)

    @property
    def exception_type(self) -> str | None:
        if self.exception is not None:
            return self.exception.type
        return self.event.exception_type if self.event is not None else None

    @property
    def corrupted(self) -> bool:
        return bool(self.traceback and self.traceback.corrupted)

    @property
    def time(self) -> str | None:
        if self.traceback is not None:
            return self.traceback.time
        return self.event.time if self.event else None

    @property
    def evidence(self) -> str:
        if self.exception is not None:
            head = self.exception.message_head
            return f"{self.exception.type}: {head}" if head else self.exception.type
        return self.event.text if self.event else ""

    def sort_key(self) -> tuple:
        # The latest server run of each input first: an earlier run's crash was already restarted from.
        # A rebuilt traceback outranks a log line naming the same kind of failure, which outranks
        # frames without their exception line. Across inputs the kind then decides (a root in the
        # engine's log beats the API server's EngineDeadError whichever file came first); the
        # input's name only breaks full ties, so argument order never matters.
        # A note (nothing to fix: a harmless message, a stop cut short) never hides a finding, and
        # a warning (a request refused, the server still up) never hides a root that is an error.
        return rank_key(self.run_age, self.rule, self.strength, self._unexplained_abort_dump(), self.corrupted,
                        self.role, self.line, self.input, self.epoch)

    def _unexplained_abort_dump(self) -> bool:
        """A faulthandler dump of SIGABRT no rule named: abort() is what a C++ terminate, an
        assert() or a watchdog calls after printing its reason, so a line naming a known failure
        (the watchdog's CUDA error) says more than the dump of its effect."""
        exc = self.exception
        return (self.strength == "fallback" and exc is not None and exc.type == "Fatal Python error"
                and exc.message.startswith("Aborted"))

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.rule.id, self.exception, self.event)


def rank_key(run_age: int, rule: Rule, strength: str, abort_dump: bool, corrupted: bool, role: str, line: int,
             input: str, epoch: int) -> tuple:
    """Diagnosis.sort_key from its parts: grouping 100 K matches ranks each before making its
    Diagnosis, and makes one only for a match that ranks best so far."""
    return (run_age, rule.severity == "note", KIND_RANK[rule.kind], rule.severity == "warning" and rule.kind == "root",
            ABORT_DUMP_CLASS if abort_dump else EVIDENCE_CLASS.get(strength, 0), rule.fallback,
            corrupted and strength != "exact", ROLE_RANK.get(role, 1), line, STRENGTH_RANK.get(strength, 0),
            -rule.priority, -rule.specificity, input, -epoch)


def event_strength(event: Event, rule: Rule) -> str:
    """A line rule's line is its exact evidence. A traceback rule's own line pattern, written for
    that very line, names the failure (above a fatal traceback no rule knows, below the rule's
    traceback); a line that only carries the rule's exception message quotes it."""
    if rule.is_line_rule and not event.exception_type:
        return "exact"
    return "line-pattern" if event.line_pattern else "line"


def fingerprint_of(rule_id: str, exception: ExceptionInfo | None, event: Event | None = None) -> str:
    """What copies of one failure share: the rule, the exception's type and message without
    numbers or paths, and its innermost vLLM frames (or the event's normalized text)."""
    if exception is not None and len(exception.frames) <= MAX_KEYED_FRAMES and len(exception.message) <= MAX_KEYED_TEXT:
        # Copies of one exception (a crash loop's runs, 100 K processes' cut tracebacks) recur:
        # keyed by everything the fingerprint reads of it (small ones: a key holds them alive).
        key = (rule_id, exception.type, exception.message, tuple([(f.file, f.function) for f in exception.frames]))
        found = _FINGERPRINTS.get(key)
        if found is None:
            found = _FINGERPRINTS.put(key, _fingerprint(rule_id, exception, None))
        return found
    return _fingerprint(rule_id, exception, event)


_FINGERPRINTS: Memo[str] = Memo(1024)


def _fingerprint(rule_id: str, exception: ExceptionInfo | None, event: Event | None) -> str:
    parts = [rule_id]
    if exception is not None:
        parts.append(exception.type.rsplit(".", 1)[-1])
        parts.append(normalize_message(exception.message_head))
        in_app = [f for f in exception.frames if f.in_app][-3:]
        parts.extend(f"{_module(f.file)}:{f.function}" for f in in_app)
    elif event is not None:
        parts.append(normalize_message(event.text))
    return _digest("|".join(parts))


@dataclass(slots=True)
class MatchedTraceback:
    """A rule's match on a traceback, as kept until diagnoses are built: the exception is kept
    by its position in the traceback (which may be spooled to disk), with what ranking needs
    (its line) worked out while it was at hand. A message-implied exception that is not one of
    the traceback's own is kept as it is."""

    traceback: TracebackBase
    rule: Rule
    exception_ref: int | ExceptionInfo
    input_index: int
    epoch: int
    strength: str
    line: int
    input: str  # the traceback's, kept here: a spooled traceback reads them back from disk
    stream_id: str

    @classmethod
    def of(cls, tb: Traceback, rule: Rule, exc: ExceptionInfo, input_index: int, epoch: int,
           strength: str, kept: TracebackBase | None = None) -> "MatchedTraceback":
        """`kept`: what the rebuilder holds for `tb`, if not `tb` itself (a spooled stand-in)."""
        ref: int | ExceptionInfo = exc
        for i, own in enumerate(tb.exceptions):
            if own is exc:
                ref = i
                break
        return cls(tb if kept is None else kept, rule, ref, input_index, epoch, strength, exc.line or tb.end_line,
                   tb.input, tb.stream_id)

    @property
    def exception(self) -> ExceptionInfo:
        ref = self.exception_ref
        if not isinstance(ref, int):
            return ref
        tb = self.traceback
        if tb.spooled:
            return SpooledException(tb, ref)  # type: ignore[return-value]
        return tb.exceptions[ref]


_NORMALIZERS = [
    (re.compile(r"\s*Did you mean[^?]*\?"), ""),
    (re.compile(r"0x[0-9a-fA-F]+"), "0xX"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "S"),
    (re.compile(r"(?:/[\w.\-]+)+"), "/P"),
    (re.compile(r"\d+(?:\.\d+)?"), "N"),
]


@functools.lru_cache(maxsize=4096)
def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:16]


@functools.lru_cache(maxsize=4096)  # the same messages recur in every copy and rank
def normalize_message(text: str) -> str:
    for pattern, repl in _NORMALIZERS:
        text = pattern.sub(repl, text)
    return text.strip()[:200]


@functools.lru_cache(maxsize=4096)
def _module(path: str) -> str:
    path = path.replace("\\", "/")
    idx = path.rfind("/vllm/")
    if idx >= 0:
        path = path[idx + 1:]
    return path.rsplit(".", 1)[0].replace("/", ".")


# Clocks of two machines or containers drift, and one process logs its last line a little
# after another's: runs this close count as overlapping.
RUN_SLACK_S = 60.0
# vLLM's default API port: every server that kept it names it, so sharing it proves nothing.
DEFAULT_PORTS = frozenset({8000})


@dataclass
class RunLinks:
    """Which server runs of different inputs are one run (the API server's and the engine's logs
    of one pod). Keys are (input index, epoch). Runs that name different API ports are different
    servers; otherwise overlapping time windows decide, and where either run has no timestamps,
    a shared process id or a shared port other than the default one."""

    windows: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    pids: dict[int, set[int]] = field(default_factory=dict)  # per input
    ports: dict[tuple[int, int], set[int]] = field(default_factory=dict)  # per run
    last_epoch: dict[int, int] = field(default_factory=dict)  # per input
    when: Callable[["Diagnosis"], float | None] = lambda d: None  # a diagnosis' time in seconds

    def linked(self, a: tuple[int, int], b: tuple[int, int]) -> bool:
        if a[0] == b[0]:
            return a == b
        pa, pb = self.ports.get(a, set()), self.ports.get(b, set())
        if pa and pb and not pa & pb:
            return False  # one run serves on one port, whatever clocks or recycled pids say
        wa, wb = self.windows.get(a), self.windows.get(b)
        if wa is not None and wb is not None:
            # Clocks on both sides outrank a shared port: a port is reused run after run.
            return wa[0] <= wb[1] + RUN_SLACK_S and wb[0] <= wa[1] + RUN_SLACK_S
        if self.pids.get(a[0], set()) & self.pids.get(b[0], set()):
            return True
        return bool((pa & pb) - DEFAULT_PORTS)

    def same_run(self, a: "Diagnosis", b: "Diagnosis") -> bool:
        return self.linked((a.input_index, a.epoch), (b.input_index, b.epoch))


def build_diagnoses(matched_tracebacks: Iterable[MatchedTraceback],
                    events: list[tuple[Event, Rule, int, int, int]],
                    runs: RunLinks | None = None) -> list[Diagnosis]:
    """events: (event, rule, input_index, epoch, count)."""
    if runs is not None:
        last_epoch = runs.last_epoch
    else:  # without the inputs' own last runs, the latest run with evidence stands in
        matched_tracebacks = list(matched_tracebacks)
        last_epoch = {}
        for idx, epoch in [(m.input_index, m.epoch) for m in matched_tracebacks] + [(e[2], e[3]) for e in events]:
            last_epoch[idx] = max(last_epoch.get(idx, epoch), epoch)
    # The diagnoses of one (input, run, rule) merge into the best-ranked one (one crash seen in
    # the engine core and every rank, copies of it in one process), counting them all. Merged as
    # they come, so 100 K processes with one traceback each never hold 100 K Diagnosis objects
    # (nor a set of 100 K groups) at once.
    merged: dict[tuple, Diagnosis] = {}
    best_rank: dict[tuple, tuple] = {}  # merged[key].sort_key(), not worked out again for every copy
    event_streams = {(idx, epoch, rule.id, event.stream_id) for event, rule, idx, epoch, _count in events}
    covered_streams: set[tuple] = set()  # event streams with a traceback of the same rule

    # A diagnosis takes its exception only once it is sure to stay: a merged copy never reads
    # back the frames of a traceback spooled to disk. Each match is ranked before its Diagnosis
    # is made, and one is made only for a match that ranks best so far.
    for m in matched_tracebacks:
        tb, rule, idx, epoch = m.traceback, m.rule, m.input_index, m.epoch
        if (idx, epoch, rule.id, m.stream_id) in event_streams:
            covered_streams.add((idx, epoch, rule.id, m.stream_id))
        key = (idx, epoch, rule.id)
        best = merged.get(key)
        run_age = max(last_epoch.get(idx, epoch) - epoch, 0)
        role = tb.role
        # As sort_key ranks it now: its exception is not taken yet (pending), so no abort dump.
        rank = rank_key(run_age, rule, m.strength, False, bool(tb and tb.corrupted), role, m.line, m.input, epoch)
        if best is not None and rank >= best_rank[key]:
            best.occurrences += 1
            continue
        diag = Diagnosis(rule, m.input, idx, m.stream_id, role, m.line, epoch, traceback=tb, strength=m.strength)
        diag.pending = m
        diag.run_age = run_age
        if best is not None:
            diag.occurrences += best.occurrences
        merged[key], best_rank[key] = diag, rank
    for event, rule, idx, epoch, count in events:
        if (idx, epoch, rule.id, event.stream_id) in covered_streams:
            continue  # a traceback of the same rule says it better
        diag = Diagnosis(rule, event.input, idx, event.stream_id, event.role, event.line, epoch, event=event,
                         occurrences=count, strength=event_strength(event, rule))
        diag.run_age = max(last_epoch.get(idx, epoch) - epoch, 0)
        key = (idx, epoch, rule.id)
        best = merged.get(key)
        rank = diag.sort_key()
        if best is None:
            merged[key], best_rank[key] = diag, rank
        elif rank < best_rank[key]:
            diag.occurrences += best.occurrences
            merged[key], best_rank[key] = diag, rank
        else:
            best.occurrences += diag.occurrences
    for diag in merged.values():
        if diag.pending is not None:
            diag.exception, diag.pending = diag.pending.exception, None
    return sorted(merged.values(), key=Diagnosis.sort_key)


def _attach_across_inputs(diags: list[Diagnosis], roots: list[Diagnosis], attached: set[int],
                          runs: RunLinks | None) -> None:
    """A symptom whose own input has no root in its run (the API server's EngineDeadError in
    api.log) hangs under the root that explains it in a linked run of another input."""
    if runs is None:
        return
    runs_with_a_root = {(r.input_index, r.epoch) for r in roots}
    for d in diags:
        if d.rule.kind != "symptom" or id(d) in attached:
            continue
        if (d.input_index, d.epoch) in runs_with_a_root:
            continue  # its own log has a root: the pass below decides
        candidates = [r for r in roots if r.input_index != d.input_index and d.rule.id in r.rule.explains
                      and runs.same_run(r, d)]
        best = closest_root(runs.when(d), [(r, runs.when(r)) for r in candidates])
        if best is None:
            continue
        best.explains.append(d)
        attached.add(id(d))


def attach_symptoms(diags: list[Diagnosis], runs: RunLinks | None = None) -> list[Diagnosis]:
    """Symptoms a root explains hang under it; unexplained symptoms stay top-level."""
    top: list[Diagnosis] = []
    attached: set[int] = set()
    roots = [d for d in diags if d.rule.kind != "symptom"]
    _attach_across_inputs(diags, roots, attached, runs)
    # Attaching only ever happens within one server run of one input: a crash loop of thousands
    # of runs compares each diagnosis with its own run's, not with every other.
    same_run: dict[tuple[int, int], list[Diagnosis]] = {}
    for d in diags:
        same_run.setdefault((d.input_index, d.epoch), []).append(d)
    for root in roots:
        for d in same_run[(root.input_index, root.epoch)]:
            if id(d) in attached or d is root:
                continue
            explained = d.rule.kind == "symptom" and d.rule.id in root.rule.explains
            # An unknown fatal traceback after a known root in the same server run is part of
            # that crash's cascade (e.g. V0's "Engine background task failed" after the timeout).
            # A log line quoting a known message is weaker than a fatal traceback: it never
            # absorbs one.
            cascade = d.rule.fallback and not root.rule.fallback and root.strength != "line" and d.line > root.line
            if explained or cascade:
                root.explains.append(d)
                attached.add(id(d))
    # With no root in the log, the most upstream symptom still explains its own cascade
    # (a killed worker -> "Executor failed" -> EngineDeadError), also a symptom of it logged
    # first (the shm_broadcast waits of the engine core while the worker hung, then died),
    # unless that one explains it in turn.
    for head in diags:
        if head.rule.kind != "symptom" or id(head) in attached or not head.rule.explains:
            continue
        for d in same_run[(head.input_index, head.epoch)]:
            if d.rule.kind == "symptom" and d is not head and id(d) not in attached \
                    and d.rule.id in head.rule.explains \
                    and (d.sort_key() > head.sort_key() or head.rule.id not in d.rule.explains):
                head.explains.append(d)
                attached.add(id(d))
    for d in diags:
        if id(d) not in attached:
            top.append(d)
    for i, d in enumerate(top, 1):
        d.rank = i
    return top


def closest_root(t: float | None, candidates: list[tuple[T, float | None]]) -> T | None:
    """Which of the linked roots (with their times) a symptom at time `t` hangs under. Two pods'
    logs in one folder overlap in time: the root closest before the symptom is its cause (a
    symptom well before a root is not its consequence). Without times, the first one."""
    timed = [(abs(t - tr), i) for i, (_r, tr) in enumerate(candidates)
             if t is not None and tr is not None and t >= tr - RUN_SLACK_S]
    if timed:
        return candidates[min(timed)[1]][0]
    if candidates and (t is None or all(tr is None for _r, tr in candidates)):
        return candidates[0][0]
    return None


# -- versions ------------------------------------------------------------------------------
def version_advice(rule: Rule, version: str | None) -> str | None:
    return fixed_version_advice(str(rule.doc.get("fixed_in", "") or ""), rule.fixes, version)

"""Rules against evidence: which rule explains a traceback, which rules a line is evidence for.

Every regex runs under a timeout; a rule whose pattern times out is disabled for the rest of
the run and reported once (a hostile user rule cannot hang a scan).
"""

from __future__ import annotations

import re

from vcrash.classify.rules import REGEX_TIMEOUT_S, Rule, RulePack
from vcrash.rebuild.model import ExceptionInfo, Traceback
from vcrash.split import Line

FATAL_CONTEXT = re.compile(
    r"fatal error|failed to start|hit an exception|Engine background task failed|WorkerProc failed|"
    r"initialization failed|Engine loop has died|died unexpectedly|Error executing|Fatal|CRITICAL",
    re.IGNORECASE,
)
HANDLED_CONTEXT = re.compile(
    r"Exception in ASGI application|stream generator|Error in preprocessing|method failed|"
    r"pre-processing request|failed \(bad request\)|Failed to advance FSM|retry|Retrying|will be retried",
    re.IGNORECASE,
)


def _type_ok(rule: Rule, exc_type: str) -> bool:
    if not rule.exception_type:
        return True
    last = exc_type.rsplit(".", 1)[-1]
    return any(t == exc_type or t == last or exc_type.endswith("." + t) for t in rule.exception_type)


class Matcher:
    def __init__(self, pack: RulePack):
        ordered = sorted(pack.rules, key=lambda r: (-r.priority, -r.specificity, r.id))
        self.traceback_rules = [r for r in ordered if not r.is_line_rule and not r.fallback]
        self.line_rules = [r for r in ordered if r.is_line_rule]
        self.fallback_rules = [r for r in ordered if r.fallback]
        self.disabled: dict[str, str] = {}  # rule id -> why (regex timeout)
        self.line_tokens = sorted({tok for r in self.line_rules for tok in r.prefilter})
        # One scan per line for every line rule's prefilter tokens, then only the rules whose
        # token occurred are evaluated.
        self._rules_by_token: dict[str, list[Rule]] = {}
        for rule in self.line_rules:
            for tok in rule.prefilter:
                self._rules_by_token.setdefault(tok, []).append(rule)
        self._token_scan = (re.compile("|".join(re.escape(t) for t in sorted(self.line_tokens, key=len, reverse=True)))
                            if self.line_tokens else None)
        self._unfiltered = [r for r in self.line_rules if not r.prefilter]

    # -- regex under a timeout ------------------------------------------------------------
    def _search(self, rule: Rule, pattern, text: str) -> bool:
        try:
            return pattern.search(text, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            self.disabled.setdefault(rule.id, f"regex {pattern.pattern[:60]!r} timed out; rule skipped")
            return False

    # -- tracebacks -----------------------------------------------------------------------
    def match_traceback(self, tb: Traceback, stream_name: str) -> tuple[Rule, ExceptionInfo] | None:
        if not tb.exceptions:
            return None
        haystack = _haystack(tb)
        for rule in self.traceback_rules:
            if rule.id in self.disabled:
                continue
            if rule.prefilter and not any(tok in haystack for tok in rule.prefilter):
                continue
            if not (rule.process_ok(stream_name) or (tb.process_hint and rule.process_ok(tb.process_hint))):
                continue
            if rule.context is not None and not (tb.context and self._search(rule, rule.context, tb.context)):
                continue
            if rule.frames_any and not self._frames_ok(rule, tb):
                continue
            for exc in tb.exceptions:
                if not _type_ok(rule, exc.type):
                    continue
                if rule.exception_message is not None and not self._search(rule, rule.exception_message, exc.message):
                    continue
                return rule, exc
        if self.fallback_rules and is_fatal(tb):
            exc = crash_exception(tb)
            if exc is not None:
                return self.fallback_rules[0], exc
        return None

    def _frames_ok(self, rule: Rule, tb: Traceback) -> bool:
        for exc in tb.exceptions:
            for fr in exc.frames:
                where = f"{fr.file}:{fr.function}"
                if any(self._search(rule, p, where) for p in rule.frames_any):
                    return True
            for native in exc.native_frames:
                if any(self._search(rule, p, native) for p in rule.frames_any):
                    return True
        return False

    # -- lines ----------------------------------------------------------------------------
    def match_line(self, line: Line) -> list[Rule]:
        text = line.payload
        candidates = list(self._unfiltered)
        if self._token_scan is not None and self._token_scan.search(text) is not None:
            seen = set()
            for tok, rules in self._rules_by_token.items():
                if tok in text:
                    for rule in rules:
                        if rule.id not in seen:
                            seen.add(rule.id)
                            candidates.append(rule)
        if not candidates:
            return []
        hits = []
        for rule in sorted(candidates, key=lambda r: (-r.priority, r.id)):
            if rule.id in self.disabled or not rule.process_ok(line.stream.name):
                continue
            if any(self._search(rule, p, text) for p in rule.lines_any):
                hits.append(rule)
        return hits


def _haystack(tb: Traceback) -> str:
    parts = []
    for exc in tb.exceptions:
        parts.append(exc.type)
        parts.append(exc.message)
        for fr in exc.frames:
            parts.append(fr.file)
            if fr.function:
                parts.append(fr.function)
        parts.extend(exc.native_frames)
    if tb.context:
        parts.append(tb.context)
    return "\n".join(parts)


def is_fatal(tb: Traceback) -> bool:
    """Did this traceback end a process or the engine (as opposed to one handled request)?"""
    if tb.kind in ("faulthandler", "cpp-abort"):
        return True
    if tb.context_kind in ("process", "thread"):
        return True
    if tb.context_kind in ("ignored", "task"):
        return False
    ctx = tb.context or ""
    if ctx and HANDLED_CONTEXT.search(ctx):
        return False
    if ctx and FATAL_CONTEXT.search(ctx):
        return True
    if tb.level == "CRITICAL":
        return True
    # An uncaught exception prints a raw traceback with no log record in front of it.
    return not tb.headed and tb.context_kind is None and tb.level is None


def crash_exception(tb: Traceback) -> ExceptionInfo | None:
    """The root candidate: the first block's exception (the oldest link of the chain)."""
    for exc in tb.exceptions:
        if exc.type != "<truncated>":
            return exc
    return tb.exceptions[0] if tb.exceptions else None

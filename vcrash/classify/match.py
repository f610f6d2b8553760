"""Rules against evidence: which rule explains a traceback, which rules a line is evidence for.

Every regex runs under a timeout; a rule whose pattern times out is disabled for the rest of
the run and reported once (a hostile user rule cannot hang a scan).
"""

from __future__ import annotations

import hashlib

import re

from vcrash.classify.rules import REGEX_TIMEOUT_S, LazyPattern, Rule, RulePack
from vcrash.literals import LiteralGate
from vcrash.classify.bounded import required_literals
from vcrash.memo import MAX_KEYED_FRAMES, MAX_KEYED_TEXT, Memo
from vcrash.rebuild import grammar as g
from vcrash.rebuild.model import ExceptionInfo, Traceback
from vcrash.split import Line

FATAL_CONTEXT = re.compile(
    r"fatal error|failed to start|hit an exception|Engine background task failed|WorkerProc failed|"
    r"initialization failed|Engine loop has died|died unexpectedly|Error executing|Fatal|CRITICAL",
    re.IGNORECASE,
)
# The request handlers' own phrases, looser spellings of them, retries and client errors.
HANDLED_CONTEXT = re.compile("|".join((
    *g.REQUEST_HANDLER_PHRASES,
    r"stream generator", r"method failed", r"pre-processing request", r"Failed to advance FSM", r"retry",
    r"Retrying", r"will be retried", r"Error with model", r"BadRequest", r"code=4\d\d\b",
    r"\bfor request [\w-]{6,}",  # one request's failure, named by its id (a KV transfer, a parse)
)), re.IGNORECASE)


def _type_ok(rule: Rule, exc_type: str) -> bool:
    if not rule.exception_type:
        return True
    if exc_type.endswith(")") and "(" in exc_type:  # Ray's `RayTaskError(ValueError)`: either type
        outer, inner = exc_type[:-1].split("(", 1)
        return _type_ok(rule, outer) or _type_ok(rule, inner)
    last = exc_type.rsplit(".", 1)[-1].rsplit("::", 1)[-1]  # torch.X, c10::X
    return any(t == exc_type or t == last or exc_type.endswith(("." + t, "::" + t)) for t in rule.exception_type)


class Matcher:
    def __init__(self, pack: RulePack):
        # A rule's [[match.also]] signatures run as rules of their own; hits name the parent. A
        # rule only reached by promotion (only_from) may still be named directly by its signatures.
        ordered = sorted((v for r in pack.rules for v in ((r,) if not r.only_from else ()) + tuple(r.alternatives)),
                         key=lambda r: (-r.priority, -r.specificity, r.id))
        self.traceback_rules = [r for r in ordered if not r.is_line_rule and not r.fallback]
        self.line_rules = [r for r in ordered if r.is_line_rule]
        self.fallback_rules = [r for r in ordered if r.fallback]
        self.disabled: dict[str, str] = {}  # rule id -> why (regex timeout)
        self._cut_line_rules: list[Rule] | None = None  # made on first use (an input ending in a cut line)
        self.line_tokens = sorted({tok for r in self.line_rules for tok in r.prefilter})
        # One scan per line for every line rule's prefilter tokens, then only the rules whose
        # token occurred are evaluated.
        self._rules_by_token: dict[str, list[Rule]] = {}
        for rule in self.line_rules:
            for tok in rule.prefilter:
                self._rules_by_token.setdefault(tok, []).append(rule)
        self._token_scan = LiteralGate(self.line_tokens) if self.line_tokens else None
        self._unfiltered = [r for r in self.line_rules if not r.prefilter]
        # Rules whose frames alone can name them (a file or function, not a package directory).
        self._signature_rules = [(r, sig) for r in self.traceback_rules if r.kind != "symptom" and r.frames_alone
                                 for sig in [[p for p in r.frames_any if _names_a_frame(p.pattern)]] if sig]
        self._frame_cache: Memo[bool] = Memo(MAX_FRAME_CACHE)
        self._placing_rules: list | None = None  # made on first use (a cut traceback no rule names)
        self._eligible_cache: Memo[list[Rule]] = Memo()
        self._signature_cache: Memo[list[Rule]] = Memo()
        # (rule, position of the exception in the traceback, strength) per traceback content.
        self._result_cache: Memo[list[tuple[Rule, int, str]]] = Memo(MAX_RESULT_CACHE)
        # The stream's name changes an answer only through the rules limited to some processes:
        # the key holds which of those apply, not the name (100 K `[rankN]:` streams with one cut
        # traceback each must not miss every time).
        self._process_rules = [r for r in self.traceback_rules if r.process]
        self._process_limits: Memo[tuple] = Memo()  # process name -> which process-bound rules allow it
        self._line_cache: Memo[list[Rule]] = Memo()
        # Traceback rules that can also be read off a log line: those with prefilter tokens and
        # a message pattern (or line patterns of their own), not those that need the line above
        # a traceback (`context`), which a line alone does not have.
        self._message_rules = [r for r in self.traceback_rules
                               if r.prefilter and r.kind != "symptom" and (r.lines_any or r.exception_message)
                               and r.context is None]
        self._message_scan = _token_scan({t for r in self._message_rules for t in r.prefilter})
        line_tokens = {t for r in self._message_rules if r.lines_any for t in r.prefilter}
        self._lines_any_scan = _token_scan(line_tokens)
        # What the bulk scan looks for on behalf of the line patterns of line rules and traceback
        # rules (a message pattern alone applies to ERROR lines, which it reads anyway): each
        # rule's narrowest strings that every match holds (a token like "custom_all_reduce" is
        # also the file of every routine INFO line that module logs; "custom_all_reduce.cuh:" is
        # only in failures).
        self.fast_line_tokens = tuple(sorted(
            {tok for r in self.line_rules for tok in _narrowest_tokens(r, r.lines_any)}
            # A message rule's message pattern applies to an unleveled line too (a raw print).
            | {tok for r in self._message_rules if r.lines_any for tok in _narrowest_tokens(
                r, [*r.lines_any, *([r.message_anywhere] if r.message_anywhere is not None else [])])}))

    # -- regex under a timeout ------------------------------------------------------------
    def _search(self, rule: Rule, pattern, text: str) -> bool:
        if pattern.__class__ is LazyPattern and pattern.literal is not None:
            return pattern.literal(text)  # a plain string: tested as one, never compiled
        try:
            return pattern.search(text, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            self.disabled.setdefault(rule.id, f"regex {pattern.pattern[:60]!r} timed out; rule skipped")
            return False

    # -- tracebacks -----------------------------------------------------------------------
    def match_traceback(self, tb: Traceback, stream_name: str,
                        cut_tail: bool = False) -> list[tuple[Rule, ExceptionInfo, str]]:
        """Every rule the traceback is evidence for, as (rule, exception, strength).

        Each exception of a chain is matched on its own (a symptom rule on the wrapper must not
        hide the cause in the same chain). Strength: "exact" (type and message as the rule
        wrote them), "loose" (the message found inside another version's wrapper text),
        "frames" (the exception line is cut; the frames alone name the failure), "fallback".
        `cut_tail`: the traceback ends the input, so its last exception's message may be cut
        mid-word; a rule's message pattern may then match it as far as it goes.
        """
        if not tb.exceptions:
            return []
        if cut_tail:
            return self._match_traceback(tb, stream_name, cut_tail=True)  # the input's last: not kept
        # Copies of one traceback (ranks, a crash loop, 100 K processes' cut tracebacks) get the
        # same answer: what the checks below read is the key; an answer that made an exception
        # of its own (from a log message) is not kept.
        limits = None
        if self._process_rules:
            limits = self._process_limits.get(stream_name)
            if limits is None:
                limits = self._process_limits.put(
                    stream_name, tuple([r.process_ok(stream_name) for r in self._process_rules]))
        key = _result_key(tb, limits, len(self.disabled))
        if key is not None:
            known = self._result_cache.get(key)
            if known is not None:
                exceptions = tb.exceptions
                return [(rule, exceptions[i], strength) for rule, i, strength in known]
        hits = self._match_traceback(tb, stream_name)
        if key is not None:
            positions = []
            exceptions = tb.exceptions
            for rule, exc, strength in hits:
                position = next((i for i, own in enumerate(exceptions) if own is exc), None)
                if position is None:
                    break
                positions.append((rule, position, strength))
            else:
                self._result_cache.put(key, positions)
        return hits

    def _match_traceback(self, tb: Traceback, stream_name: str,
                         cut_tail: bool = False) -> list[tuple[Rule, ExceptionInfo, str]]:
        haystack = _haystack(tb)
        # Copies of one traceback (ranks, duplicates, a crash loop) share their rule candidates:
        # the haystack holds everything the content checks read. The process check stays out of
        # the key: 100 K ranks or processes with one traceback each must not miss every time.
        # A long haystack is kept by its digest: 4,096 of 200 KB each would hold 800 MB.
        key = (haystack if len(haystack) <= MAX_KEYED_TEXT else
               hashlib.blake2b(haystack.encode("utf-8", "surrogatepass"), digest_size=16).digest(), len(self.disabled))
        by_content = None if cut_tail else self._eligible_cache.get(key)
        cut_only: list[Rule] = []  # rules whose token a cut message may have lost
        if by_content is None:
            by_content = []
            for rule in self.traceback_rules:
                if rule.id in self.disabled:
                    continue
                if rule.prefilter and not any(tok in haystack for tok in rule.prefilter):
                    if cut_tail and rule.exception_message is not None and (
                            rule.context is None or tb.context and self._search(rule, rule.context, tb.context)) \
                            and (not rule.frames_any or self._frames_ok(rule, tb)):
                        cut_only.append(rule)
                    continue
                if rule.context is not None and not (tb.context and self._search(rule, rule.context, tb.context)):
                    continue
                if rule.frames_any and not self._frames_ok(rule, tb):
                    continue
                by_content.append(rule)
            if not cut_tail:
                self._eligible_cache.put(key, by_content)
        hint = tb.process_hint
        eligible = [rule for rule in by_content
                    if rule.process_ok(stream_name) or (hint and rule.process_ok(hint))]
        last = tb.exceptions[-1] if cut_tail else None
        cut_eligible = eligible + [rule for rule in cut_only
                                   if rule.process_ok(stream_name) or (hint and rule.process_ok(hint))]
        per_exception = [h for h in (self._match_exception(eligible, exc, cut_eligible if exc is last else None)
                                     for exc in tb.exceptions) if h]
        # One cause per traceback (the strongest, then a rule's own [match] before its [[match.also]]
        # signatures, then the rule's priority: vLLM's own wrapper of an OOM is more specific than
        # the raw OOM), plus the symptom it explains.
        causes = sorted((h for h in per_exception if h[0].kind != "symptom"),
                        key=lambda h: (h[2] != "exact", h[0].parent is not None, -h[0].priority))
        symptoms = [h for h in per_exception if h[0].kind == "symptom"]
        hits = causes[:1] + symptoms[:1]
        if not causes:
            # The cause quoted in text around the exceptions: vLLM 0.6's `Type('message')` record
            # right before the traceback, or a symptom's message that carries its cause
            # ("Worker failed with error '…'", "…find the original error: ValueError(…)").
            quoted = [(tb.context, tb.context_line or tb.start_line, None)] if tb.context else []
            quoted += [(h[1].message, h[1].line or tb.end_line, None) for h in symptoms]
            # A client's HTTP error carries the server's own message in the response body it
            # quotes (`openai.BadRequestError: Error code: 400 - {'error': {'message': …}}`).
            quoted += [(e.message, e.line or tb.end_line, None) for e in tb.exceptions
                       if _CLIENT_HTTP_ERROR.search(e.type) and "message" in e.message]
            # Another writer's text inside the region (a prompt printed mid-traceback): the
            # traceback's own exception is what was raised.
            quoted += [(text, tb.start_line, crash_exception(tb)) for text in tb.foreign]
            for text, line, own in quoted:
                found = self._message_rules_for(text, stream_name)
                if found:
                    rule, implied, _how = found[0]
                    exc = own if own is not None and own.type != "<truncated>" else \
                        ExceptionInfo(implied or "<from log message>", text, None, [], line=line)
                    hits.insert(0, (rule, exc, "loose"))
                    causes = [hits[0]]
                    break
        if not causes and _exception_lost(tb):
            # The message (and with it the prefilter token) was cut: the frames decide alone.
            signed = self._signature_cache.get(key)
            if signed is None:
                callees = cut_callees(tb)
                signed = self._signature_cache.put(key, [
                    rule for rule, signature in self._signature_rules
                    if rule.id not in self.disabled and (self._frames_ok(rule, tb, signature)
                                                         or callees and _calls_signature(signature, callees))])
            named = next((rule for rule in signed if rule.process_ok(stream_name)), None)
            if named is not None:
                hits.insert(0, (named, tb.exceptions[-1], "frames"))
        if not any(h[0].kind != "symptom" for h in hits) and self.fallback_rules and (symptoms or is_fatal(tb)):
            exc = crash_exception(tb)
            if exc is not None and all(exc is not h[1] for h in symptoms):
                hits.insert(0, (self.fallback_rules[0], exc, "fallback"))
        return [(rule.parent or rule, exc, strength) for rule, exc, strength in hits]

    def _match_exception(self, eligible: list[Rule], exc: ExceptionInfo,
                         cut_eligible: list[Rule] | None = None) -> tuple[Rule, ExceptionInfo, str] | None:
        """`cut_eligible`: the exception line may be cut mid-message (the input ends there): these
        rules may match it as far as it goes."""
        if exc.type == "<truncated>":
            return None
        # A wrapper whose message carries the original exception line ("InductorError: RuntimeError:
        # … out of memory", Ray's remote traceback inside RayTaskError): the original is the cause.
        for inner_type, inner_message in _inner_exceptions(exc.message):
            for rule in eligible:
                pattern = rule.message_anywhere or rule.exception_message
                if rule.kind != "symptom" and _type_ok(rule, inner_type) and (
                        pattern is None or self._search(rule, pattern, inner_message)):
                    return rule, exc, "loose"
        typed = [r for r in eligible if _type_ok(r, exc.type)]
        # A message wrapped over lines (a paste's or the program's own wrap at a space) also
        # matches as one line: "… is less than desired\nGPU memory utilization …".
        unwrapped = _unwrapped(exc.message)
        for rule in typed:
            if rule.exception_message is None or self._search(rule, rule.exception_message, exc.message) \
                    or unwrapped is not None and self._search(rule, rule.exception_message, unwrapped):
                return rule, exc, "exact"
        for rule in typed:
            loose = rule.message_anywhere
            if loose is not None and loose is not rule.exception_message and rule.kind != "symptom" \
                    and not loose.pattern.rstrip().endswith("$") and self._search(rule, loose, exc.message):
                return rule, exc, "loose"
        # A message that ends its sentence was not cut ("… is not supported yet."): a pattern's
        # gap (`.{0,80}`) would otherwise take any such ending for the start of its own text.
        if cut_eligible is not None and "\n" not in exc.message and len(exc.message) <= MAX_CUT_MESSAGE \
                and not exc.message.rstrip().endswith(_SENTENCE_ENDS):
            for rule in (r for r in cut_eligible if _type_ok(r, exc.type)):
                if rule.exception_message is not None and self._search_cut(rule, rule.exception_message, exc.message):
                    return rule, exc, "loose"
        return None

    def _search_cut(self, rule: Rule, pattern, message: str) -> bool:
        """The pattern matches the message, or up to its end and would go on past it: the message
        is the start of one the rule knows, cut (at least MIN_CUT_MATCH characters of it; the
        rule's token may be what the cut took)."""
        try:
            m = pattern.search(message, partial=True, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            self.disabled.setdefault(rule.id, f"regex {pattern.pattern[:60]!r} timed out; rule skipped")
            return False
        return m is not None and (not m.partial or m.end() == len(message)) and m.end() - m.start() >= MIN_CUT_MATCH

    # -- message evidence on log lines ------------------------------------------------------
    def match_cut_last_line(self, line: Line) -> list[tuple[Rule, str]]:
        """The input's last line, an exception line (`Type: message`) outside any traceback that
        no rule matched: its message may be cut mid-word, as a traceback's last exception may
        (an excerpt that ends inside the line); a rule whose message pattern it starts, far enough,
        names it. (rule, the exception type)."""
        exc = g.exception_line(line.payload.strip())
        if exc is None:
            return []
        exc_type, message = exc
        if "\n" in message or len(message) > MAX_CUT_MESSAGE or message.rstrip().endswith(_SENTENCE_ENDS):
            return []
        if self._cut_line_rules is None:
            self._cut_line_rules = [r for r in self.traceback_rules if r.kind != "symptom"
                                    and r.exception_message is not None and not r.frames_any and not r.context]
        for rule in self._cut_line_rules:
            if rule.id in self.disabled or not rule.process_ok(line.stream.name) or not _type_ok(rule, exc_type):
                continue
            if self._search_cut(rule, rule.exception_message, message):
                return [(rule.parent or rule, exc_type)]
        return []

    def match_message_line(self, line: Line) -> list[tuple[Rule, str | None, str]]:
        """Traceback rules whose message (or line pattern) a log line carries outside any
        traceback: an ERROR line with the message but no type, a `Type('message')` repr, a
        symptom's message quoting its cause. (rule, the exception type it implies, "line" when
        one of the rule's own line patterns matched or "message" when its message pattern did)."""
        # A message pattern speaks for a failure on an error line or an unleveled one (a raw
        # print); warnings quote conditions that vLLM works around. Line patterns, written for
        # lines, apply at any level.
        leveled = line.level in (None, "ERROR", "CRITICAL")
        scan = self._message_scan if leveled else self._lines_any_scan  # INFO/WARNING: line patterns only
        return self._message_rules_for(line.payload, line.stream.name, leveled=leveled, scan=scan)

    def _message_rules_for(self, text: str, stream_name: str, leveled: bool = True,
                           scan=None) -> list[tuple[Rule, str | None, str]]:
        scan = scan if scan is not None else self._message_scan
        if scan is None or len(text) > 20000 or not scan(text):
            return []
        repr_type = _REPR.search(text)
        hits = []
        by_line_pattern = False
        for rule in self._message_rules:
            if rule.id in self.disabled or not any(tok in text for tok in rule.prefilter):
                continue
            if not rule.process_ok(stream_name):
                continue
            how = "line" if any(self._search(rule, p, text) for p in rule.lines_any) else None
            if how is None and leveled and rule.message_anywhere is not None and not rule.frames_any \
                    and self._search_nonempty(rule, rule.message_anywhere, text):
                how = "message"
            if how is not None:
                by_line_pattern |= how == "line"
                implied = repr_type.group("type") if repr_type and _type_ok(rule, repr_type.group("type")) else \
                    (rule.exception_type[0] if rule.exception_type else None)
                hits.append((rule, implied, how))
        # A line pattern, written for this very line, says more than a message pattern that only
        # finds the exception's text in it (the OOM a layer's weight allocation logged is not
        # a generic runtime OOM).
        kept, named = [], set()
        for rule, implied, how in hits:
            rule = rule.parent or rule
            if not (by_line_pattern and how == "message") and rule.id not in named:
                named.add(rule.id)
                kept.append((rule, implied, how))
        return kept

    def _search_nonempty(self, rule: Rule, pattern, text: str) -> bool:
        try:
            m = pattern.search(text, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            self.disabled.setdefault(rule.id, f"regex {pattern.pattern[:60]!r} timed out; rule skipped")
            return False
        return m is not None and m.end() - m.start() >= MIN_LINE_MATCH

    def placed_by_frames(self, tb: Traceback) -> list[Rule]:
        """Rules whose frames only place a failure (`frames_alone = false`) and that this
        traceback's frames hold: for one cut before its exception line, the known failures of
        the place where it was cut (the lost line would decide among them)."""
        placing = self._placing_rules
        if placing is None:
            placing = self._placing_rules = [
                (r, sig) for r in self.traceback_rules if r.kind != "symptom" and not r.frames_alone
                for sig in [[p for p in r.frames_any if _names_a_frame(p.pattern)]] if sig]
        return [rule for rule, signature in placing
                if rule.id not in self.disabled and self._frames_ok(rule, tb, signature)]

    def _frames_ok(self, rule: Rule, tb: Traceback, patterns=None) -> bool:
        patterns = rule.frames_any if patterns is None else patterns
        for exc in tb.exceptions:
            for fr in exc.frames:
                if self._frame_hit(rule, patterns, f"{fr.file}:{fr.function}"):
                    return True
            for native in exc.native_frames:
                if self._frame_hit(rule, patterns, native):
                    return True
        return False

    def _frame_hit(self, rule: Rule, patterns, where: str) -> bool:
        # The same frames recur in every copy of a traceback and in every rank's: remember.
        key = (rule.id, len(patterns), where)
        hit = self._frame_cache.get(key)
        if hit is None:
            hit = self._frame_cache.put(key, any(self._search(rule, p, where) for p in patterns))
        return hit

    # -- lines ----------------------------------------------------------------------------
    def match_line(self, line: Line) -> list[Rule]:
        # A repeated line (a warning every step, a run of identical records) is matched once.
        if len(line.payload) > MAX_KEYED_TEXT:
            return self._match_line(line)  # not kept: 4,096 long lines would hold a GB
        key = (line.payload, line.stream.name, len(self.disabled))
        hits = self._line_cache.get(key)
        if hits is None:
            hits = self._line_cache.put(key, self._match_line(line))
        return hits

    def _match_line(self, line: Line) -> list[Rule]:
        text = line.payload
        candidates = list(self._unfiltered)
        if self._token_scan is not None and self._token_scan(text):
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
                rule = rule.parent or rule
                if all(hit is not rule for hit in hits):
                    hits.append(rule)
        return hits


# Characters a narrowed needle may add to a rule's token: none that a JSON record, a Markdown
# paste or a shell quote writes otherwise than the message holds them (the raw line is scanned).
_PLAIN_NEEDLE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;=-()")


MIN_PLAIN_NEEDLE = 12  # a required string without any of the rule's tokens: this long at least


def _narrowest_tokens(rule: Rule, patterns) -> tuple[str, ...]:
    """The strings a line must hold for one of `patterns` (the rule's) to match it: for each
    pattern, the strings every match holds (bounded.required_literals), where each holds one of
    the rule's prefilter tokens and adds only plain characters, or is a long run of plain
    characters; else the tokens themselves (never a shorter, broader needle)."""
    def narrow(lit: str) -> bool:
        if any(tok in lit and set(lit.replace(tok, "")) <= _PLAIN_NEEDLE_CHARS for tok in rule.prefilter):
            return True
        return len(lit) >= MIN_PLAIN_NEEDLE and set(lit) <= _PLAIN_NEEDLE_CHARS

    narrowed: list[str] = []
    for pattern in patterns:
        # A bundled pattern's are kept in the cache folder (parsing ~60 patterns cost every run ~8 ms).
        required = pattern._facts()[1] if pattern.__class__ is LazyPattern else required_literals(pattern.pattern)
        if not required or not all(narrow(lit) for lit in required):
            return tuple(rule.prefilter)
        narrowed += required
    return tuple(narrowed) if narrowed else tuple(rule.prefilter)


def _token_scan(tokens: set[str]) -> LiteralGate | None:
    """One search for any of the tokens."""
    return LiteralGate(tokens) if tokens else None


MAX_FRAME_CACHE = 50000
# A match shorter than this on a log line is not evidence (a pattern that accepts anything).
MIN_LINE_MATCH = 8
MIN_CUT_MATCH = 16  # a message cut mid-word must carry this much of what a rule matches
MAX_CUT_MESSAGE = 4096  # a longer last line is not searched again by every rule (each under a timeout)
_SENTENCE_ENDS = (".", "!", "?")  # a last message ending so was not cut
_REPR = re.compile(r"(?<![\w.])(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Timeout))\((?:'|\")")


def _inner_exceptions(message: str) -> list[tuple[str, str]]:
    """Exception lines inside a message: its first line's `Type: …` prefix, and lines of a
    remote traceback it quotes; each also inside the one before it (a re-raise that wrote the
    cause's `Type: ` into its message, a page template's "Error: Error: Error: …")."""
    found = []
    for text in message.split("\n")[:MAX_INNER_LINES]:
        exc = g.exception_line(text.strip())
        for _ in range(MAX_NESTED):
            if exc is None or not exc[1]:
                break
            found.append(exc)
            exc = g.exception_line(exc[1].strip())
    return found


MAX_INNER_LINES = 60
MAX_NESTED = 4  # `Type: ` prefixes peeled off one message


def _names_a_frame(pattern: str) -> bool:
    """A frame pattern specific enough to name a failure alone: a file or a function, not a
    whole package directory."""
    return r"\.py" in pattern or pattern.rstrip().endswith("$") or re.search(r"(?<!\?):", pattern) is not None


# A call in a frame's source line: `name(` (a method's, an attribute's or a plain function's).
_CALL = re.compile(r"([A-Za-z_]\w*)\s*\(")
# The function part of a frame pattern ("file\.py:name$"), when it is a plain name or names.
_FUNCTION_PART = re.compile(r"(?<!\(\?):(\w+|\(\?:\w+(?:\|\w+)*\))\$$")


def cut_callees(tb: Traceback) -> list[str]:
    """The functions the last frame's source line calls. Every frame but the innermost shows the
    call into the next one, so where a paste was cut after a frame, the frame it lost is one of
    these (the innermost's line is the raise, whose "call" names no function of vLLM's)."""
    frames = tb.exceptions[-1].frames
    code = frames[-1].code if frames else None
    return _CALL.findall(code) if code else []


def _calls_signature(signature, callees: list[str]) -> bool:
    """A signature frame's function is among the calls of the frame where the paste was cut."""
    for pattern in signature:
        m = _FUNCTION_PART.search(pattern.pattern)
        if m is not None and any(re.fullmatch(m.group(1), name) for name in callees):
            return True
    return False


def _exception_lost(tb: Traceback) -> bool:
    """The exception line is missing or only inferred: frames are all that is left."""
    last = tb.exceptions[-1]
    return last.type == "<truncated>" or last.inferred


MAX_RESULT_CACHE = 1024  # a traceback with longer messages or more frames is matched every time


def _result_key(tb: Traceback, process_limits: tuple | None, disabled: int) -> tuple | None:
    """Everything match_traceback reads of a traceback but its line numbers (which only an
    answer with an exception of its own uses, and such answers are not kept)."""
    size = len(tb.context) if tb.context else 0
    frames = 0
    for e in tb.exceptions:
        size += len(e.message)
        frames += len(e.frames) + len(e.native_frames)
    if size > MAX_KEYED_TEXT or frames > MAX_KEYED_FRAMES:
        return None
    exceptions = [(e.type, e.message, e.relation, e.inferred, tuple(e.native_frames),
                   tuple([(f.file, f.function) for f in e.frames])) for e in tb.exceptions]
    return (process_limits, disabled, tb.process_hint, tb.kind, tb.context, tb.context_kind, tb.level, tb.headed,
            tuple(tb.foreign), tuple(exceptions))


# Client libraries' exceptions for an HTTP error status, whose text holds the server's reply.
_CLIENT_HTTP_ERROR = re.compile(
    r"^(?:openai\.(?:\w+Error)|httpx\.HTTPStatusError|requests\.exceptions\.HTTPError|aiohttp\.\w*ClientResponseError"
    r"|litellm\.\w+Error|\w+\.(?:BadRequestError|InternalServerError|APIStatusError|UnprocessableEntityError))$")


def _unwrapped(message: str) -> str | None:
    """A multi-line message as one line (its lines' ends joined by a space), or None."""
    if "\n" not in message:
        return None
    return " ".join(part.strip() for part in message.split("\n") if part.strip())


def _haystack(tb: Traceback) -> str:
    parts = []
    for exc in tb.exceptions:
        parts.append(exc.type)
        parts.append(exc.message)
        if "\n" in exc.message:
            parts.append(_unwrapped(exc.message))  # prefilter tokens a wrap split
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
    if _through_the_engine_loop(tb):
        return True  # one request's traceback, but what it carries is the engine loop's death
    if tb.context_kind == "handler":
        return False  # a request module's logger wrote it (cut above its handler frames, too)
    ctx = tb.context or ""
    if ctx and HANDLED_CONTEXT.search(ctx):
        return False
    if ctx and FATAL_CONTEXT.search(ctx):
        return True
    if _logged_by_a_request_handler(tb):
        return False
    if tb.level in ("CRITICAL", "ERROR"):
        return True
    if _reached_the_top(tb):
        return True  # uncaught up to a script's module level, whatever level a wrapper re-logged it at
    if tb.level in ("WARNING", "INFO", "DEBUG"):
        return False
    # An uncaught exception prints a raw traceback, whatever line came before it.
    return not tb.headed


# V0's AsyncLLMEngine: its background loop's own frames, and the callback that fails every
# request when the loop task ends. A request's traceback through them reports the engine's death.
ENGINE_LOOP_FRAMES = frozenset({"run_engine_loop", "_raise_exception_on_finish"})


def _through_the_engine_loop(tb: Traceback) -> bool:
    return any(fr.function in ENGINE_LOOP_FRAMES for exc in tb.exceptions for fr in exc.frames)


# The OpenAI server's per-request handlers: a traceback whose outermost frame is one of them was
# caught and logged there (`logger.exception`), and only that request failed.
REQUEST_HANDLERS = frozenset({
    "chat_completion_stream_generator", "completion_stream_generator", "chat_completion_full_generator",
    "completion_full_generator", "responses_stream_generator", "responses_full_generator",
})


def _reached_the_top(tb: Traceback) -> bool:
    """The outermost frame is a script's module level (`bin/vllm`, `python -m`): nothing caught
    the exception, so it ended the process."""
    frames = tb.exceptions[0].frames if tb.exceptions else None
    return bool(frames) and frames[0].function in ("<module>", "_run_module_as_main")


def _logged_by_a_request_handler(tb: Traceback) -> bool:
    frames = tb.exceptions[0].frames if tb.exceptions else None
    return bool(frames) and frames[0].function in REQUEST_HANDLERS and "/vllm/" in frames[0].file.replace("\\", "/")


# First links of an implicit chain that are the code's own plumbing: the error raised while
# handling them is what the user acts on (a lookup's KeyError -> "model not found").
INTERNAL_FIRST_LINKS = ("StopIteration", "StopAsyncIteration", "JSONDecodeError", "KeyError", "IndexError")


def crash_exception(tb: Traceback) -> ExceptionInfo | None:
    """The root candidate: the first block's exception (the oldest link of the chain), unless
    it is an internal one that the next link, raised while handling it, translates."""
    real = [e for e in tb.exceptions if e.type != "<truncated>"]
    for i, exc in enumerate(real):
        nxt = real[i + 1] if i + 1 < len(real) else None
        if nxt is not None and nxt.relation == "context" and exc.type.rsplit(".", 1)[-1] in INTERNAL_FIRST_LINKS:
            continue
        return exc
    return tb.exceptions[0] if tb.exceptions else None

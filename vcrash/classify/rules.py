"""Rule files: loading, validation, and the bundled pack.

A rule is one TOML file (`rules/<id>.toml`, field names fixed by the design contract). User
folders given with `--rules DIR` add rules or override bundled ones by id. A broken file is a
`RuleError` whose message names the file: the CLI prints it as one line and exits 2.
"""

from __future__ import annotations

import copy
import fnmatch
import re
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from vcrash.classify.bounded import bounded, required_literals
from vcrash.classify.versions import UPGRADE_PLACEHOLDER, Fix, FixError, fixes_all, parse_fixes, upgrade_step

KINDS = ("root", "context", "symptom")
SEVERITIES = ("error", "warning", "note")
CONFIDENCES = ("high", "medium", "low")
DOC_REQUIRED = ("summary", "why", "resolution")
MATCH_KEYS = {"prefilter", "exception_type", "exception_message", "frames_any", "lines_any", "process",
              "context", "fallback", "recovered_by_progress", "void_after_stop", "only_from", "frames_alone",
              "also", "phase_of", "phases"}
# The start-up phases a rule's `phases` may name (classify/signals.STARTUP_PHASES, then the engine's
# start before any of them), latest first: a finding is placed by the latest one the log reached.
PHASES = ("graph capture", "memory profiling", "weights loaded", "engine start-up")
# The keys of a [[match.also]] block: another signature of the same failure.
ALSO_KEYS = {"prefilter", "exception_type", "exception_message", "frames_any", "lines_any", "process", "context",
             "frames_alone"}
# The keys a rule file may have outside [match] (unknown ones are typos: `rules lint` says so).
TOP_KEYS = {"id", "title", "kind", "severity", "confidence", "priority", "explains", "match", "doc", "repro",
            "liveness"}
DOC_KEYS = {"summary", "why", "resolution", "collect", "references", "affected_versions", "fixed_in", "fixes",
            "guard"}
LIVENESS_KEYS = {"enabled", "timeout_env", "default_timeout_s", "stalled_role", "covers", "env_unit"}
REPRO_KEYS = {"scenario"}
# Each regex search gets this long before it is abandoned (catastrophic user patterns).
REGEX_TIMEOUT_S = 0.25


class RuleError(Exception):
    """A rule file that cannot be used; str() is one line naming the file."""


@dataclass
class Rule:
    id: str
    title: str
    kind: str
    severity: str
    confidence: str
    priority: int
    explains: list[str]
    prefilter: list[str]
    exception_type: list[str]
    exception_message: regex.Pattern | None
    frames_any: list[regex.Pattern]
    lines_any: list[regex.Pattern]
    process: list[str]
    context: regex.Pattern | None
    fallback: bool
    doc: dict
    repro: dict
    path: str
    liveness: bool = False
    timeout_env: str | None = None
    default_timeout_s: float | None = None
    stalled_role: str | None = None  # the role of the process a timeout gives up on
    deadline_covers: str = "step"  # step | startup: what the deadline has to fit, to size it
    timeout_env_unit: str = "s"  # s | ms: the unit of the variable that sets it
    # A hang indicator that is void when work visibly resumed after its last occurrence.
    recovered_by_progress: bool = False
    # A symptom that a voluntary stop (SIGTERM, Ctrl-C) produces by itself.
    void_after_stop: bool = False
    # Its frames_any name the failure even when the exception line was cut (false: they only
    # place an exception of the rule's type, e.g. a loop every failure passes through).
    frames_alone: bool = True
    bundled: bool = True
    raw: dict = field(default_factory=dict)
    # Never matched directly: what the named symptom becomes when nothing in its server run
    # explains it (e.g. an engine core that died while serving, with no cause and no stop).
    only_from: str | None = None
    # A finding of rule `phase_of` that names no phase of its own (an OOM seen only as a line),
    # before the server was ready, is this rule's when the log had reached one of `phases`.
    phase_of: str | None = None
    phases: list[str] = field(default_factory=list)
    # The message pattern without its leading '^': found inside another version's wrapper
    # ("Error in model execution: CUDA error: …") or a log line. Same object when unanchored.
    message_anywhere: regex.Pattern | None = None
    # [[doc.fixes]]: the releases that fixed it, per sub-case (see classify/versions.py).
    fixes: list[Fix] = field(default_factory=list)
    # [[match.also]]: other signatures of the same failure, each a rule of its own for the
    # matcher only; what they match is reported as their parent.
    alternatives: list["Rule"] = field(default_factory=list, repr=False, compare=False)
    parent: "Rule | None" = field(default=None, repr=False, compare=False)
    # True when `explains` was left out and the pack gave it every symptom (roots only).
    explains_default: bool = False

    @property
    def is_line_rule(self) -> bool:
        return bool(self.lines_any) and not (self.exception_type or self.exception_message or self.frames_any
                                             or self.fallback)

    @property
    def specificity(self) -> int:
        return (bool(self.exception_type) + 2 * bool(self.exception_message) + bool(self.frames_any)
                + bool(self.context) + bool(self.process))

    def process_ok(self, name: str) -> bool:
        return not self.process or any(fnmatch.fnmatchcase(name, pat) for pat in self.process)

    @property
    def reproducer(self) -> str | None:
        scenario = (self.repro or {}).get("scenario")
        return f"vcrash repro run {self.id}" if scenario else None


def doc_versions(doc: dict) -> list[tuple[str, str]]:
    """The versions part of a rule's runbook, as (label, text) for every renderer."""
    facts = []
    if doc.get("affected_versions"):
        facts.append(("Affected", str(doc["affected_versions"])))
    if doc.get("fixed_in"):
        facts.append(("Fixed in", str(doc.get("fixed_in_text") or doc["fixed_in"])))
    return facts


def bundled_rules_dir() -> Path:
    # A source checkout uses its own rules/ (an editable install of another checkout would
    # otherwise map vcrash.rulepack to that one's); a wheel has the package.
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "rules" / "__init__.py").is_file():
        return checkout / "rules"
    try:
        path = Path(str(resources.files("vcrash.rulepack")))
        if path.is_dir():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "rules"


_UNKNOWN = object()


class LazyPattern:
    """A bundled rule's regex, compiled on first use: a run touches a handful of the pack's
    ~140 patterns, and compiling them all cost ~0.08 s of every start-up. The bundled pack's
    patterns are checked by `rules lint` and the test suite; user rules compile at load."""

    def __init__(self, pattern: str):
        self.pattern = pattern

    @property
    def literal(self) -> "LiteralTest | None":
        """Half the pack's patterns are a plain string (a frame's ':capture_model$', a message's
        words): a yes/no search for them is a string test, and they never need compiling.
        Worked out on first use, like the compile (start-up pays for neither)."""
        known = self.__dict__.get("_literal", _UNKNOWN)
        if known is _UNKNOWN:
            spec = self._facts()[0]
            known = self.__dict__["_literal"] = None if spec is None else LiteralTest(*spec)
        return known

    def _facts(self) -> tuple:
        shape = self.__dict__.get("_shape")
        if shape is None:
            from vcrash.classify.pattern_facts import facts

            shape = self.__dict__["_shape"] = facts(self.pattern, _pattern_facts)
        return shape

    def search(self, text: str, *args, **kwargs):
        """regex's search. A plain one (a timeout at most) on a text without the words every
        match holds is None at once; on a text short enough for the pattern's worst case it
        runs on the stdlib `re`: neither imports `regex`."""
        if not args and (not kwargs or kwargs.keys() == {"timeout"}):
            _literal, required, max_length = self._facts()
            if required is not None and not any(word in text for word in required):
                return None  # none of the words that every match holds is there: no engine needed
            if max_length is not None and len(text) <= max_length:
                quick = self.__dict__.get("_quick")
                if quick is None:
                    quick = self.__dict__["_quick"] = re.compile(self.pattern)
                return quick.search(text)
        return self._compiled().search(text, *args, **kwargs)

    def _compiled(self):
        compiled = self.__dict__.get("compiled")
        if compiled is None:
            import regex  # here: a small log compiles none of the pack's patterns (~6 ms import)

            compiled = self.__dict__["compiled"] = regex.compile(self.pattern, regex.V0)
        return compiled

    def __getattr__(self, name: str):  # match, finditer, ...
        if name.startswith("__") or name in ("compiled", "_shape", "_quick", "_literal"):
            raise AttributeError(name)
        return getattr(self._compiled(), name)


def _pattern_facts(pattern: str) -> tuple:
    """What LazyPattern reads of a pattern's shape, as builtins (kept between runs)."""
    literal = literal_test(pattern)
    quick = bounded(pattern)
    return (None if literal is None else (literal.literals, literal.at_start, literal.at_end),
            required_literals(pattern), None if quick is None else quick.max_length)


_REGEX_SYNTAX = frozenset(".^$*+?{}[]\\|()")
MAX_LITERALS = 16  # expansions of a pattern's groups and optional parts tested as strings


def literal_test(pattern: str) -> "LiteralTest | None":
    """`bool(regex.search(pattern, text))` as a string test, for a pattern that is a literal
    (punctuation may be escaped), or a few of them spelled with groups, alternatives and
    optional parts (`:_?initialize_model$`, `RPC call to (?:execute_model|sample_tokens) timed
    out`), with an optional '^' and '$': None for any other pattern. Without MULTILINE, '$'
    matches at the end and before a final newline."""
    start = pattern.startswith("^")
    body = pattern[1:] if start else pattern
    end = body.endswith("$") and not _escaped_at(body, len(body) - 1)
    body = body[:-1] if end else body
    parsed = _Expander(body).alternatives()
    if parsed is None or parsed[1] != len(body):
        return None
    literals, top_level_alternatives = parsed[0], parsed[2]
    if top_level_alternatives and (start or end):
        return None  # '^a|b' anchors only its first alternative
    return LiteralTest(tuple(dict.fromkeys(literals)), start, end)


def _escaped_at(text: str, i: int) -> bool:
    backslashes = 0
    while i > 0 and text[i - 1] == "\\":
        backslashes, i = backslashes + 1, i - 1
    return backslashes % 2 == 1


class _Expander:
    """Expands literal characters, `(?:…|…)` / `(…)` groups and `?` into every string the
    pattern can match; None past MAX_LITERALS or at any other syntax."""

    def __init__(self, text: str) -> None:
        self.text = text

    def alternatives(self, i: int = 0) -> "tuple[list[str], int, bool] | None":
        """The strings of `a|b|…` from i, the index where it ends (a ')' or the end), and
        whether there was more than one alternative."""
        out: list[str] = []
        alternatives = 0
        while True:
            seq = self.sequence(i)
            if seq is None:
                return None
            strings, i = seq
            out += strings
            alternatives += 1
            if len(out) > MAX_LITERALS:
                return None
            if i < len(self.text) and self.text[i] == "|":
                i += 1
                continue
            return out, i, alternatives > 1

    def sequence(self, i: int) -> "tuple[list[str], int] | None":
        text, strings = self.text, [""]
        while i < len(text) and text[i] not in "|)":
            c = text[i]
            if c == "\\":
                nxt = text[i + 1:i + 2]
                if not nxt or nxt.isalnum() or nxt.isspace() or not nxt.isascii():
                    return None  # \d, \s, \n, \1 …: a class, an escape or a reference
                atom, i = [nxt], i + 2
            elif c == "(":
                if text.startswith("(?:", i):
                    i += 3
                elif text.startswith("(?", i):
                    return None  # look-arounds, flags, named groups
                else:
                    i += 1
                inner = self.alternatives(i)
                if inner is None or inner[1] >= len(text) or text[inner[1]] != ")":
                    return None
                atom, i = inner[0], inner[1] + 1
            elif c in _REGEX_SYNTAX:
                return None
            else:
                atom, i = [c], i + 1
            if i < len(text) and text[i] == "?":
                if text[i + 1:i + 2] in ("?", "+"):
                    return None
                atom, i = [*atom, ""], i + 1
            if i < len(text) and text[i] in "*+{":
                return None
            strings = [s + a for s in strings for a in atom]
            if len(strings) > MAX_LITERALS:
                return None
        return strings, i


class LiteralTest:
    """A literal pattern's search as a string test (a class, not a closure: packs are pickled to
    scan workers). `literals`: the strings the pattern can match, any of which will do."""

    __slots__ = ("literals", "at_start", "at_end")

    def __init__(self, literals: tuple[str, ...], at_start: bool, at_end: bool) -> None:
        self.literals, self.at_start, self.at_end = literals, at_start, at_end

    def __call__(self, text: str) -> bool:
        if self.at_end:
            body = text[:-1] if text.endswith("\n") else text
            if self.at_start:
                return text in self.literals or body in self.literals
            return text.endswith(self.literals) or body.endswith(self.literals)
        if self.at_start:
            return text.startswith(self.literals)
        return any(lit in text for lit in self.literals)

    def __reduce__(self):
        return (LiteralTest, (self.literals, self.at_start, self.at_end))


def _compile(pattern: object, where: str, lazy: bool = False) -> regex.Pattern:
    if not isinstance(pattern, str):
        raise RuleError(f"{where}: expected a regex string, got {type(pattern).__name__}")
    if lazy:
        return LazyPattern(pattern)  # type: ignore[return-value]
    import regex

    try:
        return regex.compile(pattern, regex.V0)
    except regex.error as exc:
        raise RuleError(f"{where}: invalid regex {pattern!r}: {exc}") from None


def _unanchored(pattern: regex.Pattern | None, where: str, lazy: bool = False) -> regex.Pattern | None:
    """'^X' -> 'X'; a pattern that only says what the message is not ('^(?!…)') stays None."""
    if pattern is None:
        return None
    text = pattern.pattern
    if not text.startswith("^"):
        return pattern
    if text.startswith("^(?!"):
        return None
    return _compile(text[1:], where, lazy)


def _str_list(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RuleError(f"{where}: expected a string or a list of strings")
    return list(value)


def load_rule_file(path: Path, bundled: bool, data: dict | None = None) -> Rule:
    """`data`: the file's parsed TOML, when known (the bundled pack's, from the cache)."""
    name = str(path)
    try:
        if data is None:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{name}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise RuleError(f"{name}: not UTF-8 (byte {exc.start}): a rule file is UTF-8 TOML") from None
    except OSError as exc:
        raise RuleError(f"{name}: cannot read: {exc.strerror or exc}") from None
    try:
        return _build(data, path, bundled)
    except RuleError:
        raise
    except Exception as exc:  # a value of the wrong shape anywhere
        raise RuleError(f"{name}: malformed rule: {exc}") from None


def _build(data: dict, path: Path, bundled: bool) -> Rule:
    name = str(path)
    rid = data.get("id")
    if not isinstance(rid, str) or not rid:
        raise RuleError(f"{name}: missing 'id'")
    for key, allowed in (("kind", KINDS), ("severity", SEVERITIES)):
        if data.get(key) not in allowed:
            raise RuleError(f"{name}: '{key}' must be one of {', '.join(allowed)}")
    confidence = data.get("confidence", "medium")
    if confidence not in CONFIDENCES:
        raise RuleError(f"{name}: 'confidence' must be one of {', '.join(CONFIDENCES)}")
    match = data.get("match")
    if not isinstance(match, dict):
        raise RuleError(f"{name}: missing [match] table")
    unknown = set(match) - MATCH_KEYS
    if unknown:
        raise RuleError(f"{name}: unknown [match] key(s): {', '.join(sorted(unknown))}")
    priority = data.get("priority", 50)
    if not isinstance(priority, int):
        raise RuleError(f"{name}: 'priority' must be an integer")
    liveness = data.get("liveness", {})
    if not isinstance(liveness, dict):
        raise RuleError(f"{name}: [liveness] must be a table")
    doc = data.get("doc", {})
    if not isinstance(doc, dict):
        raise RuleError(f"{name}: [doc] must be a table")
    try:
        fixes = parse_fixes(doc.get("fixes"))
    except FixError as exc:
        raise RuleError(f"{name}: {exc}") from None
    doc = _with_fixes(doc, fixes, name)
    rule = Rule(
        id=rid,
        title=str(data.get("title", rid)),
        kind=data["kind"],
        severity=data["severity"],
        confidence=confidence,
        priority=priority,
        explains=_str_list(data.get("explains"), f"{name}: explains"),
        **_signature(match, name, bundled),
        fallback=bool(match.get("fallback", False)),
        doc=doc,
        repro=data.get("repro", {}) if isinstance(data.get("repro", {}), dict) else {},
        path=name,
        liveness=bool(liveness.get("enabled", False)),
        timeout_env=liveness.get("timeout_env"),
        default_timeout_s=liveness.get("default_timeout_s"),
        stalled_role=liveness.get("stalled_role"),
        deadline_covers=str(liveness.get("covers", "step")),
        timeout_env_unit=str(liveness.get("env_unit", "s")),
        recovered_by_progress=bool(match.get("recovered_by_progress", False)),
        void_after_stop=bool(match.get("void_after_stop", False)),
        bundled=bundled,
        raw=data,
        fixes=fixes,
    )
    rule.message_anywhere = _unanchored(rule.exception_message, name, bundled)
    only_from = match.get("only_from")
    if only_from is not None and not isinstance(only_from, str):
        raise RuleError(f"{name}: only_from must be a rule id")
    rule.only_from = only_from
    phase_of, phases = match.get("phase_of"), _str_list(match.get("phases"), f"{name}: phases")
    if phase_of is not None and not isinstance(phase_of, str):
        raise RuleError(f"{name}: phase_of must be a rule id")
    if bool(phase_of) != bool(phases):
        raise RuleError(f"{name}: phase_of and phases go together")
    unknown = [ph for ph in phases if ph not in PHASES]
    if unknown:
        raise RuleError(f"{name}: unknown phase {unknown[0]!r} (one of: {', '.join(PHASES)})")
    rule.phase_of, rule.phases = phase_of, phases
    if not (rule.exception_type or rule.exception_message or rule.frames_any or rule.lines_any or rule.fallback
            or rule.only_from):
        raise RuleError(f"{name}: [match] needs at least one of exception_type, exception_message, "
                        "frames_any, lines_any")
    rule.alternatives = [_alternative(rule, block, f"{name}: [[match.also]] #{i + 1}", bundled)
                         for i, block in enumerate(_also_blocks(match.get("also"), name))]
    return rule


def _signature(table: dict, where: str, bundled: bool) -> dict:
    """The Rule fields a [match] table or a [[match.also]] block sets."""
    msg, ctx = table.get("exception_message"), table.get("context")
    return dict(
        prefilter=_str_list(table.get("prefilter"), f"{where}: prefilter"),
        exception_type=_str_list(table.get("exception_type"), f"{where}: exception_type"),
        exception_message=_compile(msg, f"{where}: exception_message", bundled) if msg else None,
        frames_any=[_compile(p, f"{where}: frames_any", bundled) for p in _str_list(table.get("frames_any"), where)],
        lines_any=[_compile(p, f"{where}: lines_any", bundled) for p in _str_list(table.get("lines_any"), where)],
        process=_str_list(table.get("process"), f"{where}: process"),
        context=_compile(ctx, f"{where}: context", bundled) if ctx else None,
        frames_alone=bool(table.get("frames_alone", True)),
    )


def _also_blocks(value, name: str) -> list[dict]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(b, dict) for b in value):
        raise RuleError(f"{name}: 'also' must be [[match.also]] tables")
    return value


def _alternative(rule: Rule, block: dict, where: str, bundled: bool) -> Rule:
    """One [[match.also]] block as a rule the matcher runs beside its parent: all its keys must
    hold, the parent's other keys do not apply; kind, priority, doc and liveness are the parent's."""
    unknown = set(block) - ALSO_KEYS
    if unknown:
        raise RuleError(f"{where}: unknown key(s): {', '.join(sorted(unknown))}")
    alt = replace(rule, **_signature(block, where, bundled), fallback=False, only_from=None, alternatives=[],
                  parent=rule)
    alt.message_anywhere = _unanchored(alt.exception_message, where, bundled)
    if not (alt.exception_type or alt.exception_message or alt.frames_any or alt.lines_any):
        raise RuleError(f"{where}: needs at least one of exception_type, exception_message, frames_any, lines_any")
    return alt


def _with_fixes(doc: dict, fixes: list[Fix], name: str) -> dict:
    """The doc as renderers see it: `fixed_in` and the "{upgrade}" step made from the fixes."""
    steps = doc.get("resolution")
    uses_step = isinstance(steps, list) and UPGRADE_PLACEHOLDER in steps
    if uses_step and not fixes:
        raise RuleError(f"{name}: a resolution step is {UPGRADE_PLACEHOLDER!r} but there are no [[doc.fixes]]")
    if not fixes:
        return doc
    doc = dict(doc)
    if not doc.get("fixed_in"):
        doc["fixed_in"] = fixes_all(fixes)
    doc["fixed_in_text"] = (f"{doc['fixed_in']} for every known case (in steps: "
                            f"{', '.join(f.version for f in fixes)}; see the upgrade step)")
    if uses_step:
        doc["resolution"] = [upgrade_step(fixes) if s == UPGRADE_PLACEHOLDER else s for s in steps]
    return doc


def _bundled_rules(folder: Path) -> list[Rule]:
    """The bundled pack's rules, built from the cache's copy of their parsed TOML when it was made
    from these very files (vcrash/classify/pack_cache.py), else parsed (and the copy saved)."""
    from vcrash.classify import pack_cache

    files = _rule_files(folder)
    try:
        blobs = [(p.name, p.read_bytes()) for p in files]
    except OSError:
        return [load_rule_file(p, bundled=True) for p in files]  # the file's own error, as ever
    where = pack_cache.cache_path(blobs)
    tables = pack_cache.load(where, [name for name, _ in blobs])
    if tables is not None:
        return [load_rule_file(p, bundled=True, data=tables[p.name]) for p in files]
    parsed: dict[str, dict] = {}
    built = []
    for path, (name, blob) in zip(files, blobs):
        try:
            parsed[name] = tomllib.loads(blob.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            built.append(load_rule_file(path, bundled=True))  # raises the file's own error
            continue
        built.append(load_rule_file(path, bundled=True, data=copy.deepcopy(parsed[name])))
    pack_cache.save(where, parsed)
    return built


def _rule_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.toml") if p.is_file())


@dataclass
class RulePack:
    rules: list[Rule]
    version: str
    sources: list[str]
    # (id, the file used, the file it replaced) for two files of one user folder with one id:
    # the later file wins, which is rarely what was meant.
    duplicates: list[tuple[str, str, str]] = field(default_factory=list)

    def get(self, rid: str) -> Rule | None:
        for rule in self.rules:
            if rule.id == rid:
                return rule
        return None


def load_pack(extra_dirs: list[str] | None = None, include_bundled: bool = True) -> RulePack:
    rules: dict[str, Rule] = {}
    sources: list[str] = []
    duplicates: list[tuple[str, str, str]] = []
    if include_bundled:
        folder = bundled_rules_dir()
        sources.append(str(folder))
        for rule in _bundled_rules(folder):
            if rule.id in rules:
                raise RuleError(f"{rule.path}: duplicate rule id {rule.id!r} (also in {rules[rule.id].path})")
            rules[rule.id] = rule
    for folder_name in extra_dirs or []:
        folder = Path(folder_name)
        if folder.is_file() and folder.suffix == ".toml":
            files = [folder]
        elif folder.is_dir():
            files = _rule_files(folder)
        else:
            raise RuleError(f"{folder_name}: rule folder not found")
        sources.append(str(folder))
        in_folder: dict[str, str] = {}
        for path in files:
            rule = load_rule_file(path, bundled=False)
            if rule.id in in_folder:
                duplicates.append((rule.id, str(path), in_folder[rule.id]))
            in_folder[rule.id] = str(path)
            rules[rule.id] = rule  # a user rule overrides a bundled one with the same id
    _default_explains(rules.values())
    return RulePack(list(rules.values()), _pack_version(rules.values()), sources, duplicates)


def _default_explains(rules) -> None:
    """A root that does not say what it explains explains every symptom of the pack (an engine
    core's death cascades the same way whatever killed it); `explains = [...]` narrows it."""
    symptoms = sorted(r.id for r in rules if r.kind == "symptom")
    for rule in rules:
        if rule.kind == "root" and "explains" not in rule.raw:
            rule.explains = list(symptoms)
            rule.explains_default = True


def _pack_version(rules) -> str:
    import hashlib

    h = hashlib.sha1()
    for rule in sorted(rules, key=lambda r: r.id):
        h.update(rule.id.encode())
        try:
            h.update(Path(rule.path).read_bytes())
        except OSError:
            pass
    from vcrash import __version__

    return f"{__version__}+{h.hexdigest()[:10]}"

"""`vcrash rules lint`: the pack's own consistency checks."""

from __future__ import annotations

import re

import regex

from vcrash.classify.rules import DOC_KEYS, DOC_REQUIRED, LIVENESS_KEYS, REPRO_KEYS, TOP_KEYS, RulePack
from vcrash.errors import did_you_mean

ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _patterns_of(rule) -> list:
    return [p for p in [rule.exception_message, rule.context, rule.message_anywhere, *rule.frames_any,
                        *rule.lines_any] if p is not None]


def lint_pack(pack: RulePack, samples_dir=None) -> list[tuple[str, str]]:
    from pathlib import Path

    from vcrash.harness import default_samples_dir, discover, parse_sample

    problems: list[tuple[str, str]] = []
    ids = {r.id for r in pack.rules}
    positives: dict[str, int] = {}
    folder = samples_dir or default_samples_dir()
    # A user rule folder keeps its samples in DIR/samples/<rule-id>/*.log.
    user_folders = sorted({Path(r.path).parent / "samples" for r in pack.rules if not r.bundled})
    for where in ([Path(folder)] if folder is not None else []) + [f for f in user_folders if f.is_dir()]:
        for path in discover(where):
            for rid in parse_sample(path).expect:
                positives[rid] = positives.get(rid, 0) + 1
    explained = {s for r in pack.rules if r.kind != "symptom" for s in r.explains}
    for rid, used, replaced in pack.duplicates:
        problems.append((rid, f"defined twice in one folder: {used} replaces {replaced}"))
    for rule in pack.rules:
        broken = False
        variants = (rule, *rule.alternatives)  # its [[match.also]] signatures are checked as it is
        for pattern in [p for v in variants for p in _patterns_of(v)]:
            try:
                pattern.search("")  # bundled patterns compile on first use: compile them here
            except regex.error as exc:
                problems.append((rule.id, f"invalid regex {pattern.pattern!r}: {exc}"))
                broken = True
        if broken:
            continue  # the checks below run its patterns
        if not ID_RE.match(rule.id):
            problems.append((rule.id, "id is not kebab-case"))
        if Path(rule.path).stem != rule.id:
            problems.append((rule.id, f"file name {Path(rule.path).name} does not match the id"))
        for key in DOC_REQUIRED:
            if not rule.doc.get(key):
                problems.append((rule.id, f"[doc] {key} is missing"))
        if not isinstance(rule.doc.get("resolution", []), list):
            problems.append((rule.id, "[doc] resolution must be a list of steps"))
        for v in variants:
            if not v.prefilter and not v.fallback and not v.only_from:
                where = "[match]" if v is rule else "[[match.also]]"
                problems.append((rule.id, f"{where} prefilter is empty (it drives the fast scanner)"))
        for target in rule.explains:
            if target not in ids:
                problems.append((rule.id, f"explains unknown rule {target!r}{did_you_mean(target, ids)}"))
        if rule.kind == "symptom" and rule.id not in explained and rule.bundled:
            problems.append((rule.id, "symptom is not explained by any root rule"))
        if rule.bundled and folder is not None and positives.get(rule.id, 0) == 0:
            problems.append((rule.id, "no positive sample"))
        if not rule.bundled and positives.get(rule.id, 0) == 0:
            problems.append((rule.id, f"no positive sample (put one in {Path(rule.path).parent / 'samples' / rule.id}/, "
                                      "see docs/rules.md)"))
        problems += _unknown_keys(rule)
        for v in variants:
            problems += _dead_prefilter_tokens(v)
            problems += _message_pattern_problems(v)
        problems += _version_problems(rule)
        if rule.only_from and rule.only_from not in ids:
            problems.append((rule.id, f"only_from names unknown rule {rule.only_from!r}"
                                      f"{did_you_mean(rule.only_from, ids)}"))
        if rule.phase_of and rule.phase_of not in ids:
            problems.append((rule.id, f"phase_of names unknown rule {rule.phase_of!r}"
                                      f"{did_you_mean(rule.phase_of, ids)}"))
        for v in variants:
            if v.is_line_rule:
                for tok in v.prefilter:
                    if not any(p.search(tok) or tok in p.pattern for p in v.lines_any):
                        problems.append((rule.id, f"prefilter token {tok!r} does not occur in any lines_any pattern"))
    return problems


def _message_pattern_problems(rule) -> list[tuple[str, str]]:
    """A message pattern that accepts an empty message, or only says what the message is not,
    lets a cut or abbreviated exception line slide into this rule."""
    pattern = rule.exception_message
    if pattern is None:
        return []
    try:
        accepts_empty = pattern.search("", timeout=0.25) is not None
    except TimeoutError:
        return [(rule.id, "exception_message times out on an empty message")]
    if accepts_empty:
        return [(rule.id, "exception_message accepts an empty message (a cut exception line would match): "
                          "require some text the message must contain")]
    return []


def _version_problems(rule) -> list[tuple[str, str]]:
    """One version answer: the headline, `fixed_in` and the fix steps name the same releases."""
    from vcrash.classify.versions import UPGRADE_PLACEHOLDER, fixes_all, stray_targets

    problems = []
    for version in stray_targets(rule.doc, rule.fixes):
        problems.append((rule.id, f"[doc] names upgrade target {version} that is neither fixed_in nor a "
                                  "[[doc.fixes]] version (the Version line would say otherwise)"))
    if rule.fixes:
        written = (rule.raw.get("doc") or {}).get("fixed_in")
        if written and written != fixes_all(rule.fixes):
            problems.append((rule.id, f"fixed_in {written} disagrees with [[doc.fixes]], whose last step is "
                                      f"{fixes_all(rule.fixes)}"))
        if UPGRADE_PLACEHOLDER not in ((rule.raw.get("doc") or {}).get("resolution") or []):
            problems.append((rule.id, f"has [[doc.fixes]] but no {UPGRADE_PLACEHOLDER!r} resolution step "
                                      "(the upgrade step is written from them)"))
    return problems


def _unknown_keys(rule) -> list[tuple[str, str]]:
    """A misspelt key is silently ignored by the loader ([match] keys are checked there)."""
    problems = []
    for table, allowed, where in ((rule.raw, TOP_KEYS, "top-level"), (rule.raw.get("doc"), DOC_KEYS, "[doc]"),
                                  (rule.raw.get("liveness"), LIVENESS_KEYS, "[liveness]"),
                                  (rule.raw.get("repro"), REPRO_KEYS, "[repro]")):
        if not isinstance(table, dict):
            continue
        for key in sorted(set(table) - allowed):
            problems.append((rule.id, f"unknown {where} key {key!r}{did_you_mean(key, sorted(allowed))}"))
    return problems


def _dead_prefilter_tokens(rule) -> list[tuple[str, str]]:
    """A prefilter token that shares nothing with the rule's message pattern: the cheap scan
    looks for text the rule's evidence does not carry, so the rule may never run. (A message is
    searched, not matched whole, so text after the pattern is allowed: two words in common, or
    the pattern matching the token, is enough.)"""
    pattern = rule.exception_message
    # Bundled rules carry tokens for lines around their evidence too, proven by their samples.
    if rule.bundled or rule.is_line_rule or not rule.prefilter or pattern is None:
        return []  # line rules are checked against lines_any; a type-only rule leaves the message open
    carriers = [pattern, rule.context, *rule.frames_any]
    shape = " | ".join(_literal_shape(p.pattern) for p in carriers if p) + " | " + \
        " | ".join(_literal_shape(re.escape(t)) for t in rule.exception_type)
    problems = []
    for tok in rule.prefilter:
        words = _literal_shape(re.escape(tok)).split()
        pairs = [" ".join(words[i:i + 2]) for i in range(max(1, len(words) - 1))]
        if any(p and p in shape for p in pairs):
            continue
        try:
            if pattern.search(tok, timeout=0.25):
                continue
        except TimeoutError:
            continue
        problems.append((rule.id, f"prefilter token {tok!r} shares nothing with the rule's message, type, "
                                  "frame or context patterns (the scan would look for lines its evidence is not on)"))
    return problems


def _literal_shape(pattern: str) -> str:
    """A regex as the words it spells: `[Ee]rror` -> error, classes, groups and quantifiers
    dropped, escapes undone, `_` read as `-`."""
    text = re.sub(r"\[([A-Za-z])([A-Za-z])\]", lambda m: m.group(1) if m.group(1).lower() == m.group(2).lower()
                  else " ", pattern)
    text = re.sub(r"(?<!\\)\[(?:\\.|[^\]\\])*\]", " ", text)
    text = re.sub(r"\\[dDsSwWbBAZ]|\(\?[:!=<]+|(?<!\\)[()?*+^$|{}.]", " ", text)
    text = re.sub(r"\\(.)", r"\1", text)
    return " ".join(text.lower().replace("_", "-").split())

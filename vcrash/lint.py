"""`vcrash rules lint`: the pack's own consistency checks."""

from __future__ import annotations

import re

from vcrash.classify.rules import DOC_REQUIRED, RulePack
from vcrash.errors import did_you_mean

ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def lint_pack(pack: RulePack, samples_dir=None) -> list[tuple[str, str]]:
    from pathlib import Path

    from vcrash.harness import default_samples_dir, discover, parse_sample

    problems: list[tuple[str, str]] = []
    ids = {r.id for r in pack.rules}
    positives: dict[str, int] = {}
    folder = samples_dir or default_samples_dir()
    if folder is not None:
        for path in discover(Path(folder)):
            for rid in parse_sample(path).expect:
                positives[rid] = positives.get(rid, 0) + 1
    explained = {s for r in pack.rules if r.kind != "symptom" for s in r.explains}
    for rid, used, replaced in pack.duplicates:
        problems.append((rid, f"defined twice in one folder: {used} replaces {replaced}"))
    for rule in pack.rules:
        if not ID_RE.match(rule.id):
            problems.append((rule.id, "id is not kebab-case"))
        if Path(rule.path).stem != rule.id:
            problems.append((rule.id, f"file name {Path(rule.path).name} does not match the id"))
        for key in DOC_REQUIRED:
            if not rule.doc.get(key):
                problems.append((rule.id, f"[doc] {key} is missing"))
        if not isinstance(rule.doc.get("resolution", []), list):
            problems.append((rule.id, "[doc] resolution must be a list of steps"))
        if not rule.prefilter and not rule.fallback and not rule.only_from:
            problems.append((rule.id, "[match] prefilter is empty (it drives the fast scanner)"))
        for target in rule.explains:
            if target not in ids:
                problems.append((rule.id, f"explains unknown rule {target!r}{did_you_mean(target, ids)}"))
        if rule.kind == "symptom" and rule.id not in explained and rule.bundled:
            problems.append((rule.id, "symptom is not explained by any root rule"))
        if rule.bundled and folder is not None and positives.get(rule.id, 0) == 0:
            problems.append((rule.id, "no positive sample"))
        problems += _message_pattern_problems(rule)
        problems += _version_problems(rule)
        if rule.only_from and rule.only_from not in ids:
            problems.append((rule.id, f"only_from names unknown rule {rule.only_from!r}"
                                      f"{did_you_mean(rule.only_from, ids)}"))
        if rule.is_line_rule:
            for tok in rule.prefilter:
                if not any(p.search(tok) or tok in p.pattern for p in rule.lines_any):
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

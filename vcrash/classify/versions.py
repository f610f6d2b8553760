"""Fixed versions: one source of truth per rule, per sub-case where fixes landed in steps.

A rule's `[doc] fixed_in` names the release that fixes it. When fixes landed in steps, each
sub-case is one `[[doc.fixes]]` table (`version`, `case`, optional `since`: the first release
the sub-case is known to crash). From that table come the headline's advice for the log at
hand (the release that fixes every case its version can have), the upgrade step of the runbook
(a resolution step written as "{upgrade}") and `fixed_in` (the release that fixes them all).
`vcrash rules lint` flags a version named as an upgrade target anywhere else in the doc.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UPGRADE_PLACEHOLDER = "{upgrade}"


class FixError(ValueError):
    pass


@dataclass(frozen=True)
class Fix:
    version: str
    case: str
    since: str | None = None


def version_tuple(text: str) -> tuple[int, ...] | None:
    m = re.match(r"v?(\d+(?:\.\d+)*)", text.strip())
    if not m:
        return None
    return tuple(int(p) for p in m.group(1).split("."))


def parse_fixes(value: object) -> list[Fix]:
    """`[[doc.fixes]]` tables -> fixes, oldest version first; FixError says what is wrong."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise FixError("[[doc.fixes]] must be tables with version and case")
    fixes = []
    for i, table in enumerate(value, 1):
        unknown = set(table) - {"version", "case", "since"}
        if unknown:
            raise FixError(f"[[doc.fixes]] #{i}: unknown key(s) {', '.join(sorted(unknown))}")
        version, case, since = table.get("version"), table.get("case"), table.get("since")
        if not isinstance(version, str) or version_tuple(version) is None:
            raise FixError(f"[[doc.fixes]] #{i}: version must be a release such as \"0.25.0\"")
        if not isinstance(case, str) or not case.strip():
            raise FixError(f"[[doc.fixes]] #{i}: case must say which sub-case the release fixes")
        if since is not None and (not isinstance(since, str) or version_tuple(since) is None):
            raise FixError(f"[[doc.fixes]] #{i}: since must be a release such as \"0.8.0\"")
        if since is not None and version_tuple(since) >= version_tuple(version):
            raise FixError(f"[[doc.fixes]] #{i}: since {since} is not before the fix {version}")
        fixes.append(Fix(version, case.strip(), since))
    return sorted(fixes, key=lambda f: version_tuple(f.version))


def fixes_all(fixes: list[Fix]) -> str | None:
    return max(fixes, key=lambda f: version_tuple(f.version)).version if fixes else None


def upgrade_step(fixes: list[Fix]) -> str:
    """The runbook's upgrade step, from the fixes table (so it cannot disagree with the headline)."""
    first_since = min((version_tuple(f.since) for f in fixes if f.since), default=None)
    parts = []
    for f in fixes:
        later = f.since and version_tuple(f.since) != first_since
        parts.append(f"from {f.version} {f.case}" + (f" (seen from {f.since})" if later else ""))
    return (f"Upgrade vLLM to the release the Version line names for this log: {'; '.join(parts)}. "
            f">= {fixes_all(fixes)} fixes every known case.")


def version_advice(fixed_in: str, fixes: list[Fix], version: str | None) -> str | None:
    """The headline's advice: which release fixes the case this log's version can have."""
    fixed = fixes_all(fixes) or fixed_in
    if not fixed or version_tuple(fixed) is None:
        return None
    if version is None:
        return f"fixed in vLLM {fixed}: upgrade to >= {fixed} if the server runs an older release"
    have = version_tuple(version)
    if have is None:
        return None
    steps = fixes or [Fix(fixed, "")]
    open_ = [f for f in steps if have < version_tuple(f.version)
             and (f.since is None or have >= version_tuple(f.since))]
    if not open_:
        known = "every case known to affect it" if fixes else f"the fix (>= {fixed})"
        return f"this log's vLLM {version} already has {known}: look for another cause or a variant of this failure"
    return f"this log's vLLM {version} is affected: upgrade to >= {fixes_all(open_)}"


# An upgrade target named in prose: ">= 0.26.0", "≥ 0.26", "upgrade to 0.26.0", "0.26.0 or later".
_TARGET = re.compile(r"(?:>=|≥|\bupgrade (?:vllm )?to|\btarget)\s*v?(\d+\.\d+(?:\.\d+)?)|v?(\d+\.\d+(?:\.\d+)?) or later",
                     re.IGNORECASE)


def stray_targets(doc: dict, fixes: list[Fix]) -> list[str]:
    """Upgrade targets named in the doc's prose that are neither `fixed_in` nor a fix version."""
    known = {version_tuple(f.version) for f in fixes}
    if doc.get("fixed_in"):
        known.add(version_tuple(str(doc["fixed_in"])))
    texts = [doc.get("summary", ""), doc.get("why", ""), *(doc.get("resolution") or [])]
    found = []
    for text in texts:
        if not isinstance(text, str):
            continue
        for m in _TARGET.finditer(text):
            v = m.group(1) or m.group(2)
            if version_tuple(v) not in known and v not in found:
                found.append(v)
    return found

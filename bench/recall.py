"""Recall under damage: every sample, damaged each way of `vcrash.damage`, scored per damage.

    python3 bench/recall.py                 # the damage table over samples/
    python3 bench/recall.py --real DIR      # labelled real logs: DIR/*.log with DIR/*.json
                                            # {"expected_rule", "root_type", "root_line_in_text"}

Prints a markdown table (for bench/README.md); --failures lists what missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vcrash.analyze import Options, analyze  # noqa: E402
from vcrash.classify.match import Matcher  # noqa: E402
from vcrash.classify.rules import load_pack  # noqa: E402
from vcrash.damage import DAMAGES, SAME, damageable  # noqa: E402
from vcrash.harness import analyze_lines, discover, parse_sample  # noqa: E402
from vcrash.read import expand_inputs  # noqa: E402


def primary(report):
    return report.diagnoses[0] if report.diagnoses else None


def verdict(d) -> str:
    """The rule a label is compared with; a note-only finding (severity "note": nothing crashed,
    the CLI exits 0) is "none"."""
    return "none" if d is None or d.rule.severity == "note" else d.rule.id


def damage_table(show_failures: bool) -> None:
    pack = load_pack()
    matcher = Matcher(pack)
    kinds = {r.id: r.kind for r in pack.rules}
    samples = [parse_sample(p) for p in discover(ROOT / "samples")]
    samples = [s for s in samples if damageable(s)]
    rows = []
    failures = []
    t0 = time.perf_counter()
    for damage in DAMAGES:
        tally = Counter()
        for s in samples:
            lines = damage.apply(s)
            if lines is None:
                continue
            tally["n"] += 1
            p = primary(analyze_lines(str(s.path), lines, pack, matcher))
            want = s.expect[0]
            if p is None:
                tally["silent"] += 1
            elif p.rule.kind == "symptom" and kinds.get(want) != "symptom":
                tally["symptom"] += 1
            if p is not None and p.rule.id == want:
                tally["same"] += 1
            ok = (p is not None and p.rule.id == want) if damage.expect == SAME else \
                (p is not None and (p.rule.kind != "symptom" or kinds.get(want) == "symptom"))
            if ok:
                tally["ok"] += 1
            else:
                failures.append((damage.name, s.path.relative_to(ROOT), want, p.rule.id if p else "none"))
        rows.append((damage, tally))
    print("| damage | expects | samples | same rule | passes | symptom primary | silent |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for damage, t in rows:
        n = t["n"] or 1
        print(f"| {damage.name} | {damage.expect} | {t['n']} | {100 * t['same'] / n:.0f}% | "
              f"{100 * t['ok'] / n:.0f}% | {t['symptom']} | {t['silent']} |")
    print(f"\n{len(samples)} samples, {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    if show_failures:
        for f in failures:
            print("  ".join(map(str, f)), file=sys.stderr)


def real_table(folder: Path, show_failures: bool) -> None:
    pack = load_pack()
    kinds = {r.id: r.kind for r in pack.rules}
    tally = Counter()
    per_rule = defaultdict(Counter)
    misses = []
    for log in sorted(folder.rglob("*.log")):
        label_path = log.with_suffix(".json")
        if not label_path.exists():
            continue
        label = json.loads(label_path.read_text())
        report = analyze(expand_inputs([str(log)]), pack, Options())
        p = primary(report)
        want = label.get("expected_rule")
        if want == "unknown":
            want = "unclassified-crash"  # a crash no rule covers: the fallback rule is the right answer
        tally["n"] += 1
        got = verdict(p)
        if p is None:
            tally["silent"] += 1
        elif p.rule.kind == "symptom" and kinds.get(want) != "symptom":
            tally["symptom"] += 1
        if label.get("root_line_in_text", True):
            tally["rootable"] += 1
            if got == want:
                tally["rule"] += 1
        root_type = label.get("root_type")
        got_type = p.exception.type if p is not None and p.exception is not None else \
            (getattr(p.event, 'exception_type', None) if p is not None and p.event is not None else None)
        if root_type:
            tally["typed"] += 1
            if got_type and got_type.rsplit(".", 1)[-1].lower() == root_type.rsplit(".", 1)[-1].lower():
                tally["type"] += 1
        per_rule[want]["n"] += 1
        per_rule[want]["ok"] += got == want
        if got != want or (root_type and got_type is not None
                           and got_type.rsplit(".", 1)[-1].lower() != root_type.rsplit(".", 1)[-1].lower()):
            misses.append((log.relative_to(folder), want, got, root_type, got_type, label.get("damage", "")))
    n = tally["n"] or 1
    print(f"files: {tally['n']}")
    print(f"primary rule right (root line in text): {tally['rule']}/{tally['rootable']} "
          f"= {100 * tally['rule'] / (tally['rootable'] or 1):.0f}%")
    print(f"root exception type right (type printed): {tally['type']}/{tally['typed']} "
          f"= {100 * tally['type'] / (tally['typed'] or 1):.0f}%")
    print(f"symptom as primary: {tally['symptom']}   silent: {tally['silent']}   ({n} files)")
    if show_failures:
        for m in misses:
            print("  " + " | ".join(map(str, m)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", type=Path)
    ap.add_argument("--failures", action="store_true")
    args = ap.parse_args()
    if args.real:
        real_table(args.real, args.failures)
    else:
        damage_table(args.failures)


if __name__ == "__main__":
    main()

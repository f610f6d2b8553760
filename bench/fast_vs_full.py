"""How far the fast path is from exact: every sample analysed both ways, JSON compared.

    python3 bench/fast_vs_full.py [--prefix-lines N]

The fast path reads the first FULL_PREFIX_LINES lines in full (2,000), which hides its
differences on small samples; this sets it to N (default 0) so every sample takes the bulk
scan from its first byte. Prints the samples whose report differs (inputs and streams left out:
they count examined lines by design) and which parts differ. Pastes that analyze mends line by
line (hard-wrapped, double-spaced, newest first, …: `reflow.needs_mending`) never take the bulk
scan, so they are left out and counted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import vcrash.analyze as pipeline  # noqa: E402
from vcrash.classify.rules import load_pack  # noqa: E402
from vcrash.read import Source  # noqa: E402
from vcrash.redact import Redactor  # noqa: E402
from vcrash.split.reflow import SNIFF_LINES, needs_mending  # noqa: E402


def comparable(report) -> dict:
    data = report.to_dict(Redactor(True))
    data.pop("inputs", None)
    data.pop("streams", None)
    return data


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix-lines", type=int, default=0)
    args = ap.parse_args()
    pipeline.FULL_PREFIX_LINES = args.prefix_lines
    pack = load_pack()
    paths = sorted((ROOT / "samples").rglob("*.log"))
    mended = [p for p in paths if needs_mending(p.read_text(errors="replace").split("\n")[:SNIFF_LINES])]
    paths = [p for p in paths if p not in mended]
    differ = []
    for path in paths:
        source = [Source(str(path), str(path))]
        full = comparable(pipeline.analyze(source, pack, pipeline.Options(fast=False)))
        fast = comparable(pipeline.analyze(source, pack, pipeline.Options(fast=True)))
        if full != fast:
            differ.append((path.relative_to(ROOT), [k for k in full if full[k] != fast.get(k)]))
    print(f"{len(paths)} samples, {len(differ)} differ (prefix read in full: {args.prefix_lines} lines; "
          f"{len(mended)} mended pastes left out)")
    for rel, parts in differ:
        print(f"  {rel}: {', '.join(parts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

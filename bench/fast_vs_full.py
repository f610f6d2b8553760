"""How far the fast path is from exact: every sample analysed both ways, JSON compared.

    python3 bench/fast_vs_full.py [--prefix-lines N] [--embed]

The fast path reads the first FULL_PREFIX_LINES lines in full (2,000), which hides its
differences on small samples; this sets it to N (default 0) so every sample takes the bulk
scan from its first byte. Prints the samples whose report differs (inputs and streams left out:
they count examined lines by design) and which parts differ. Pastes that analyze mends line by
line (hard-wrapped, double-spaced, newest first, …: `reflow.needs_mending`) never take the bulk
scan, so they are left out and counted. `--embed` puts every sample inside a server's own log
instead: after four fifths of 1 MB of generated healthy traffic (three server runs; the first
start-up read as the census, the rest skipped by the bulk scan), before the last fifth, with
the normal prefix read in full.
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
    ap.add_argument("--embed", action="store_true", help="each sample inside generated server traffic")
    args = ap.parse_args()
    if args.embed:
        return embedded(load_pack())
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


def embedded(pack) -> int:
    import tempfile

    sys.path.insert(0, str(ROOT / "bench"))
    import gen_log

    from vcrash.harness import parse_sample

    with tempfile.TemporaryDirectory() as tmp:
        traffic = Path(tmp) / "healthy.log"
        gen_log.main([str(traffic), "--size", "1M", "--crashes", "0", "--seed", "3"])
        lines = traffic.read_text().splitlines(keepends=True)
        cut = len(lines) * 4 // 5
        before, after = "".join(lines[:cut]), "".join(lines[cut:])
        paths = sorted((ROOT / "samples").rglob("*.log"))
        paths = [p for p in paths if not needs_mending(p.read_text(errors="replace").split("\n")[:SNIFF_LINES])]
        differ = []
        log = Path(tmp) / "server.log"
        for path in paths:
            body = parse_sample(path).body  # without the fixture's header lines
            log.write_text(before + "".join(line + "\n" for line in body) + after)
            source = [Source(str(log), str(log))]
            full = comparable(pipeline.analyze(source, pack, pipeline.Options(fast=False)))
            fast = comparable(pipeline.analyze(source, pack, pipeline.Options(fast=True)))
            if full != fast:
                differ.append((path.relative_to(ROOT), [k for k in full if full[k] != fast.get(k)]))
    print(f"{len(paths)} samples inside {len(lines)} lines of server traffic, {len(differ)} differ")
    for rel, parts in differ:
        print(f"  {rel}: {', '.join(parts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

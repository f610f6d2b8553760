"""Does a text hold any of a set of literals? The per-line path asks this of every line several
times (the observer's gates, the line rules' and message rules' prefilter tokens). On a 1 KB
request log line an `re` alternation of a dozen literals takes ~7 us and a chain of `in` tests
~36 us; one Hyperscan pass takes 0.7 us. Short texts keep the `re` search (a scan call costs
more than it saves there), and so does every text where Hyperscan has no wheel or another
scanner was asked for (VCRASH_SCANNER). How short depends on the gate: the alternation costs
about 0.75 ns a character for each literal (measured: 73 literals, 2.5 us on 32 characters;
8 literals, 0.3 us), the scan call a flat 0.65 us."""

from __future__ import annotations

import os
import re
import sys
import threading

from vcrash.hsdb import block_database

SCAN_MIN = 200  # characters: a text this long makes the gate load Hyperscan (a 5 ms import)
# ... and so many texts long enough for a scan to pay off: a log, not a pasted traceback.
WARM_CALLS = 2000
SCAN_PAYS = 800  # characters x literals from where a scan call costs less than the regex search
SHORTEST_SCAN = 8
_UNSET = object()


class _PerThread(threading.local):
    """A scratch serves one scan at a time: each thread has its own scan function. Set up
    on each thread's first use, so reading it never misses (a missed attribute of a thread-local
    costs a raised and caught AttributeError, on every line)."""

    def __init__(self) -> None:
        self.scan = _UNSET  # not loaded yet; None: no Hyperscan for this gate
        self.calls = 0


class LiteralGate:
    """Does the text hold any of `literals`?"""

    def __init__(self, literals) -> None:
        # Longest first for `re`; ties in text order, so that every process builds the same
        # database (its digest names the compiled copy kept on disk, vcrash/hsdb.py).
        self.literals = tuple(sorted(set(literals), key=lambda t: (-len(t), t)))
        self.search = re.compile("|".join(re.escape(t) for t in self.literals)).search if self.literals else None
        self._database = None  # compiled on the first long text
        self.short_min = max(SHORTEST_SCAN, min(SCAN_MIN, SCAN_PAYS // max(1, len(self.literals))))
        self._local = _PerThread()

    def __call__(self, text: str) -> bool:
        if self.search is None:
            return False
        n = len(text)
        if n >= self.short_min:
            local = self._local
            scan = local.scan
            if scan is _UNSET:
                # Short inputs (a pasted traceback) never pay for loading Hyperscan, unless the
                # bulk scan of a big log has loaded it already.
                local.calls += 1
                scan = self._scan() if n >= SCAN_MIN or local.calls > WARM_CALLS or "hyperscan" in sys.modules \
                    else None
            if scan is not None:
                return scan(text)
        return self.search(text) is not None

    def _scan(self):
        scan = None
        hyperscan = _hyperscan()
        if hyperscan is not None and all(t.isascii() for t in self.literals):
            if self._database is None:
                self._database = block_database(hyperscan, [t.encode() for t in self.literals], literal=True)
            db, scratch, hits = self._database, hyperscan.Scratch(self._database), []

            def on_match(*_args) -> None:
                hits.append(True)

            def scan(text: str) -> bool:
                # ASCII literals match UTF-8 bytes exactly where they match the text.
                hits.clear()
                db.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=on_match, scratch=scratch)
                return bool(hits)
        self._local.scan = scan
        return scan


def _hyperscan():
    if os.environ.get("VCRASH_SCANNER", "") not in ("", "hyperscan"):
        return None
    try:
        import hyperscan
    except ImportError:
        return None
    return hyperscan

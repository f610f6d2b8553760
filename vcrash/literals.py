"""Does a text hold any of a set of literals? The per-line path asks this of every line several
times (the observer's gates, the line rules' and message rules' prefilter tokens). On a 1 KB
request log line an `re` alternation of a dozen literals takes ~7 us and a chain of `in` tests
~36 us; one Hyperscan pass takes 0.7 us. Short texts keep the `re` search (a scan call costs
more than it saves there), and so does every text where Hyperscan has no wheel or another
scanner was asked for (VCRASH_SCANNER)."""

from __future__ import annotations

import os
import re
import threading

SCAN_MIN = 200  # characters: a text this long makes the gate load Hyperscan (a 5 ms import)
SHORT_MIN = 40  # once loaded, a scan call costs less than the regex search from about here
_UNSET = object()


class LiteralGate:
    """`literals` (any of them in the text?); with `patterns=True` they are regular expressions
    that both `re` and Hyperscan read alike (no look-arounds, no back-references)."""

    def __init__(self, literals, patterns: bool = False) -> None:
        self.literals = tuple(sorted(set(literals), key=len, reverse=True))  # longest first for `re`
        self.patterns = patterns
        source = "|".join(self.literals if patterns else (re.escape(t) for t in self.literals))
        self.search = re.compile(source).search if self.literals else None
        self._database = None  # compiled on the first long text
        self._local = threading.local()  # a scratch serves one scan at a time: one per thread

    def __call__(self, text: str) -> bool:
        if self.search is None:
            return False
        n = len(text)
        if n >= SHORT_MIN:
            scan = getattr(self._local, "scan", _UNSET)
            if scan is _UNSET:
                # Short inputs (a pasted traceback) never pay for loading Hyperscan.
                scan = self._scan() if n >= SCAN_MIN else None
            if scan is not None:
                return scan(text)
        return self.search(text) is not None

    def _scan(self):
        scan = None
        hyperscan = _hyperscan()
        if hyperscan is not None and all(t.isascii() for t in self.literals):
            if self._database is None:
                db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                db.compile(expressions=[t.encode() for t in self.literals], ids=list(range(len(self.literals))),
                           elements=len(self.literals), flags=0, literal=not self.patterns)
                self._database = db
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

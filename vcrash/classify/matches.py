"""One input's rule matches on its tracebacks, past a budget kept in a spool file.

A log whose 100 K processes each left a cut traceback makes 100 K matches (200 K when each was
cut twice), all of which decide one diagnosis. The first KEEP_IN_MEMORY are MatchedTraceback
objects; later ones are tuples written to a SpoolFile a batch at a time, naming their traceback by
its position in the rebuilder's list, and become MatchedTraceback objects again, one at a time,
when the diagnoses are built.
"""

from __future__ import annotations

from collections.abc import Iterator

from vcrash.classify.diagnose import MatchedTraceback
from vcrash.classify.rules import Rule
from vcrash.rebuild.model import ExceptionInfo
from vcrash.rebuild.spool import decode_exceptions, encode_exceptions
from vcrash.spool import SpoolFile

KEEP_IN_MEMORY = 2000
BATCH = 1024


class Matches:
    """`tracebacks`: the rebuilder's TracebackStore (what a spooled match's position names);
    `replacements`: position -> how often a copy replaced the traceback there."""

    def __init__(self, tracebacks: list, replacements: dict[int, int]) -> None:
        self.in_memory: list[MatchedTraceback] = []
        self._tracebacks, self._replacements = tracebacks, replacements
        self._file: SpoolFile | None = None
        self._batches: list[tuple[int, int]] = []
        self._pending: list[tuple] = []
        self._rules: list[Rule] = []
        self._rule_index: dict[int, int] = {}
        self.keep_in_memory = KEEP_IN_MEMORY
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, m: MatchedTraceback, position: int) -> None:
        self._count += 1
        if len(self.in_memory) < self.keep_in_memory:
            self.in_memory.append(m)
            self._tracebacks.pin(m.traceback)  # replaced copies are told apart by identity
            return
        index = self._rule_index.get(id(m.rule))
        if index is None:
            index = self._rule_index[id(m.rule)] = len(self._rules)
            self._rules.append(m.rule)
        ref = m.exception_ref if isinstance(m.exception_ref, int) else encode_exceptions([m.exception_ref])[0]
        self._pending.append((position, self._replacements.get(position, 0), index, ref, m.epoch, m.strength,
                              m.line, m.input, m.stream_id))
        if len(self._pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._file is None:
            self._file = SpoolFile()
        self._batches.append(self._file.put(self._pending))
        self._pending = []

    def live(self, replaced: dict[int, object], input_index: int,
             liveness_only: bool = False) -> Iterator[MatchedTraceback]:
        """Every match whose traceback was not replaced by an earlier-starting copy since (only
        those of liveness rules: no object made for the others)."""
        for m in self.in_memory:
            if id(m.traceback) not in replaced and (m.rule.liveness or not liveness_only):
                yield m
        rules, tracebacks, replacements = self._rules, self._tracebacks, self._replacements
        for position, generation, rule, ref, epoch, strength, line, name, stream_id in self._records():
            if replacements.get(position, 0) != generation or liveness_only and not rules[rule].liveness:
                continue
            exc: int | ExceptionInfo = ref if isinstance(ref, int) else decode_exceptions([ref])[0]
            yield MatchedTraceback(tracebacks[position], rules[rule], exc, input_index, epoch, strength, line,
                                   name, stream_id)

    def _records(self) -> Iterator[tuple]:
        for where in self._batches:  # a batch at a time: never all of them at once
            yield from self._file.get(*where)
        yield from list(self._pending)

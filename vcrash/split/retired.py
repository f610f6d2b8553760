"""Stream records of idle processes, moved out of memory to a spool file.

A log where 100 K processes each wrote a few lines must not keep 100 K records alive: when the
rebuild stage drops an idle process's machine, the splitter retires its record here, in
batches. A process that writes again gets a new record; the report counts both as one. Which
processes came back is remembered in a fixed-size bit table (a false alarm only costs an exact
check when the report is written), so memory stays flat whatever the number of processes.
"""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring as _string  # the encoder's own, ensure_ascii off

from vcrash.spool import SpoolFile, external_sorted

BATCH = 4096
SEEN_BITS = 1 << 23  # 1 MiB
SEQ_BITS = 40  # stream order numbers stay below 2**40
SEQ_MASK = (1 << SEQ_BITS) - 1
# Returning processes merged in a dict of their ids up to this many (~18 MB), on disk past it.
IN_MEMORY_MERGE = 1 << 17


class RetiredStreams:
    def __init__(self) -> None:
        self._file = SpoolFile()
        self._batches: list[tuple[int, int, int]] = []  # (first seq, offset, size)
        self._pending: list[tuple] = []
        self._seen = b""  # bit per hash of a retired stream's key; allocated on the first retirement
        # Bit per hash of the id of a new record whose key may have been retired: a set of the
        # ids held 100 K strings when 100 K processes came back.
        self._back = b""
        self.count = 0
        self._seq = 0

    def next_seq(self, key: tuple, sid: str) -> int:
        """The order number of a new record; notes a process that may be writing again."""
        if self.count:
            bit = hash(key) % SEEN_BITS
            if self._seen[bit >> 3] & (1 << (bit & 7)):
                if not self._back:
                    self._back = bytearray(SEEN_BITS // 8)
                bit = hash(sid) % SEEN_BITS
                self._back[bit >> 3] |= 1 << (bit & 7)
        self._seq += 1
        return self._seq

    def add(self, st) -> None:
        if not self._seen:
            self._seen = bytearray(SEEN_BITS // 8)
        bit = hash((st.name, st.pid, st.ip)) % SEEN_BITS
        self._seen[bit >> 3] |= 1 << (bit & 7)
        self._pending.append((st.id, st.name, st.pid, st.role, st.ip, st.lines, st.seq))
        self.count += 1
        if len(self._pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._pending.sort(key=_seq)
            self._batches.append((self._pending[0][6], *self._file.put(self._pending)))
            self._pending = []

    def _records(self, live: list) -> Iterator[tuple]:
        sources = [(first, lambda where=where: iter(self._file.get(*where))) for first, *where in self._batches]
        if live:
            sources.append((live[0].seq, lambda: ((st.id, st.name, st.pid, st.role, st.ip, st.lines, st.seq)
                                                  for st in live)))
        return merge_by_seq(sources)

    def merged_with(self, live: Iterable) -> Iterator:
        """Retired and live records in order of first appearance, one per process."""
        from vcrash.split import Stream

        return itertools.starmap(Stream, self.merged_records(live))

    def merged_records(self, live: Iterable) -> Iterator[tuple]:
        """merged_with() as record tuples (id, name, pid, role, ip, lines, seq): what a writer
        of 100 K processes needs, without an object each."""
        self.flush()
        live = list(live)
        if not self._batches:
            yield from ((st.id, st.name, st.pid, st.role, st.ip, st.lines, st.seq) for st in live)
            return
        back = self._back_totals(live) if self._back else None
        if back is not None:
            get = back.get
            for record in self._records(live):
                total = get(record[0])
                if total is None:
                    yield record
                elif total & SEQ_MASK == record[6]:  # a later record is counted with its first
                    yield (*record[:5], total >> SEQ_BITS, record[6])
            return
        changes = self._merge_changes(live) if self._back else iter(())
        change = next(changes, None)
        for record in self._records(live):
            if change is not None and change[0] == record[6]:
                lines = change[1]
                change = next(changes, None)
                if lines < 0:
                    continue  # counted with its first record
                record = (*record[:5], lines, record[6])
            yield record

    def _unordered_records(self, live: list) -> Iterator[tuple]:
        """Every record, batch by batch, without merging the batches by seq (half the report's
        stream listing of 100 K returning processes went to merging twice). A process's first
        record still comes before its later ones: batches are in retirement order, each sorted,
        and a record is retired before its process can get the next one."""
        for _first_seq, *where in self._batches:
            yield from self._file.get(*where)
        yield from ((st.id, st.name, st.pid, st.role, st.ip, st.lines, st.seq) for st in live)

    def _returning(self, live: list) -> Iterator[tuple[str, int, int]]:
        """(id, seq, lines) of every record of a process that may have come back; each process's
        first record before its later ones."""
        maybe_back = self._back
        for rec in self._unordered_records(live):
            bit = hash(rec[0]) % SEEN_BITS
            if maybe_back[bit >> 3] & (1 << (bit & 7)):  # or a process sharing its bit
                yield rec[0], rec[6], rec[5]

    def _back_totals(self, live: list) -> dict[str, int] | None:
        """id -> (lines in all its records) << SEQ_BITS | seq of its first, while there are
        few such processes (the quickest merge); None past IN_MEMORY_MERGE of them."""
        back: dict[str, int] = {}
        for sid, seq, lines in self._returning(live):
            total = back.get(sid)
            back[sid] = (lines << SEQ_BITS | seq) if total is None else total + (lines << SEQ_BITS)
            if len(back) > IN_MEMORY_MERGE:
                return None
        return back

    def _merge_changes(self, live: list) -> Iterator[tuple[int, int]]:
        """What merging each returning process's records changes, in seq order: (seq of its first
        record, the lines of all its records) and (seq of each later one, -1). Sorted on disk,
        not grouped in a dict: 500 K processes back made a 70 MB dict of their ids."""

        def changes() -> Iterator[tuple[int, int]]:
            for _sid, group in itertools.groupby(external_sorted(self._returning(live)), key=_first):
                _sid, first_seq, total = next(group)  # sorted by id, then seq: its first record
                later = []
                for _sid, seq, lines in group:
                    later.append(seq)
                    total += lines
                if later:  # (one record only: a bit shared with a retired process)
                    yield first_seq, total
                    yield from ((seq, -1) for seq in later)

        return external_sorted(changes())


_seq = operator.itemgetter(6)  # a record's order number (C: 100 K processes retire 400 K records)
_first = operator.itemgetter(0)


def merge_by_seq(sources: list[tuple[int, Callable[[], Iterator[tuple]]]]) -> Iterator[tuple]:
    """Records of several seq-sorted sources, in seq order. A source is opened (its batch read
    back) only when its first record is due: batches retired in turn overlap little, so few are
    in memory at once, where heapq.merge would read them all at the start; and a source's run of
    records below every other's next one passes without touching the heap."""
    pending = sorted(sources, key=lambda src: src[0])
    heap: list = []
    i = 0
    while heap or i < len(pending):
        while i < len(pending) and (not heap or pending[i][0] <= heap[0][0]):
            it = pending[i][1]()
            first = next(it, None)
            if first is not None:
                heapq.heappush(heap, (first[6], i, first, it))
            i += 1
        _, k, record, it = heapq.heappop(heap)
        yield record
        limit = heap[0][0] if heap else None
        if i < len(pending) and (limit is None or pending[i][0] < limit):
            limit = pending[i][0]
        for following in it:
            if limit is not None and following[6] > limit:
                heapq.heappush(heap, (following[6], k, following, it))
                break
            yield following


class StreamsView:
    """The report's process streams over several inputs: iterated from the spool on demand,
    never held as one list."""

    def __init__(self, splitters: list) -> None:
        self._splitters = splitters
        self._len: int | None = None

    def __iter__(self) -> Iterator:
        for splitter in self._splitters:
            yield from splitter.all_streams()

    def json_texts(self) -> Iterator[str]:
        """Each stream as Report.to_dict() writes it ({"id", "name", "pid", "role", "lines"} and
        "ip" when it has one), made from the records: no object nor dict per process."""
        for splitter in self._splitters:
            for sid, name, pid, role, ip, lines, _seq in splitter.all_stream_records():
                yield (f'{{"id": {_string(sid)}, "name": {_string(name)}, '
                       f'"pid": {"null" if pid is None else pid}, "role": {_string(role)}, "lines": {lines}'
                       + (f', "ip": {_string(ip)}}}' if ip else "}"))

    def __len__(self) -> int:
        if self._len is None:
            self._len = sum(1 for _ in self)
        return self._len

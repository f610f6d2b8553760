"""One input's finished tracebacks in the order found: the first `keep_in_memory` as objects,
the rest as records in a spool file with a few bytes each in memory.

A log whose processes leave hundreds of thousands of cut tracebacks must stay within its memory
budget, yet the report lists every one. Past the budget a traceback is a record in a
TracebackSpool (its offset and size in two arrays), its role and corruption a byte each (every diagnosis
ranks by them), its copies' lines in a dict when it has any. Indexing the store gives a
SpooledTraceback that reads the record back: a new one each time, unless it was pinned (what an
in-memory match or a liveness signal remembers by identity).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from json.encoder import encode_basestring as _string  # the encoder's own, ensure_ascii off

from vcrash.rebuild.model import FIELDS, Traceback, TracebackBase, traceback_dict
from vcrash.rebuild.spool import TracebackSpool, exception_dicts

_ROLE, _CORRUPTED, _DUPLICATES = (FIELDS.index(n) for n in ("role", "corrupted", "duplicates"))


class TracebackStore(Sequence):
    def __init__(self, keep_in_memory: int) -> None:
        self.keep_in_memory = keep_in_memory
        self._objects: list[Traceback] = []
        self.spool = TracebackSpool()
        self._offsets = array("Q")  # where each spooled record lies (unsigned 64-bit: any spool size)
        self._sizes = array("Q")
        self._roles = bytearray()  # an index into _role_names
        self._role_names: list[str] = []
        self._role_index: dict[str, int] = {}
        self._corrupted = bytearray()
        self._duplicates: dict[int, list[int]] = {}  # spooled position -> its copies' start lines
        self._pinned: dict[int, SpooledTraceback] = {}  # spooled position -> the stand-in to give

    def __len__(self) -> int:
        return len(self._objects) + len(self._offsets)

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        if position < 0:
            position += len(self)
        if position < len(self._objects):
            return self._objects[position]
        spooled = position - len(self._objects)
        if not 0 <= spooled < len(self._offsets):
            raise IndexError(position)
        tb = self._pinned.get(spooled)
        return SpooledTraceback(self, spooled) if tb is None else tb

    def __iter__(self) -> Iterator[TracebackBase]:
        yield from self._objects
        for spooled in range(len(self._offsets)):
            yield self[len(self._objects) + spooled]

    def dicts(self, redactor=None) -> Iterator[dict]:
        """Every traceback's to_dict(), the spooled ones straight from their records."""
        for tb in self._objects:
            yield tb.to_dict(redactor)
        row = self.spool.row
        corrupted, duplicates = self._corrupted, self._duplicates
        for spooled, (offset, size) in enumerate(zip(self._offsets, self._sizes)):
            yield _record_dict(row(offset, size), bool(corrupted[spooled]), duplicates.get(spooled, ()), redactor)

    def json_texts(self, encode, redactor=None, start: int = 0, stop: int | None = None) -> Iterator[str]:
        """Every traceback's to_dict() as `encode` (a JSONEncoder's, ensure_ascii off) writes it;
        the spooled ones written straight from their records, without a dict each. `start` and
        `stop`: only those positions (a forked child writes a part of the list)."""
        stop = len(self) if stop is None else min(stop, len(self))
        kept = len(self._objects)
        for tb in self._objects[start:min(stop, kept)]:
            yield encode(tb.to_dict(redactor))
        row = self.spool.row
        offsets, sizes = self._offsets, self._sizes
        corrupted, duplicates = self._corrupted, self._duplicates
        for spooled in range(max(start - kept, 0), max(stop - kept, 0)):
            yield _record_json(row(offsets[spooled], sizes[spooled]), corrupted[spooled], duplicates.get(spooled, ()),
                               redactor, encode)

    def add(self, tb: Traceback) -> TracebackBase:
        """Keeps `tb`; returns what stands for it (itself, or a SpooledTraceback)."""
        if len(self._objects) < self.keep_in_memory and not self._offsets:
            self._objects.append(tb)
            return tb
        offset, size = self.spool.store(tb.fields())
        self._offsets.append(offset)
        self._sizes.append(size)
        self._roles.append(self._role_number(tb.role))
        self._corrupted.append(tb.corrupted)
        if tb.duplicates:
            self._duplicates[len(self._offsets) - 1] = list(tb.duplicates)
        return SpooledTraceback(self, len(self._offsets) - 1)

    def replace(self, position: int, tb: Traceback) -> TracebackBase:
        """An earlier-starting copy takes the place of the traceback there (the old stand-in,
        which replaced matches still hold, is no longer what the position gives)."""
        if position < len(self._objects):
            self._objects[position] = tb
            return tb
        spooled = position - len(self._objects)
        self._offsets[spooled], self._sizes[spooled] = self.spool.store(tb.fields())
        self._roles[spooled] = self._role_number(tb.role)
        self._corrupted[spooled] = tb.corrupted
        self._duplicates.pop(spooled, None)
        if tb.duplicates:
            self._duplicates[spooled] = list(tb.duplicates)
        self._pinned.pop(spooled, None)
        return self[position]

    def pin(self, tb: TracebackBase) -> None:
        """Keep this stand-in alive: something remembers it by its identity."""
        if isinstance(tb, SpooledTraceback):
            self._pinned[tb._position] = tb

    def _role_number(self, role: str) -> int:
        number = self._role_index.get(role)
        if number is None:
            if len(self._role_names) >= 255:
                raise ValueError("more than 255 process roles")
            number = self._role_index[role] = len(self._role_names)
            self._role_names.append(role)
        return number

    def __reduce__(self):
        return (list, (list(self),))  # a copy or a pickle carries the tracebacks (as objects)


class SpooledTraceback(TracebackBase):
    """A traceback of a TracebackStore past its budget: every field read back on access."""

    __slots__ = ("_store", "_position")

    def __init__(self, store: TracebackStore, position: int) -> None:
        self._store, self._position = store, position  # position among the spooled ones

    @property
    def spooled(self) -> bool:
        return True

    @property
    def role(self) -> str:
        return self._store._role_names[self._store._roles[self._position]]

    @role.setter
    def role(self, value: str) -> None:
        self._store._roles[self._position] = self._store._role_number(value)

    @property
    def corrupted(self) -> bool:
        return bool(self._store._corrupted[self._position])

    @corrupted.setter
    def corrupted(self, value: bool) -> None:
        self._store._corrupted[self._position] = bool(value)

    @property
    def duplicates(self) -> list[int] | tuple[()]:
        return self._store._duplicates.get(self._position, ())

    @duplicates.setter
    def duplicates(self, value) -> None:
        if value:
            self._store._duplicates[self._position] = value if isinstance(value, list) else list(value)
        else:
            self._store._duplicates.pop(self._position, None)
            if isinstance(value, list):  # an empty list to append to, as on a Traceback
                self._store._duplicates[self._position] = value

    def _record(self) -> tuple:
        store, position = self._store, self._position
        return store.spool.load(store._offsets[position], store._sizes[position])

    def fields(self) -> tuple:
        values = list(self._record())
        values[_ROLE], values[_CORRUPTED], values[_DUPLICATES] = self.role, self.corrupted, self.duplicates
        return tuple(values)

    def to_dict(self, redactor=None) -> dict:
        store = self._store
        position = self._position
        return _record_dict(store.spool.row(store._offsets[position], store._sizes[position]), self.corrupted,
                            self.duplicates, redactor)


def _record_dict(record: tuple, corrupted: bool, duplicates, redactor) -> dict:
    """A stored record's to_dict(), without making its objects."""
    (id, input, stream_id, _role, start_line, end_line, kind, exceptions, _corrupted, corrupted_reason,
     context, _context_kind, _context_line, _foreign, process_hint, time, _level, _headed, _duplicates,
     _start_offset, _lines) = record
    return traceback_dict(id, input, stream_id, start_line, end_line, kind, corrupted, duplicates,
                          exception_dicts(exceptions, redactor), corrupted_reason, context, process_hint, time,
                          redactor)


def _record_json(record: tuple, corrupted: int, duplicates, redactor, encode) -> str:
    """encode(_record_dict(…)), put together from its parts: the same text (traceback_dict's
    keys in its order, the encoder's separators), at half the cost of a dict per traceback."""
    (id, input, stream_id, _role, start_line, end_line, kind, exceptions, _corrupted, corrupted_reason,
     context, _context_kind, _context_line, _foreign, process_hint, time, _level, _headed, _duplicates,
     _start_offset, _lines) = record
    text = (lambda v: v) if redactor is None else redactor.text
    head = (f'{{"id": {_string(id)}, "input": {_string(input)}, "stream": {_string(stream_id)}, '
            f'"start_line": {start_line}, "end_line": {end_line}, "kind": {_string(kind)}, '
            f'"corrupted": {"true" if corrupted else "false"}, '
            f'"duplicates": {"[" + ", ".join(map(str, duplicates)) + "]" if duplicates else "[]"}, '
            f'"exceptions": {_exceptions_json(exceptions, redactor, encode) if exceptions else "[]"}')
    tail = []
    if corrupted_reason:
        tail.append(f', "corrupted_reason": {_string(text(corrupted_reason))}')
    if context:
        tail.append(f', "context": {_string(text(context))}')
    if process_hint:
        tail.append(f', "process_hint": {_string(text(process_hint))}')
    if time:
        tail.append(f', "time": {_string(time)}')
    return head + "".join(tail) + "}"


def _exceptions_json(rows: list[tuple], redactor, encode) -> str:
    """encode(exception_dicts(rows)) for the common exception: no native or repeated frames, no
    group, no line, not inferred (the encoder for the others)."""
    parts = []
    for row in rows:
        type_, message, relation, frames, native, repeated, group, line, inferred = row
        if native or repeated or group is not None or line is not None or inferred:
            parts.append(encode(exception_dicts([row], redactor))[1:-1])
            continue
        if redactor is not None:
            message = redactor.text(message)
        frame_texts = ", ".join(
            f'{{"file": {"null" if file is None else _string(file)}, "line": {"null" if lineno is None else lineno}, '
            f'"function": {"null" if function is None else _string(function)}, '
            f'"code": {"null" if source is None else _string(source if redactor is None else redactor.code(source))}}}'
            for file, lineno, function, source in frames)
        parts.append(f'{{"type": {_string(type_)}, "message": {_string(message)}, '
                     f'"relation": {"null" if relation is None else _string(relation)}, "frames": [{frame_texts}]}}')
    return "[" + ", ".join(parts) + "]"


def _spooled_field(index: int) -> property:
    def get(self):
        return self._record()[index]

    def set(self, value):
        # Rare (a field changed after the traceback was spooled): the record is written again.
        values = list(self._record())
        values[index] = value
        store = self._store
        store._offsets[self._position], store._sizes[self._position] = store.spool.store(tuple(values))

    return property(get, set)


for _index, _name in enumerate(FIELDS):
    if not hasattr(SpooledTraceback, _name):
        setattr(SpooledTraceback, _name, _spooled_field(_index))
del _index, _name


class TracebacksView(Sequence):
    """Several inputs' tracebacks as one sequence (Report.tracebacks), without a list of them all."""

    def __init__(self, stores: list[Sequence]) -> None:
        self._stores = stores

    def __len__(self) -> int:
        return sum(len(s) for s in self._stores)

    def __iter__(self) -> Iterator[TracebackBase]:
        for store in self._stores:
            yield from store

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        for store in self._stores:
            if index < len(store):
                return store[index]
            index -= len(store)
        raise IndexError(index)

    def json_texts(self, encode, redactor=None, start: int = 0, stop: int | None = None) -> Iterator[str]:
        """Positions `start` to `stop` of the whole list (all of it by default)."""
        base = 0
        for store in self._stores:
            size = len(store)
            begin, end = max(start - base, 0), size if stop is None else min(stop - base, size)
            base += size
            if begin >= end:
                continue
            if isinstance(store, TracebackStore):
                yield from store.json_texts(encode, redactor, begin, end)
            else:
                yield from (encode(tb.to_dict(redactor)) for tb in store[begin:end])

    def dicts(self, redactor=None) -> Iterator[dict]:
        for store in self._stores:
            if isinstance(store, TracebackStore):
                yield from store.dicts(redactor)
            else:
                yield from (tb.to_dict(redactor) for tb in store)

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return (list, (list(self),))

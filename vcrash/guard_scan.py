"""A streaming scan of a JSON request body that keeps only what the guard asks about.

The guard must judge bodies of any size (base64 images make 100 MB requests ordinary) without
holding them: ``BodyScanner`` is fed the body chunk by chunk and builds a *skeleton*, the
top-level object reduced to the keys of an interest tree. Everything else is skipped by regular
expressions that run in C, counting brackets without keeping them. Memory stays bounded: a kept
string is cut at ``STRING_CAP`` characters (a longer one becomes ``Opaque("string", blank)``),
a skipped object or array becomes ``Opaque(kind, empty)``, and the only per-body list, the
spans of one top-level key (for the guard's rewrite), is capped at ``MAX_SPANS``.

The skeleton of a valid body holds the same values at the kept keys as ``json.loads`` gives
(duplicate keys: the last wins; escapes decoded; UTF-16/32 bodies are transcoded, as
``json.loads`` detects them). A body that is not a JSON object, breaks the grammar where the
scanner looks, or nests deeper than any JSON parser in vLLM's process could follow gives no
skeleton: vLLM answers those itself.
"""
from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass

STRING_CAP = 4096           # characters kept of one string value or key
LITERAL_CAP = 64            # bytes kept of one number/literal
MAX_SPANS = 1000            # spans kept of the rewrite key
MAX_DEPTH = 100_000         # deeper than CPython's json can parse: give up, vLLM answers it

_WS = re.compile(rb"[ \t\n\r]*+")
# skipped string content: stops before the closing quote or a backslash that ends the buffer
_SKIP_STR = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.S)
# kept string content: only complete escapes, so a segment always decodes on its own
_KEEP_STR = re.compile(rb'[^"\\]*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\]*+)*+')
# inside a skipped container: complete strings, everything but brackets, and bracket pairs
# nested up to two deep, all in C; the Python loop only sees deeper brackets and cut strings
_STR = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_ATOM = rb'(?:[^"\[\]{}]++|' + _STR + rb')'
_PAIR1 = rb'(?:\[' + _ATOM + rb'*+\]|\{' + _ATOM + rb'*+\})'
_PAIR2 = rb'(?:\[(?:' + _ATOM + rb'|' + _PAIR1 + rb')*+\]|\{(?:' + _ATOM + rb'|' + _PAIR1 + rb')*+\})'
_SKIP_FLAT = re.compile(rb'(?:' + _ATOM + rb'|' + _PAIR2 + rb')*+', re.S)
_LITERAL = re.compile(rb"[-+.0-9A-Za-z]*+")


@dataclass(frozen=True)
class Opaque:
    """A value the scan did not keep: its kind and whether it is empty (blank for a string)."""

    kind: str       # "object" | "array" | "string" | "number"
    empty: bool


class Malformed(Exception):
    """The body is not valid JSON where the scanner looked."""


class _Frame:
    __slots__ = ("value", "node", "expect", "key", "key_start", "sep")

    def __init__(self, node: dict):
        self.value: dict = {}
        self.node = node
        self.expect = "first"       # first | key | colon | value | next
        self.key: str | None = None
        self.key_start = 0
        self.sep: int | None = None  # offset of the comma before the current member


class BodyScanner:
    """Feed bytes with ``feed``; ``finish`` returns the skeleton (or None) and the spans.

    ``interest`` maps a key to ``None`` (keep its value, summarised) or to a nested interest
    dict (descend when the value is an object). ``span_key`` names a top-level key whose
    members' byte spans are recorded, each with its separating comma, so that the caller can
    cut them out of the body.
    """

    def __init__(self, interest: dict, span_key: str | None = None):
        self.interest = interest
        self.span_key = span_key
        self.spans: list[list[int]] = []
        self.spans_overflow = False
        self._span_open = False       # a first-member span waiting for its trailing comma
        self._first_start = -1
        self.failed: str | None = None  # why no skeleton: "not-object" | "malformed" | "too-deep"
        self.result: dict | None = None
        self._stack: list[_Frame] = []
        self._state = "start"
        self._carry = b""
        self._offset = 0              # absolute offset of self._carry's first byte
        self._prelude = b""           # first bytes, until the encoding is known
        self._started = False
        self._cur_base = 0
        self._decoder = None          # incremental decoder for UTF-16/32 bodies
        self.encoding = "utf-8"
        # the value in progress
        self._kind = ""
        self._empty = True
        self._depth = 0
        self._first = False
        self._return = ""
        self._text: list[str] = []
        self._text_len = 0
        self._blank = True
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._lit = b""
        self._lit_long = False
        self._is_key = False

    # ------------------------------------------------------------------ input

    def feed(self, data: bytes) -> None:
        if self.failed or not data:
            return
        if not self._started:
            self._prelude += data
            if len(self._prelude) < 4:
                return
            data = self._start()
        self._run(self._transcode(data))

    def finish(self) -> dict | None:
        """End of the body: the skeleton, or None (``failed`` says why)."""
        if not self.failed and not self._started and self._prelude:
            self._run(self._transcode(self._start()))
        if self._decoder is not None and not self.failed:
            self._run(self._decoder.decode(b"", final=True).encode("utf-8", "surrogatepass"))
        if not self.failed and self._state != "done":
            self.failed = "not-object" if self._state == "start" else "malformed"
        return None if self.failed else self.result

    def _start(self) -> bytes:
        """The encoding, as json.loads(bytes) would detect it, from the first bytes."""
        data, self._prelude, self._started = self._prelude, b"", True
        self.encoding = json.detect_encoding(data[:4])
        if self.encoding == "utf-8-sig":
            self._offset = 3
            return data[3:]
        if self.encoding != "utf-8":
            self._decoder = codecs.getincrementaldecoder(self.encoding)("surrogatepass")
        return data

    def _transcode(self, data: bytes) -> bytes:
        if self._decoder is None:
            return data
        return self._decoder.decode(data).encode("utf-8", "surrogatepass")

    def _run(self, data: bytes) -> None:
        buf = self._carry + data if self._carry else data
        base = self._offset
        self._carry = b""
        try:
            i = self._step(buf, base)
        except Malformed:
            self.failed = "malformed"
            return
        if self.failed:
            return
        self._carry = buf[i:]
        self._offset = base + i

    # ------------------------------------------------------------------ the machine

    def _step(self, buf: bytes, base: int) -> int:
        """Consume buf from 0; return where an incomplete token starts (carried over)."""
        i, n = 0, len(buf)
        self._cur_base = base
        while i < n:
            st = self._state
            if st == "skip":
                i = self._skip(buf, i, n)
                if i < 0:
                    return n
                continue
            if st == "skip_str":
                m = _SKIP_STR.match(buf, i)
                j = m.end()
                if j >= n:
                    return n
                if buf[j] == 0x5C:          # a backslash that ends the buffer: carry it
                    return j
                self._state = self._return
                i = j + 1
                if self._state == "done_value":
                    self._finish_value(Opaque("string", True), base + i)
                continue
            if st == "keep_str":
                i = self._keep_str(buf, i, n, base)
                if i < 0:
                    return n
                if self._state == "keep_str":   # an escape cut at the end: carry it
                    return i
                continue
            if st == "literal":
                m = _LITERAL.match(buf, i)
                j = m.end()
                if len(self._lit) < LITERAL_CAP:
                    self._lit += buf[i:min(j, i + LITERAL_CAP)]
                if j - i > LITERAL_CAP:
                    self._lit_long = True
                if j >= n:
                    return n
                i = j
                self._end_literal(base + i)
                continue
            # structural states
            m = _WS.match(buf, i)
            i = m.end()
            if i >= n:
                return n
            c = buf[i]
            if st == "start":
                if c != 0x7B:
                    self.failed = "not-object"
                    return n
                self._stack.append(_Frame(self.interest))
                self._state = "object"
                i += 1
                continue
            if st == "done":
                raise Malformed("data after the top-level object")
            i = self._structural(buf, i, c, base)
        return n

    def _structural(self, buf: bytes, i: int, c: int, base: int) -> int:
        f = self._stack[-1]
        top = len(self._stack) == 1
        if f.expect in ("first", "key"):
            if c == 0x7D and f.expect == "first":
                return self._close_object(i, base)
            if c != 0x22:
                raise Malformed("expected a key")
            f.key_start = base + i
            self._begin_keep(key=True)
            return i + 1
        if f.expect == "colon":
            if c != 0x3A:
                raise Malformed("expected ':'")
            f.expect = "value"
            return i + 1
        if f.expect == "next":
            if c == 0x2C:
                if top and self._span_open:
                    self.spans[-1][1] = base + i + 1
                    self._span_open = False
                f.sep = base + i
                f.expect = "key"
                return i + 1
            if c == 0x7D:
                return self._close_object(i, base)
            raise Malformed("expected ',' or '}'")
        # a value for f.key
        node = f.node
        want = f.key in node
        sub = node.get(f.key) if want else None
        if c == 0x7B and isinstance(sub, dict):
            child = _Frame(sub)
            self._stack.append(child)
            return i + 1
        if c in (0x7B, 0x5B):
            self._kind = "object" if c == 0x7B else "array"
            self._empty, self._depth, self._first = True, 1, True
            self._state = "skip"
            return i + 1
        if c == 0x22:
            if want:
                self._begin_keep(key=False)
            else:
                self._state, self._return = "skip_str", "done_value"
            return i + 1
        if c in (0x5D, 0x7D, 0x2C, 0x3A):
            raise Malformed("expected a value")
        self._lit, self._lit_long = b"", False
        self._state = "literal"
        return i

    def _close_object(self, i: int, base: int) -> int:
        f = self._stack.pop()
        if not self._stack:
            self.result = f.value
            self._state = "done"
            return i + 1
        self._state = "object"
        self._finish_value(f.value, base + i + 1)
        return i + 1

    def _finish_value(self, value, end: int) -> None:
        """A member's value ended at absolute offset end: store it, record spans."""
        self._state = "object"
        f = self._stack[-1]
        if f.key in f.node:
            f.value[f.key] = value
        if len(self._stack) == 1 and f.key == self.span_key and self.span_key is not None:
            self._add_span(f, end)
        f.expect = "next"

    def _add_span(self, f: _Frame, end: int) -> None:
        # The first member has no comma before it: its span takes the comma after it.
        start = f.sep if f.sep is not None else f.key_start
        if self.spans and start <= self.spans[-1][1]:
            self.spans[-1][1] = max(self.spans[-1][1], end)
            self._span_open = self.spans[-1][0] == self._first_start
            return
        if len(self.spans) >= MAX_SPANS:
            self.spans_overflow = True
            return
        self.spans.append([start, end])
        if f.sep is None:
            self._first_start = start
        self._span_open = f.sep is None

    # ------------------------------------------------------------------ skipped containers

    def _skip(self, buf: bytes, i: int, n: int) -> int:
        """Advance through a skipped object/array; -1 when the buffer ran out."""
        while i < n:
            if self._first:
                i = _WS.match(buf, i).end()
                if i >= n:
                    return -1
                self._first = False
                self._empty = buf[i] in (0x5D, 0x7D)
            i = _SKIP_FLAT.match(buf, i).end()
            if i >= n:
                return -1
            c = buf[i]
            i += 1
            if c == 0x22:
                self._state, self._return = "skip_str", "skip"
                return i
            if c in (0x5B, 0x7B):
                self._depth += 1
                if self._depth > MAX_DEPTH:
                    self.failed = "too-deep"
                    return -1
                continue
            self._depth -= 1
            if self._depth == 0:
                self._finish_value(Opaque(self._kind, self._empty), self._offset_of(i))
                return i
        return -1

    def _offset_of(self, i: int) -> int:
        return self._cur_base + i

    # ------------------------------------------------------------------ kept strings

    def _begin_keep(self, key: bool) -> None:
        self._state = "keep_str"
        self._is_key = key
        self._text, self._text_len, self._blank = [], 0, True
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def _keep_str(self, buf: bytes, i: int, n: int, base: int) -> int:
        m = _KEEP_STR.match(buf, i)
        j = m.end()
        if j > i:
            self._add_text(buf[i:j])
        if j >= n:
            return -1
        if buf[j] == 0x22:
            self._end_keep(base + j + 1)
            return j + 1
        # a backslash _KEEP_STR would not take: cut by the buffer's end, or invalid
        if n - j < 6:
            return j
        raise Malformed("invalid escape")

    def _add_text(self, raw: bytes) -> None:
        try:
            part = json.loads('"' + self._utf8.decode(raw) + '"')
        except (ValueError, UnicodeDecodeError) as e:
            raise Malformed(str(e)) from None
        if self._blank and part and not part.isspace():
            self._blank = False
        if self._text_len < STRING_CAP:
            self._text.append(part[:STRING_CAP - self._text_len])
        self._text_len += len(part)

    def _end_keep(self, end: int) -> None:
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as e:
            raise Malformed(str(e)) from None
        text = "".join(self._text)
        if any("\ud800" <= ch <= "\udfff" for ch in text):
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
        long = self._text_len > STRING_CAP
        if self._is_key:
            f = self._stack[-1]
            f.key = None if long else text
            f.expect = "colon"
            self._state = "object"
            return
        self._finish_value(Opaque("string", self._blank) if long else text, end)

    # ------------------------------------------------------------------ numbers and literals

    def _end_literal(self, end: int) -> None:
        if self._lit_long:
            value = Opaque("number", False)
        else:
            try:
                value = json.loads(self._lit)
            except ValueError:
                raise Malformed("bad literal") from None
            if isinstance(value, (dict, list, str)):
                raise Malformed("bad literal")
        self._finish_value(value, end)

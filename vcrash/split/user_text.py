"""What users and models wrote, quoted in vLLM's request log records, is never evidence.

With `--enable-log-requests` the API server logs each request's prompt (and, with
`--enable-log-outputs`, each response) as a Python repr inside one INFO or DEBUG record:

    Received request <id>: prompt: '<repr>', params: SamplingParams(…), prompt_token_ids: […], …
    Request <id> details: prompt: '<repr>', prompt_token_ids: […], prompt_embeds shape: ….
    Generated response <id>[ (streaming …)]: output: '<repr>', output_token_ids: […], …

A prompt that pastes a traceback, or asks why "the job was killed after a timeout", must not open
a traceback region, match a rule or make a liveness fact, nor send a line full of such words
through the per-line path. Analysis reads the line with the repr's body replaced by MASK
(`masked`); the bulk scan searches its chunk with the same bodies blanked (`blanked`), so such a
line holds a needle exactly when its masked text does. Only a record whose repr closes (an
unescaped quote of its own kind, on the line) and is followed by the field vLLM writes next is
masked: a cut or joined line stays as it is.
"""

from __future__ import annotations

import re

MASK = "…"
BLANK = 0x01  # what the bulk scan's copy holds instead: no needle has it (nor MASK; read.py checks)
GATES = ("prompt: ", "output: ")  # in every masked record: lines without them are never searched
GATE_BYTES = tuple(g.encode() for g in GATES)

# One spelling for text and bytes, ASCII only, and one way to read a line (its first gate; the
# record that ends there, from the last start of its kind in a window before it; the first
# unescaped quote after), so both mask the same span (decoding only turns invalid bytes into
# U+FFFD and drops NULs: lines with NULs are not blanked).
_RECORDS = (
    ("Received request ", r"Received request [!-~]{1,200}: prompt: ['\"]", "received"),
    ("Request ", r"Request [!-~]{1,200} details: prompt: ['\"]", "details"),
    ("Generated response ", r"Generated response [!-~]{1,200}?(?: \([a-z ]{1,40}\))?: output: ['\"]", "output"),
)
WINDOW = 320  # longer than any record up to its quote
# The field after the repr: `params` from 0.4 on, `sampling params` / `sampling_params` before.
_NEXT = {"received": (", params: ", ", sampling params: ", ", sampling_params: "),
         "details": (", prompt_token_ids: ",), "output": (", output_token_ids: ",)}
GATE_LENGTH = 8
assert all(len(g) == GATE_LENGTH for g in GATES)

# A repr's body up to its closing quote: a backslash escapes the character after it.
_BODY = {"'": r"[^'\\]*+(?:\\.[^'\\]*+)*+'", '"': r'[^"\\]*+(?:\\.[^"\\]*+)*+"'}
_TEXT = (tuple((start, re.compile(p), field) for start, p, field in _RECORDS), "\\", _NEXT,
         {q: re.compile(p, re.S) for q, p in _BODY.items()})
_BYTES = (tuple((start.encode(), re.compile(p.encode()), field) for start, p, field in _RECORDS), b"\\",
          {k: tuple(f.encode() for f in v) for k, v in _NEXT.items()},
          {q.encode(): re.compile(p.encode(), re.S) for q, p in _BODY.items()})
_FILL = memoryview(bytes((BLANK,)) * (64 << 10))


def _span(line, first: int, kind: tuple) -> tuple[int, int] | None:
    """(start, end) of the body to mask in `line` (str or bytes, one line) whose first gate is
    at `first`, or None."""
    records, backslash, nexts, bodies = kind
    quote_at = first + GATE_LENGTH
    window = max(0, quote_at - WINDOW)
    for start, pattern, name in records:
        k = line.rfind(start, window, quote_at)
        if k >= 0 and pattern.fullmatch(line, k, quote_at + 1):
            field = name
            break
    else:
        return None
    quote = line[quote_at:quote_at + 1]
    close = line.find(quote, quote_at + 1)
    if close >= 0 and line[close - 1:close] == backslash:
        # An escaped quote (or an escaped backslash before the closing one): the body's own
        # pattern, linear however many escapes a hostile line holds.
        body = bodies[quote].match(line, quote_at + 1)
        close = -1 if body is None else body.end() - 1
    if close < 0 or not line.startswith(nexts[field], close + 1):
        return None  # cut before its closing quote, or not the record's next field
    return quote_at + 1, close


def masked(text: str) -> str:
    """`text` (one line) with a request record's quoted prompt or output body replaced by MASK
    (the quotes kept); `text` itself (the same object) when there is none."""
    if "t: " not in text:  # the end of both gates: one search for most lines
        return text
    first = -1
    for gate in GATES:
        i = text.find(gate)
        if i >= 0 and (first < 0 or i < first):
            first = i
    if first < 0:
        return text
    span = _span(text, first, _TEXT)
    if span is None or span[1] == span[0] or text[span[0]:span[1]] == MASK:
        return text  # none, empty, or masked already
    return text[:span[0]] + MASK + text[span[1]:]


def gate_starts(buf: bytes, begin: int, end: int) -> list[int]:
    """Where the gates start in buf[begin:end], in order (bytes.find: a scanner that knows them
    passes its own)."""
    found = []
    for gate in GATE_BYTES:
        i = buf.find(gate, begin, end)
        while i >= 0:
            found.append(i)
            i = buf.find(gate, i + 1, end)
    found.sort()
    return found


def blanked(buf: bytes, begin: int, end: int, max_line: int, gates: list[int] | None = None) -> bytes | bytearray:
    """buf, or a copy of it, in which every record's body that `masked` would mask on the lines
    of buf[begin:end] (each at most `max_line` bytes, as the reader cuts longer ones) is BLANK
    bytes: the same offsets and newlines, no needle in the users' text. `gates`: gate_starts()."""
    out: bytearray | None = None
    find, rfind = buf.find, buf.rfind
    stop = begin - 1
    for gate in gate_starts(buf, begin, end) if gates is None else gates:
        if gate <= stop or gate < begin:
            continue  # not the first gate of its line
        if gate >= end:
            break
        start = rfind(b"\n", begin, gate) + 1
        stop = find(b"\n", gate, end)
        stop = end if stop < 0 else stop
        if stop - start > max_line or find(b"\0", start, stop) >= 0:
            continue
        span = _span(buf[start:stop], gate - start, _BYTES)
        if span is not None and span[1] > span[0]:
            if out is None:
                out = bytearray(buf)
            size = span[1] - span[0]
            out[start + span[0]:start + span[1]] = _FILL[:size] if size <= len(_FILL) else bytes((BLANK,)) * size
    return buf if out is None else out

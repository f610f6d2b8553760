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

# One spelling for text and bytes, ASCII classes only, so both find the same record on a line
# (decoding only turns invalid bytes into U+FFFD and drops NULs: lines with NULs are not blanked).
_RECORD = (r"(?:Received request (?P<received>[!-~]+): prompt|Request [!-~]+ details: prompt"
           r"|Generated response [!-~]+?(?: \([a-z ]+\))?: (?P<output>output)): (?P<quote>['\"])")
_BODY = {"'": r"[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'", '"': r'[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'}
# The field after the repr: `params` from 0.4 on, `sampling params` / `sampling_params` before.
_NEXT = {"received": (", params: ", ", sampling params: ", ", sampling_params: "),
         "details": (", prompt_token_ids: ",), "output": (", output_token_ids: ",)}

_TEXT_RECORD = re.compile(_RECORD)
_TEXT_BODY = {q: re.compile(p) for q, p in _BODY.items()}
_BYTES_RECORD = re.compile(_RECORD.encode())
_BYTES_BODY = {ord(q): re.compile(p.encode()) for q, p in _BODY.items()}
_BYTES_NEXT = {k: tuple(f.encode() for f in v) for k, v in _NEXT.items()}


def _field(m: re.Match) -> str:
    return "output" if m.group("output") else "received" if m.group("received") else "details"


def masked(text: str) -> str:
    """`text` with a request record's quoted prompt or output body replaced by MASK (the quotes
    kept); `text` itself (the same object) when there is none."""
    if "prompt: " not in text and "output: " not in text:
        return text
    m = _TEXT_RECORD.search(text)
    if m is None:
        return text
    body = _TEXT_BODY[m.group("quote")].match(text, m.end())
    if body is None or not text.startswith(_NEXT[_field(m)], body.end()):
        return text  # cut before its closing quote, or not the record's next field
    if body.end() - m.end() == 1 or body.end() - m.end() == len(MASK) + 1 and text.startswith(MASK, m.end()):
        return text  # empty, or masked already
    return text[:m.end()] + MASK + text[body.end() - 1:]


def blanked(buf: bytes, begin: int, end: int, max_line: int) -> bytes | bytearray:
    """buf, or a copy of it, in which every record's body that `masked` would mask on the lines
    of buf[begin:end] (each at most `max_line` bytes, as the reader cuts longer ones) is BLANK
    bytes: the same offsets and newlines, no needle in the users' text."""
    out: bytearray | None = None
    find, rfind = buf.find, buf.rfind
    pos = begin
    next_gate = [find(gate, begin, end) for gate in GATE_BYTES]
    while True:
        live = [g for g in next_gate if g >= 0]
        if not live:
            break
        gate = min(live)
        start = rfind(b"\n", begin, gate) + 1
        stop = find(b"\n", gate, end)
        stop = end if stop < 0 else stop
        if stop - start <= max_line and find(b"\0", start, stop) < 0:
            m = _BYTES_RECORD.search(buf, start, stop)
            if m is not None:
                body = _BYTES_BODY[buf[m.end() - 1]].match(buf, m.end(), stop)
                if body is not None and buf.startswith(_BYTES_NEXT[_field(m)], body.end()) \
                        and body.end() - 1 > m.end():
                    if out is None:
                        out = bytearray(buf)
                    out[m.end():body.end() - 1] = bytes((BLANK,)) * (body.end() - 1 - m.end())
        pos = stop + 1
        next_gate = [g if g >= pos or g < 0 else find(GATE_BYTES[i], pos, end) for i, g in enumerate(next_gate)]
    return buf if out is None else out

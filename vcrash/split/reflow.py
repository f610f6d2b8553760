"""Restore the line structure a paste broke: hard wraps joined back, lost newlines split again.

A terminal copy or a ticket system cuts every long line at a fixed width; a chat client or a
one-line log shipper joins a whole traceback into one line. Both hide the traceback grammar,
which works line by line.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from typing import Iterable, Iterator

from vcrash.read import RawLine
from vcrash.split.wrappers import strip_ansi, strip_outer

# Widths below this are not a terminal's or a ticket's wrap; above, not a wrap at all.
MIN_WRAP, MAX_WRAP = 60, 400
SNIFF_LINES = 400
MIN_AT_WIDTH = 3  # lines exactly at the wrap width, and at least this share of the text lines:
MIN_SHARE_AT_WIDTH = 0.05
# A terminal's usual widths: at one of them two rows are enough (one long error line copied from
# an 80-column terminal makes two full rows and a short one).
TERMINAL_WIDTHS = frozenset((80, 100, 120, 132, 160, 200))


# A line that starts a record or ends complete was not cut by a wrap.
_RECORD_START = re.compile(
    r"^(?:\(\w[^)]{0,60} pid=\d+|\s*File \"|\s*Traceback \(|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):? "
    r"|\d{4}-\d\d-\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:|\[rank\d+\]:)"
)
_COMPLETE = re.compile(r'^\s*File "[^"]+", line \d+, in [\w<>.]+\s*$')


def _whole_json_record(text: str) -> bool:
    """One JSON object per line (docker's json-file driver, a JSON formatter): its lines are as
    long as their text, and a run of equally long ones (the same header in each record) is no wrap."""
    text = text.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def wrap_width(texts: list[str]) -> int | None:
    """The width the text was hard-wrapped at, or None: the longest length is shared by several
    lines, nothing is longer (an unwrapped log's longest line is almost always alone), and the
    lines at that width look cut rather than complete."""
    texts = [t.rstrip("\r") for t in texts]
    lengths = [len(t) for t in texts if t]
    if not lengths:
        return None
    width = max(lengths)
    at = [i for i, t in enumerate(texts) if len(t) == width]
    needed = 2 if width in TERMINAL_WIDTHS else MIN_AT_WIDTH
    if not (MIN_WRAP <= width <= MAX_WRAP and len(at) >= needed
            and len(at) >= MIN_SHARE_AT_WIDTH * len(lengths)):
        return None
    # Read behind a shipper's or platform's prefix (its times make repeated lines differ) and
    # colour codes (a coloured tag hides the record start of the next line).
    inner = {i: strip_outer(strip_ansi(texts[i]))[0] for i in at}
    if len(set(inner.values())) < 2:
        return None  # one line repeated (a dying server's message per request), not rows cut at a width
    if sum(1 for i in at if texts[i].rstrip()[-1:] in _BOX_RIGHT) * 2 >= len(at):
        return None  # a drawn box (rich's traceback panel, a table) pads every row to its width
    complete = sum(1 for i in at if _COMPLETE.match(inner[i]) or _whole_json_record(inner[i])
                   or i + 1 < len(texts) and _RECORD_START.match(strip_outer(strip_ansi(texts[i + 1]))[0]))
    return width if complete * 2 < len(at) else None


_BOX_RIGHT = frozenset("│┃║╮╯╗╝┐┘┤╣")  # box-drawing characters a drawn row ends with
MIN_SPACED_LINES = 4  # text lines a double-spaced paste must show before it is taken for one
MAX_UNSPACED_SHARE = 0.05


MAX_WRAPPER_ONLY = 120  # longer lines hold more than a wrapper's prefix


def is_blank(text: str) -> bool:
    """An empty line, or one that holds only a wrapper's prefix (a platform that wraps every line,
    '[time] [/bin/sh]: ', wraps the empty ones too)."""
    if not text.strip():
        return True
    if len(text) > MAX_WRAPPER_ONLY:
        return False
    return not strip_outer(strip_ansi(text.rstrip("\r")))[0].strip()


def double_spaced(texts: list[str]) -> bool:
    """Is every line followed by an empty one (a copy from a rich-text view, or a console that
    wraps each line and puts an empty wrapped line after it)? An ordinary log has runs of text
    lines; such a paste has almost none."""
    blank = [is_blank(t) for t in texts]
    text_lines = [i for i in range(len(texts) - 1) if not blank[i]]
    if len(text_lines) < MIN_SPACED_LINES:
        return False
    unspaced = sum(1 for i in text_lines if not blank[i + 1])
    return unspaced <= MAX_UNSPACED_SHARE * len(text_lines)


# A run of spaces inside a word: where a terminal copy put a screen row's padding back
# in place of the wrap it joined ("get_confi                g").
# Inside a word or number (a table's columns are not). Spelled to start with its first space, so
# that the search skips ahead to spaces instead of trying a look-behind at every character (6x).
_PAD_RUN = re.compile(r" (?<=\w )   +(?=\w)")
MIN_PADDED = 2  # lines with such a run at one column, of one length, before a paste is taken for one
MIN_PADDED_SHARE = 0.8
MAX_PAD_CANDIDATES = 4  # (column, length) pairs tried, most often seen first


def padded_wrap(texts: list[str]) -> tuple[int, int] | None:
    """(row width, padding) of a paste whose wrapped lines were joined back with the padding
    that filled each screen row, or None. Such a paste has runs of spaces inside words and
    numbers, all at one column and of one length; an ordinary log's aligned columns are short,
    few, or not at one place."""
    runs: Counter = Counter()  # (column, length) of the runs themselves
    near: Counter = Counter()  # ... and as they would be without a space of the text beside them
    for t in texts:
        for m in _PAD_RUN.finditer(t):
            start, length = m.start(), m.end() - m.start()
            runs[(start, length)] += 1
            # A wrap beside a space of the text makes the run one longer, at the row's end
            # ("kernel" + padding + " image") or one column early ("kernel " + padding + "image").
            near[(start, length - 1)] += 1
            near[(start + 1, length - 1)] += 1
    if not runs:
        return None
    candidates = sorted(set(runs) | set(near), key=lambda c: (-(runs[c] + near[c]), -runs[c], c))
    for width, pad in candidates[:MAX_PAD_CANDIDATES]:
        if runs[(width, pad)] + near[(width, pad)] < MIN_PADDED or not MIN_WRAP <= width <= MAX_WRAP:
            continue
        # Every row was wrapped: nearly all lines longer than a row have the padding there (a log's
        # indentation after a fixed-width tag is at one column too, but its other lines are long).
        longer = [t for t in texts if len(t) > width + pad]
        padded = sum(1 for t in longer if not t[width:width + pad].strip())
        if padded >= MIN_PADDED_SHARE * len(longer):
            return width, pad
    return None


def unpad(text: str, width: int, pad: int) -> str:
    """The line without the padding runs at each row's end (width, then every width + pad)."""
    out, pos, start = [], width, 0
    while pos + pad < len(text):
        if text[pos:pos + pad].strip() or text[pos - 1] == " " and text[pos + pad] == " ":
            break  # no padding here: the line ended its rows before
        out.append(text[start:pos])
        start = pos + pad
        pos = start + width
    out.append(text[start:])
    return "".join(out)


def _unpadded(lines: Iterable[RawLine], width: int, pad: int) -> Iterator[RawLine]:
    for raw in lines:
        if len(raw.text) > width + pad:
            raw = RawLine(raw.lineno, raw.offset, unpad(raw.text, width, pad), raw.context)
        yield raw


def _without_spacers(lines: Iterable[RawLine]) -> Iterator[RawLine]:
    """Each line, without the empty line that follows it (an empty line of the original comes
    with its own spacer, so it stays)."""
    spacer_next = False
    for raw in lines:
        if spacer_next and is_blank(raw.text):
            spacer_next = False
            continue
        yield raw
        spacer_next = True


# -- escaped line ends, newest-first views ------------------------------------------------
MIN_ESCAPED_LINES = 3
ESCAPED_SHARE = 0.8
MAX_REVERSED_LINES = 200_000  # a paste read bottom-up is held whole (~100 MB at 180 K lines); a bigger one is read as it is
TRACEBACK_VOTE = 3  # a traceback's order says more than one pair of times or C++ frames
MIN_REVERSED_VOTES = 3
NEWEST_FIRST_NOTE = ("the lines were newest first (a log view's order): read bottom-up, line numbers count "
                     "from the last line")


def escaped_line_ends(texts: list[str]) -> bool:
    """Do (nearly) all lines end in a literal backslash-n (a log view's raw message field, a
    JSON string copied out)?"""
    lines = [t.rstrip("\r") for t in texts if t.strip()]
    return len(lines) >= MIN_ESCAPED_LINES and sum(t.endswith("\\n") for t in lines) >= ESCAPED_SHARE * len(lines)


# The first time on a line (a vLLM header's "MM-DD HH:MM:SS", an ISO time before it).
_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d|\d\d-\d\d \d\d:\d\d:\d\d")
_CPP_NUMBER = re.compile(r"frame #(\d+): ")
# What stands before a traceback line's own text: a process tag, a rank prefix, a vLLM header.
_LINE_HEAD = re.compile(r"^(?:\([^()]{1,80}? pid=\d+[^()]*\) ?)?(?:\[rank\d+\]: ?)?"
                        r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? )?\[?[\w.-]+:\d+\] ?)?")
TIME_LINES = 120  # lines whose times are compared: enough pairs to vote, little to search


def _inner(text: str) -> str:
    """A line's own text behind its wrappers, process tag, rank prefix and vLLM header."""
    text = strip_outer(strip_ansi(text.rstrip("\r")))[0]
    if text.endswith("\\n"):
        text = text[:-2]
    return _LINE_HEAD.sub("", text, count=1)


def newest_first(texts: list[str]) -> bool:
    """Is the paste in reverse order (a log view that lists the newest line first)? Its
    tracebacks read upwards (an exception line with its raising code line and frame under it,
    the 'Traceback' header under its outermost frame), its times go back, its C++ frames count
    down. Cheap on an ordinary log: only lines that may hold a traceback's ends are parsed."""
    from vcrash.rebuild import grammar as g

    lines = [t for t in texts if t.strip()]
    up = down = 0
    # Times that go backwards from line to line (the same format, so they compare as text).
    times = [m.group(0) for m in map(_TIME.search, lines[:TIME_LINES]) if m]
    for a, b in zip(times, times[1:]):
        if len(a) == len(b) and a != b:
            if b < a:
                up += 1
            else:
                down += 1
    numbers = [int(m.group(1)) for m in (_CPP_NUMBER.search(t) for t in lines if "frame #" in t) if m]
    for a, b in zip(numbers, numbers[1:]):
        if b == a - 1:
            up += 1
        elif b == a + 1:
            down += 1
    inner: dict[int, str] = {}

    def at(i: int) -> str:
        if not 0 <= i < len(lines):
            return ""
        text = inner.get(i)
        if text is None:
            text = inner[i] = _inner(lines[i])
        return text

    for i, raw in enumerate(lines):
        if "Traceback (most recent call last)" in raw:
            if not g.TB_HEAD.match(at(i)):
                continue
            if g.FRAME.match(at(i + 1)):
                down += TRACEBACK_VOTE
            elif g.FRAME.match(at(i - 1)) or g.FRAME.match(at(i - 2)):
                up += TRACEBACK_VOTE
        elif "Error" in raw or "Exception" in raw:
            text = at(i)
            if text.startswith(" ") or g.exception_line(text.strip()) is None:
                continue
            after = at(i + 1)
            if after.startswith("    ") and not g.FRAME.match(after) and g.FRAME.match(at(i + 2)):
                up += TRACEBACK_VOTE  # its code line, then that line's frame, under it
            elif g.FRAME.match(at(i - 1)) or g.FRAME.match(at(i - 2)):
                down += TRACEBACK_VOTE
    # Two quoted excerpts, the later one first, are not a reversed log: it takes a traceback
    # read upwards, or several times going back, and clearly more of them than the other way.
    return up >= MIN_REVERSED_VOTES and up > 2 * down


def _unescaped_ends(lines: Iterable[RawLine]) -> Iterator[RawLine]:
    for raw in lines:
        text = raw.text.rstrip("\r")
        if "\\n\r" in text:
            text = text.replace("\\n\r", "\r")  # lines a lone CR joined: each had its literal end
            raw = RawLine(raw.lineno, raw.offset, text, raw.context)
        if text.endswith("\\n"):
            raw = RawLine(raw.lineno, raw.offset, text[:-2], raw.context)
        yield raw


def _reversed(lines: Iterable[RawLine]) -> Iterator[RawLine]:
    """Every line in the order it was written: numbered from the top of the reversed text. Lines
    a lone CR joined (not a progress bar drawn over itself) were view lines too: their parts are
    turned round as well."""
    from vcrash.split import is_redraw

    held = list(lines)
    for n, raw in enumerate(reversed(held), 1):
        text = raw.text
        if "\r" in text.rstrip("\r"):
            parts = text.rstrip("\r").split("\r")
            if not is_redraw([p for p in parts if p.strip()]):
                text = "\r".join(reversed(parts))
        yield RawLine(n, raw.offset, text, raw.context)


def needs_mending(texts: list[str]) -> bool:
    """Does a paste's head (SNIFF_LINES lines) show damage that unwrap_hard_wraps mends line by
    line (which the bulk scan cannot do)?"""
    return (wrap_width(texts) is not None or double_spaced(texts) or padded_wrap(texts) is not None
            or escaped_line_ends(texts) or newest_first(texts))


def unwrap_hard_wraps(lines: Iterable[RawLine], notes: list[str] | None = None) -> Iterator[RawLine]:
    """Join each line cut at the detected wrap width with the line that continues it (after
    dropping literal '\\n' line ends, reading a newest-first paste bottom-up, taking out the
    empty line a double-spaced paste put after every line, and the padding a terminal copy put
    back where it joined its wrapped rows). `notes`: what was mended that the report should say."""
    it = iter(lines)
    head: list[RawLine] = []
    for raw in it:
        head.append(raw)
        if len(head) >= SNIFF_LINES:
            break
    if escaped_line_ends([r.text for r in head]):
        head, it = list(_unescaped_ends(head)), _unescaped_ends(it)
    if newest_first([r.text for r in head]):
        rest = list(itertools.islice(it, MAX_REVERSED_LINES))
        if len(head) + len(rest) < MAX_REVERSED_LINES:
            it = _reversed(head + rest)
            head = [raw for _, raw in zip(range(SNIFF_LINES), it)]
            if notes is not None:
                notes.append(NEWEST_FIRST_NOTE)
        else:
            it = _chain(rest, it)
    if double_spaced([r.text for r in head]):
        it = _without_spacers(_chain(head, it))
        head = []
        for raw in it:
            head.append(raw)
            if len(head) >= SNIFF_LINES:
                break
    padded = padded_wrap([r.text for r in head])
    if padded is not None:
        it = _unpadded(_chain(head, it), *padded)
        head = [raw for _, raw in zip(range(SNIFF_LINES), it)]  # range first: zip would drop a line of it
    width = wrap_width([r.text for r in head])
    if width is None:
        yield from head
        yield from it
        return
    pending: RawLine | None = None
    for raw in _chain(head, it):
        if pending is None:
            pending = raw
        else:
            pending = RawLine(pending.lineno, pending.offset, pending.text.rstrip("\r") + raw.text, pending.context)
        if len(raw.text.rstrip("\r")) != width:
            yield pending
            pending = None
    if pending is not None:
        yield pending


def _chain(head: list[RawLine], rest: Iterator[RawLine]) -> Iterator[RawLine]:
    yield from head
    yield from rest


# -- lost newlines -------------------------------------------------------------------------
TB_HEAD_TEXT = "Traceback (most recent call last):"
_BOUNDARY = re.compile(
    r"(?=Traceback \(most recent call last\):)"
    r'|(?=\bFile "[^"\n]+", line \d+)'
    r"|(?=The above exception was the direct cause of the following exception:)"
    r"|(?=During handling of the above exception, another exception occurred:)"
)
_FRAME_PIECE = re.compile(r'^File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\S+))?\s*(?P<rest>.*)$')
_SEPARATORS = ("The above exception was the direct cause of the following exception:",
               "During handling of the above exception, another exception occurred:")
# An exception line inside joined code: a class-like name after a space, then ": " or the end;
# or any class of a package's exceptions module (`torch._dynamo.exc.Unsupported: …`).
_EXC_IN_CODE = re.compile(
    r"(?:^|(?<=\s))(?P<exc>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*"
    r"(?:Error|Exception|Exit|Interrupt|Timeout|Failure|Dead|Group|Cancelled|Iteration)(?=: |\s*$)"
    r"|(?:[A-Za-z_]\w*\.)+(?:exc|exceptions|errors)\.[A-Z]\w*(?=: ))"
)
_CARETS = re.compile(r"(?:^|\s)[~^]{2,}(?=\s|$)")
MIN_JOINED_LEN = 120


def looks_joined(payload: str) -> bool:
    if len(payload) < MIN_JOINED_LEN:
        return False
    idx = payload.find(TB_HEAD_TEXT)
    if idx >= 0 and payload[idx + len(TB_HEAD_TEXT):].strip():
        return True
    if payload.startswith("raise ") and _EXC_IN_CODE.search(payload, 6) is not None:
        return True  # a tail-only excerpt's raise line with its exception line after it
    return payload.count('File "') >= 2


def split_joined(payload: str) -> list[str]:
    """One line that holds a whole traceback -> its lines (the first is the text before it)."""
    cuts = [m.start() for m in _BOUNDARY.finditer(payload)]
    pieces = [payload[a:b] for a, b in zip([0] + cuts, cuts + [len(payload)])]
    out: list[str] = []
    for piece in pieces:
        piece = piece.strip()
        if not piece:
            continue
        if piece.startswith(TB_HEAD_TEXT):
            out.append(TB_HEAD_TEXT)
            out.extend(_code_and_exception(piece[len(TB_HEAD_TEXT):], indent=False))
            continue
        sep = next((s for s in _SEPARATORS if piece.startswith(s)), None)
        if sep is not None:
            out += ["", sep, ""]
            continue
        m = _FRAME_PIECE.match(piece)
        if m is None:
            out.extend(_code_and_exception(piece, indent=True) if piece.startswith("raise ") else [piece])
            continue
        func = f", in {m.group('func')}" if m.group("func") else ""
        out.append(f'  File "{m.group("file")}", line {m.group("line")}{func}')
        out.extend(_code_and_exception(m.group("rest"), indent=True))
    return out


def _code_and_exception(rest: str, indent: bool) -> list[str]:
    rest = _CARETS.sub(" ", rest).strip()
    if not rest:
        return []
    m = _EXC_IN_CODE.search(rest)
    if m is None:
        return [("    " + rest) if indent else rest]
    code, exc = rest[: m.start()].strip(), rest[m.start():].strip()
    return ([("    " + code)] if code else []) + [exc]

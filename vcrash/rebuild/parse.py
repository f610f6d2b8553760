"""Parse the lines of one finished traceback region into exceptions and frames.

The streaming state machine (`stream.py`) decides where a region starts and ends; this module
turns the buffered payloads into the model: chains (cause/context), exception groups
(recursively, by margin depth), faulthandler dumps and C++ aborts. It never raises on damaged
input: what cannot be placed makes the traceback `corrupted`, with a reason.
"""

from __future__ import annotations

import re
from sys import intern  # the same paths and functions recur in every copy and rank

from vcrash.memo import MAX_KEYED_LINES, MAX_KEYED_TEXT, Memo
from vcrash.rebuild import grammar as g
from vcrash.rebuild.model import ExceptionInfo, Frame

MAX_MESSAGE_LINES = 60
MAX_GROUP_DEPTH = 32


MAX_FOREIGN = 20


class Parsed:
    __slots__ = ("exceptions", "problems", "foreign")

    def __init__(self) -> None:
        self.exceptions: list[ExceptionInfo] = []
        self.problems: list[str] = []
        # Unindented text among the frames: another writer's output (a prompt, a print) that
        # landed inside the traceback. It may quote the cause.
        self.foreign: list[str] = []


def parse_python(lines: list[tuple[int, str]]) -> Parsed:
    out = Parsed()
    _parse_chain(lines, out, relation_first=None, group_path=None, depth=0)
    return out


# Regions parsed before, by their texts (with the line numbers of that parse): a crash loop's
# runs, every rank's copy and 100 K processes' cut traceback pieces are parsed once each.
_PARSED: Memo[tuple] = Memo(256)  # ~2 MB at most: a region of 64 lines and 4 KB each
_SEEN_ONCE: Memo[bool] = Memo()  # hashes of regions parsed once (ints: nothing for the collector)
_AT_LINE = re.compile(r"line (\d+): ")  # how a problem names its line (always at its start)


def parse_python_kept(lines: list[tuple[int, str]]) -> Parsed:
    """parse_python(lines), from a kept answer when the same texts were parsed before (the
    answer's line numbers moved to these lines; new exception objects, the frames shared)."""
    if len(lines) > MAX_KEYED_LINES:
        return parse_python(lines)
    texts = tuple([text for _lineno, text in lines])
    kept = _PARSED.get(texts)
    if kept is None:
        parsed = parse_python(lines)
        # Kept from its second sighting on: holding every region seen once (100 K processes'
        # unique pieces) made the collector walk them, a tenth of the run.
        seen = hash(texts)
        if seen not in _SEEN_ONCE:
            _SEEN_ONCE.put(seen, True)
        elif sum(map(len, texts)) <= MAX_KEYED_TEXT:
            # Nothing changes a parse once made; where it names line numbers is worked out once.
            _PARSED.put(texts, (parsed, lines, _line_slots(parsed, lines)))
        return parsed
    parsed, then, slots = kept
    if then == lines:
        return parsed  # the same region again
    return _moved(parsed, slots, lines)


def _line_slots(parsed: Parsed, lines: list[tuple[int, str]]) -> tuple[list, list]:
    """Where a parse names line numbers, by index into its region: each exception's line, and
    each problem as (index or None, its text after "line N: ")."""
    index_of = {lineno: i for i, (lineno, _text) in enumerate(lines)}
    exception_at = [None if e.line is None else index_of[e.line] for e in parsed.exceptions]
    problems = []
    for problem in parsed.problems:
        m = _AT_LINE.match(problem) if problem.startswith("line ") else None
        problems.append((None, problem) if m is None else (index_of[int(m.group(1))], problem[m.end():]))
    return exception_at, problems


def _moved(kept: Parsed, slots: tuple[list, list], lines: list[tuple[int, str]]) -> Parsed:
    """`kept` as if parsed from `lines`: each line number it names is at the same index (100 K
    processes' cut pieces differ only in their lines)."""
    exception_at, problems = slots
    out = Parsed()
    out.exceptions = [
        ExceptionInfo(e.type, e.message, e.relation, list(e.frames), list(e.native_frames), e.repeated_frames,
                      e.group_path, None if at is None else lines[at][0], e.inferred)
        for e, at in zip(kept.exceptions, exception_at)]
    out.problems = [problem if at is None else f"line {lines[at][0]}: {problem}" for at, problem in problems]
    out.foreign = list(kept.foreign)
    return out


def _parse_chain(lines: list[tuple[int, str]], out: Parsed, relation_first: str | None,
                 group_path: str | None, depth: int) -> None:
    state = "head"  # head | frames | msg
    frames: list[Frame] = []
    repeated = 0
    relation = relation_first
    current: ExceptionInfo | None = None
    message_lines = 0
    code_before: str | None = None  # a source line seen before any frame (a tail-only excerpt)
    # How far the last frame line (or the source line of a tail-only excerpt) was indented. A
    # traceback printed inside another program's output as an indented block (pip's "[N lines
    # of output]", a nested paste) keeps its shape: its exception line is indented less than
    # the frames, its source lines more.
    shape_indent = 0
    i = 0
    n = len(lines)
    while i < n:
        lineno, text = lines[i]
        stripped = text.strip()
        if shape_indent and text[:1] == " " and state in ("frames", "head") \
                and len(text) - len(text.lstrip(" ")) < shape_indent and g.exception_line(stripped) is not None:
            text = stripped  # the block's exception line
        if g.TB_HEAD.match(text) or "most recent call last" in text and g.IPY_HEAD.match(text):
            if state == "frames" and frames:
                out.problems.append(f"line {lineno}: new traceback before the exception line of the previous one")
            state, frames, repeated = "frames", [], 0
            i += 1
            continue
        if g.GROUP_HEAD.match(text):
            # Collect the whole group (margin lines, plus margin-less message continuations).
            j = i + 1
            while j < n and not _ends_group(lines[j][1]):
                j += 1
            group_lines = lines[i:j]
            before = len(out.exceptions)
            _parse_group(group_lines, out, base_depth=_margin_depth(text), group_path=group_path,
                         relation=relation, depth=depth)
            if len(out.exceptions) > before:
                current = out.exceptions[before]
            relation = None
            state = "msg"
            message_lines = MAX_MESSAGE_LINES  # a group's tail is its members, not message text
            i = j
            continue
        if stripped == g.CAUSE_SEP or stripped == g.CONTEXT_SEP:
            if state == "frames":
                out.problems.append(f"line {lineno}: chain separator before an exception line")
            relation = "cause" if stripped == g.CAUSE_SEP else "context"
            state, frames, repeated = "head", [], 0
            i += 1
            continue
        if state == "frames":
            m = g.FRAME.match(text)
            if m:
                frames.append(Frame(intern(m.group("file")), int(m.group("line")), intern(m.group("func"))))
                shape_indent = len(text) - len(text.lstrip(" "))
                i += 1
                continue
            m = g.FRAME_NOFUNC.match(text)
            if m:
                frames.append(Frame(intern(m.group("file")), int(m.group("line")), None))
                shape_indent = len(text) - len(text.lstrip(" "))
                i += 1
                continue
            m = g.REPEAT.match(text)
            if m:
                repeated += int(m.group("n"))
                i += 1
                continue
            if not stripped or g.CARET.match(text) or g.ELISION.match(text):
                i += 1
                continue
            ipy = g.ipython_frame(text)
            if ipy is not None:
                frames.append(Frame(*ipy))
                i += 1
                continue
            m = g.IPY_CODE.match(text)
            if m and frames:
                frames[-1].code = m.group("code").strip()
                i += 1
                continue
            if g.IPY_CONTEXT.match(text):
                i += 1
                continue
            if text[:1] in " \t" or (frames and frames[-1].code is None and g.exception_line(text) is None):
                if text[:1] not in " \t" and len(out.foreign) < MAX_FOREIGN:
                    out.foreign.append(stripped)
                if frames and frames[-1].code is None:
                    frames[-1].code = stripped
                i += 1
                continue
        if state in ("frames", "head"):
            exc = g.exception_line(text)
            if exc is None and _after_source(lines, i, frames, code_before):
                exc = g.exception_line(text, lenient=True)
            if exc is not None:
                current = ExceptionInfo(exc[0], exc[1], relation, frames, repeated_frames=repeated,
                                        group_path=group_path, line=lineno)
                if group_path is not None and relation is None and _first_in(out, group_path):
                    current.relation = "group"
                out.exceptions.append(current)
                relation, frames, repeated = None, [], 0
                state, message_lines = "msg", 0
                i += 1
                continue
            if state == "head" and (not stripped or g.CARET.match(text) or g.ELISION.match(text)
                                    or stripped.startswith("... (max_group_depth is ")):
                i += 1
                continue
            if state == "head":
                m = g.FRAME.match(text) or g.FRAME_NOFUNC.match(text) or g.ipython_frame(text)
                if m:  # a block whose header line was lost
                    out.problems.append(f"line {lineno}: frames without a 'Traceback' header")
                    state = "frames"
                    continue
            if state == "head" and text[:1] in " \t":
                code_before = stripped  # tail-only excerpt: the innermost frame's source line
                shape_indent = len(text) - len(text.lstrip(" "))
                i += 1
                continue
            out.problems.append(f"line {lineno}: unexpected line in traceback: {stripped[:80]!r}")
            if len(out.foreign) < MAX_FOREIGN:
                out.foreign.append(stripped)
            i += 1
            continue
        # state == "msg": message continuation, notes, native frames.
        if current is not None:
            m = g.CPP_FRAME.match(text)
            if m:
                current.native_frames.append(stripped)
            elif message_lines < MAX_MESSAGE_LINES and not (not stripped and _next_is_separator(lines, i)):
                current.message = f"{current.message}\n{text}" if current.message or message_lines else text
                message_lines += 1
        i += 1
    if state == "frames" or state == "head" and code_before is not None and depth == 0 and not out.exceptions:
        out.problems.append("cut off before the exception line")
        inferred = g.inferred_from_raise(frames[-1].code if frames else code_before)
        if inferred is not None:
            # Cut right after `raise Name("…")`: the type and the literal message are on the line.
            exc = ExceptionInfo(inferred[0], inferred[1], relation, frames, repeated_frames=repeated,
                                group_path=group_path)
            exc.inferred = True
            out.exceptions.append(exc)
        elif frames:
            out.exceptions.append(ExceptionInfo("<truncated>", "", relation, frames, repeated_frames=repeated,
                                                group_path=group_path))
    for exc in out.exceptions:
        exc.message = exc.message.rstrip("\n ")


def _after_source(lines: list[tuple[int, str]], i: int, frames: list[Frame], code_before: str | None) -> bool:
    """Is line i where CPython prints the exception line: after a frame's source or caret line?"""
    if i == 0:
        return False
    prev = lines[i - 1][1]
    if g.ELISION.match(prev) and i >= 2:  # "…" a user put in place of the lines they cut
        prev = lines[i - 2][1]
    return bool(prev[:1] in " \t^~" and prev.strip()) or bool(frames) or code_before is not None


def _first_in(out: Parsed, group_path: str) -> bool:
    return not any(e.group_path == group_path for e in out.exceptions)


def _next_is_separator(lines: list[tuple[int, str]], i: int) -> bool:
    for _, text in lines[i + 1:i + 4]:
        s = text.strip()
        if s:
            return s in (g.CAUSE_SEP, g.CONTEXT_SEP) or bool(g.TB_HEAD.match(text))
    return True


def _margin_depth(text: str) -> int:
    return (len(text) - len(text.lstrip(" "))) // 2


def _ends_group(text: str) -> bool:
    # A group's lines all start with a margin; CPython 3.11/3.12 print multi-line messages of
    # members without it, so a margin-less line only ends the group when it is structural.
    if g.GROUP_MARGIN.match(text):
        return False
    s = text.strip()
    return (not s or s in (g.CAUSE_SEP, g.CONTEXT_SEP) or bool(g.TB_HEAD.match(text))
            or g.exception_line(text) is not None and not text.startswith(" "))


def _parse_group(lines: list[tuple[int, str]], out: Parsed, base_depth: int, group_path: str | None,
                 relation: str | None, depth: int) -> None:
    """Lines of one group at margin depth `base_depth` (the header's indent / 2)."""
    if depth > MAX_GROUP_DEPTH:
        out.problems.append("exception groups nested too deeply; inner members skipped")
        return
    indent = "  " * base_depth
    own: list[tuple[int, str]] = []
    members: list[tuple[str, list[tuple[int, str]]]] = []
    for lineno, text in lines:
        m = g.GROUP_SPLIT.match(text)
        if m and len(m.group("indent")) == len(indent):
            members.append((m.group("idx"), []))
            continue
        if g.GROUP_CLOSE.match(text):
            continue
        if members:
            members[-1][1].append((lineno, text))
            continue
        if g.GROUP_HEAD.match(text):
            # The group's own header ("  + Exception Group Traceback …") opens its frame list.
            own.append((lineno, "Traceback (most recent call last):"))
            continue
        own.append((lineno, _strip_margin(text, indent)))
    before = len(out.exceptions)
    _parse_chain(own, out, relation, group_path, depth + 1)
    group_exc = out.exceptions[before] if len(out.exceptions) > before else None
    if group_exc is not None and group_path is not None and group_exc.relation is None:
        group_exc.relation = "group"
    for idx, member_lines in members:
        if idx == "...":
            continue
        path = f"{group_path}.{idx}" if group_path else idx
        inner_indent = indent + "  "
        if any(g.GROUP_SPLIT.match(t) and len(g.GROUP_SPLIT.match(t).group("indent")) == len(inner_indent)
               for _, t in member_lines):
            # The member is itself a group: its own lines are at the next depth.
            first = len(out.exceptions)
            _parse_group(member_lines, out, base_depth + 1, path, None, depth + 1)
            if len(out.exceptions) > first:
                out.exceptions[first].relation = "group"
        else:
            stripped = [(ln, _strip_margin(t, inner_indent)) for ln, t in member_lines]
            first = len(out.exceptions)
            _parse_chain(stripped, out, None, path, depth + 1)
            for exc in out.exceptions[first:]:
                if exc.relation is None:
                    exc.relation = "group"


def _strip_margin(text: str, indent: str) -> str:
    if text.startswith(indent) and len(text) > len(indent) and text[len(indent)] in "|+":
        rest = text[len(indent) + 1:]
        return rest[1:] if rest.startswith(" ") else rest
    return text  # margin-less continuation (CPython 3.11/3.12 bug)


def parse_faulthandler(lines: list[tuple[int, str]]) -> Parsed:
    out = Parsed()
    what = ""
    threads: list[list[Frame]] = []
    for _lineno, text in lines:
        m = g.FATAL.match(text)
        if m and not what:
            what = m.group("what")
            continue
        if g.FH_THREAD.match(text):
            threads.append([])
            continue
        m = g.FH_FRAME.match(text)
        if m and threads:
            threads[-1].append(Frame(intern(m.group("file")), int(m.group("line")), intern(m.group("func"))))
    frames = list(reversed(threads[0])) if threads else []  # faulthandler prints newest first
    out.exceptions.append(ExceptionInfo("Fatal Python error", what, None, frames, line=lines[0][0]))
    if not threads:
        out.problems.append("faulthandler dump without thread stacks")
    return out


def parse_cpp_abort(lines: list[tuple[int, str]]) -> Parsed:
    out = Parsed()
    cls, msg_lines, native = "", [], []
    for _lineno, text in lines:
        m = g.CPP_TERMINATE.match(text)
        if m:
            cls = m.group("cls")
            continue
        m = g.CPP_WHAT.match(text)
        if m:
            msg_lines.append(m.group("msg"))
            continue
        m = g.CPP_FRAME.match(text)
        if m:
            native.append(text.strip())
            continue
        if g.CPP_RAISED.match(text):
            native.append(text.strip())
            continue
        if msg_lines and len(msg_lines) < MAX_MESSAGE_LINES and not native:
            msg_lines.append(text)
    exc = ExceptionInfo(cls or "<c++ exception>", "\n".join(msg_lines).strip(), None, [], line=lines[0][0])
    exc.native_frames = native
    out.exceptions.append(exc)
    if not msg_lines:
        out.problems.append("C++ abort without a what() message")
    return out

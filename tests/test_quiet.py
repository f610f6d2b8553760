"""A routine record (split/quiet.py) is one the splitter makes a single DEBUG/INFO/WARNING line
of, which opens no traceback region and is no error line: the bulk scan may pass over it when
its only needles are words that only a line without a level needs."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcrash.analyze import is_error_line
from vcrash.rebuild.stream import Rebuilder
from vcrash.split import Splitter
from vcrash.split.quiet import ROUTINE_LEVELS, ROUTINE_SHAPE, routine_record

TAG = "(APIServer pid=7) "
HEAD = "INFO 10-09 08:57:17 [async_llm.py:411] "


@pytest.mark.parametrize("line", [
    TAG + HEAD + "Request chatcmpl-1 aborted.",
    "\x1b[1;36m" + TAG.rstrip() + "\x1b[0;0m " + HEAD + "Aborted request chatcmpl-1.",
    HEAD + "Aborted request chatcmpl-41d2.",  # 0.8's untagged records
    "2025-10-09T09:29:15.827483177Z " + TAG + HEAD + "Request chatcmpl-1 aborted.",  # a CRI timestamp
    TAG + "WARNING 10-09 08:57:17 [serving_chat.py:186] client went away, request aborted",
])
def test_routine_records(line):
    assert routine_record(line)


@pytest.mark.parametrize("line", [
    "Aborted (core dumped)",
    "bash: line 1: 4242 Killed                  vllm serve /models/qwen",
    TAG + "ERROR 10-09 08:57:17 [core.py:710] EngineCore was aborted",
    TAG + "Aborted (core dumped)",  # a raw line behind the tag: no level
    TAG + HEAD + "RuntimeError: NCCL communicator was aborted",  # an exception line opens a region
    TAG + HEAD + "Traceback (most recent call last): the process was killed",
    TAG + HEAD + "done.(EngineCore_DP0 pid=9) Aborted (core dumped)",  # two lines joined
    TAG + HEAD + "Request chatcmpl-1 aborted.\rAborted (core dumped)",
    TAG + HEAD + 'killed: {"x": [] }',  # markdown-looking text is unescaped first
])
def test_other_lines(line):
    assert not routine_record(line)


OUTER = ["", "", "", "2025-10-09T09:29:15.827483177Z ", "vllm-1  | ", "\x1b[1;36m"]
TAGS = ["", "(APIServer pid=7) ", "(EngineCore_DP0 pid=9) ", "\x1b[1;36m(APIServer pid=7)\x1b[0;0m ", "[rank0]: ",
        "(APIServer pid=7) (EngineCore_DP0 pid=9) "]
LEVELS = ["INFO ", "INFO ", "DEBUG ", "WARNING ", "ERROR ", "CRITICAL ", "", "INFO:     "]
STAMPS = ["10-09 08:57:17 "] * 3 + ["", "10-09 "]
SOURCES = ["[async_llm.py:411] ", "[core.py:710] "] * 2 + ["", "async_llm.py:411] "]
WORDS = ["Request chatcmpl-1 aborted."] * 6 + ["Aborted request chatcmpl-1.", " the job was killed"] * 3 + ["Aborted", "killed", "RuntimeError: ", "Traceback (most recent call last):",
         "  File \"x.py\", line 1, in f", "(", ")", ": ", "\r", "\t", "{", "}", "\\n", "x", " ", "cluster]",
         "Fatal Python error: ", "terminate called", "raise ", "^^^", "+-+", "core dumped", "ValueError",
         "(EngineCore_DP0 pid=9) ", "OOM"]


@settings(max_examples=800, deadline=None)
@given(st.sampled_from(OUTER), st.sampled_from(TAGS), st.sampled_from(LEVELS), st.sampled_from(STAMPS),
       st.sampled_from(SOURCES), st.lists(st.sampled_from(WORDS), min_size=1, max_size=8))
def test_a_routine_record_is_read_by_nothing(outer, tag, level, stamp, source, words):
    line = outer + tag + level + stamp + source + "".join(words)
    if not routine_record(line):
        return
    lines = Splitter("x").split(1, 0, line)
    assert len(lines) == 1 and lines[0].level in ROUTINE_LEVELS, line
    assert not is_error_line(lines[0]), line
    rebuilder = Rebuilder("x")
    rebuilder.feed(lines[0])
    assert not rebuilder.hot(), line


def _needles():
    from vcrash.analyze import needles_for, raw_only_needles
    from vcrash.classify.match import Matcher
    from vcrash.classify.rules import load_pack
    from vcrash.read import CONTEXT_NEEDLES

    matcher = Matcher(load_pack())
    raw = raw_only_needles(matcher)
    return raw, [n for n in (*needles_for(matcher), *CONTEXT_NEEDLES) if n not in raw]


RAW_ONLY, OTHER_NEEDLES = _needles()


FIRST = ["Request", "Aborted", "aborted", "Added", "Finished", "ValueError:", "TypeError", "RuntimeError:",
         "ray.exceptions.RayTaskError:", "Killed", "raise", "Traceback", "File", "terminate", "x", "KeyboardInterrupt",
         "SystemExit:", "+", "~", "^", "(ValueError:", "0"]
REST = [" chatcmpl-1", " aborted.", " killed", " core dumped", ": ", "pid=3", " (EngineCore_DP0 pid=9) ", "\\",
        "[]", "](", " ERROR ", " most recent call last", ' File "x.py", line 1', " Traceback", "^M", "cluster]",
        " {", "}", "\t", "é", " ValueError: bad", " raise ValueError", "="]


@settings(max_examples=800, deadline=None)
@given(st.sampled_from(["", "2025-10-09T09:29:15.827483177Z ", "\x1b[1;36m"]),
       st.sampled_from(["(APIServer pid=7)", "(EngineCore_DP0 pid=9)", "(APIServer pid=7)\x1b[0;0m"]),
       st.sampled_from([" INFO 10-09 08:57:17 [async_llm.py:411] ", " INFO 10-09 08:57:17 [core.py:1] "]),
       st.sampled_from(FIRST), st.lists(st.sampled_from(REST), max_size=6))
def test_the_common_shape_is_a_routine_record(outer, tag, head, first, rest):
    """The bulk scan passes over a line of ROUTINE_SHAPE without routine_record()'s closer look
    when it holds no other needle: such a line must be one."""
    line = outer + tag + head + first + " " + "".join(rest)
    data = line.encode()
    if ROUTINE_SHAPE.fullmatch(data) is None or any(n in data for n in OTHER_NEEDLES):
        return
    assert routine_record(line), line


def test_the_raw_only_needles_are_the_words_of_dying_processes():
    assert {b"aborted", b"Aborted", b"core dumped", b"Segmentation fault"} <= RAW_ONLY
    assert not RAW_ONLY & {b"Killed", b"Error", b"Traceback", b"Fatal Python"}  # other rules' or heads

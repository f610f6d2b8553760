"""Line kinds of the CPython traceback grammar (3.8–3.13), faulthandler and C++ aborts.

Matching is lenient about indentation because pasted logs lose it.
"""

from __future__ import annotations

import re

TB_HEAD = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
GROUP_HEAD = re.compile(r"^\s*\+ Exception Group Traceback \(most recent call last\):\s*$")
# The opening quote (and the space) may be gone: a user who cut a private path prefix out of
# every frame ('File Desktop/venv/…/serving_chat.py", line 205, in …').
FRAME = re.compile(r'^\s*File ?"?(?P<file>[^"\s][^"]*)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
FRAME_NOFUNC = re.compile(r'^\s*File ?"?(?P<file>[^"\s][^"]*)", line (?P<line>\d+)\s*$')
REPEAT = re.compile(r"^\s*\[Previous line repeated (?P<n>\d+) more times?\]\s*$")
CARET = re.compile(r"^\s*[~^ ]*\^[~^ ]*$")
ELISION = re.compile(r"^\s*\.\.\.(?:<\d+ lines>\.\.\.)?\s*$")
CAUSE_SEP = "The above exception was the direct cause of the following exception:"
CONTEXT_SEP = "During handling of the above exception, another exception occurred:"
# An exception line: a (dotted) name, optionally ": message".
EXC = re.compile(r"^(?P<type>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*(?:\([A-Za-z_][\w.]*\))?)(?::(?: (?P<msg>.*))?)?$")
_EXC_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Timeout", "Iteration",
                 "Failure", "Dead", "Group", "Cancelled")
PRE_PROC = re.compile(r"^Process (?P<name>[\w\-]+):\s*$")
PRE_THREAD = re.compile(r"^Exception in thread (?P<name>.+):\s*$")
PRE_IGNORED = re.compile(r"^Exception ignored in: (?P<obj>.+)$")
PRE_TASK = re.compile(r"^(?:(?:Task|Future) exception was never retrieved|future: <(?:Task|Future) finished .*>)\s*$")
# A line that is nothing but an exception's repr: `TypeError("…")`, `AssertionError()`.
BARE_REPR = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\((?:(?P<q>['\"])(?P<msg>.*)(?P=q))?\)\s*$")
# asyncio's repr of the failed future names its exception: `… exception=RuntimeError('msg')>`.
TASK_EXCEPTION = re.compile(r"\bexception=(?P<type>[A-Za-z_][\w.]*)\((?P<q>['\"])(?P<msg>.*)(?P=q)\)>\s*$")
FATAL = re.compile(r"^\s*Fatal Python error: (?P<what>.+?)\s*$")
FH_THREAD = re.compile(r"^\s*(?:Current thread|Thread) 0x[0-9a-fA-F]+ (?:\[[^\]]*\] )?\(most recent call first\):\s*$")
FH_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
FH_OTHER = re.compile(r"^\s*(?:<no Python frame>|Garbage-collecting|Extension modules: .*|Python runtime state: .*|\(total: \d+\)|\.\.\.)\s*$")
CPP_TERMINATE = re.compile(r"^\s*terminate called after throwing an instance of '(?P<cls>[^']+)'\s*$")
CPP_WHAT = re.compile(r"^\s*what\(\):\s+(?P<msg>.*)$")
CPP_RAISED = re.compile(r"^\s*Exception raised from (?P<fn>.+?) at (?P<loc>\S+) \(most recent call first\):\s*$")
CPP_FRAME = re.compile(r"^\s*frame #(?P<n>\d+): (?P<sym>.*)$")
GROUP_SPLIT = re.compile(r"^(?P<indent>(?:  )*)(?:\+-|  )\+-{16} (?P<idx>\d+|\.\.\.) -{16}\s*$")
GROUP_CLOSE = re.compile(r"^\s*\+-{36}\s*$")
GROUP_MARGIN = re.compile(r"^\s*[|+]")


TB_HEAD_TEXT = "Traceback (most recent call last):"
# The API server's per-request handlers log a traceback after one of these (regex pieces): the
# request failed, the server did not. The rebuilder takes such a record as the traceback's
# context even when it is not the line right before; the matcher reads it as not fatal.
REQUEST_HANDLER_PHRASES = (
    r"Exception in ASGI application", r"Error in (?:chat )?completion stream generator", r"Error in preprocessing",
    r"Invocation of \w+ method failed", r"Unexpected error pre-processing request", r"failed \(bad request\)",
    r"failure while handling request",  # Ray Serve LLM's per-request handler (error_handling_utils)
    r"Error in extracting tool call",  # a tool parser's logged failure on one response
)

# The OpenAI server's request modules (serving_chat.py, serving_completion.py, serving_engine.py …):
# a traceback their logger wrote is a request's handled failure, even cut above its handler frames.
# (0.16 on: each endpoint's package has a serving.py, e.g. chat_completion/serving.py.)
REQUEST_LOG_SOURCE = re.compile(r"serving(?:_\w+)?\.py:\d+$")

# IPython / Jupyter (offline `LLM(...)` users): "ValueError    Traceback (most recent call last)",
# frames "File /p/llm.py:292, in LLM.__init__(self, …)" / "Cell In[13], line 43" /
# "/p/llm.py in __init__(self)" (IPython 7), code "---> 43 llm = LLM(…)", context "     41 x".
IPY_HEAD = re.compile(r"^\s*(?P<type>[A-Za-z_][\w.]*)\s{2,}Traceback \(most recent call last\)\s*$")
IPY_FRAME = re.compile(
    r"^\s*(?:File (?P<file>\S.*?):(?P<line>\d+)(?:, in (?P<func>[^\s(]+)(?:\(.*)?)?"
    r"|Cell (?P<cell>In\s*\[\d+\]), line (?P<cline>\d+)"
    r"|(?P<file7>(?:/|~|[A-Za-z]:\\|<ipython-input-)\S*) in (?P<func7>[^\s(]+)\(.*\)?)\s*$"
)
IPY_CODE = re.compile(r"^\s*-*> ?(?P<n>\d+) (?P<code>.*)$")
IPY_CONTEXT = re.compile(r"^\s+\d+ |^\s*\[\.\.\. skipping .*\]\s*$|^-{20,}\s*$")


def ipython_frame(text: str) -> tuple[str, int, str | None] | None:
    m = IPY_FRAME.match(text)
    if m is None:
        return None
    if m.group("file"):
        return m.group("file"), int(m.group("line")), m.group("func")
    if m.group("cell"):
        return m.group("cell"), int(m.group("cline")), "<module>"
    return m.group("file7"), None, m.group("func7")


# A trailing `raise Name("literal …")` source line: the type and message when the exception
# line itself was cut off.
RAISE = re.compile(
    r"^\s*raise (?P<type>[A-Za-z_][\w.]*)\((?:f|r|rb|b)?(?P<q>[\"'])(?P<msg>(?:(?!(?P=q)).)*)(?P=q)?"
)


def inferred_from_raise(code: str | None) -> tuple[str, str] | None:
    if not code:
        return None
    m = RAISE.match(code)
    if m is None:
        return None
    name = m.group("type")
    last = name.rsplit(".", 1)[-1]
    if not last[:1].isupper():
        return None
    msg = re.sub(r"\{[^{}]*\}", "…", m.group("msg"))  # f-string fields: unknown at the crash
    return name, msg.rstrip("\\").strip()


def inferred_from_context(context: str | None, kind: str | None) -> tuple[str, str] | None:
    """The exception the line before a traceback names when the traceback is cut before its own
    exception line: asyncio's `future: <… exception=Type('msg')>`, or a bare `Type('msg')` repr
    (V0's engine loop logs repr(e), then the traceback)."""
    if not context or "(" not in context:
        return None
    if kind == "task":
        tail = context[-2000:]
        m = TASK_EXCEPTION.search(tail) if "exception=" in tail else None
    else:
        m = BARE_REPR.match(context) if len(context) <= 2000 else None
    if m is None or not m.group("type").rsplit(".", 1)[-1][:1].isupper():
        return None
    q = m.group("q")
    msg = (m.group("msg") or "").replace("\\" + q, q).replace("\\n", "\n") if q else ""
    return m.group("type"), msg.strip()


def body_shaped(text: str) -> bool:
    """A line that only occurs inside a traceback: a frame, indented source, a caret line, a
    chain separator. Never a log message that introduces one."""
    if not text:
        return False
    s = text.strip()
    if s in (CAUSE_SEP, CONTEXT_SEP):
        return True
    if text[0] in " \t":
        return bool(s)
    return bool(FRAME.match(text) or FRAME_NOFUNC.match(text) or CARET.match(text) and "^" in text)


# What may end the text before an embedded header: a message ("…exception:"; V0's multiproc
# worker summary "Exception in worker … while processing method …: <error>, Traceback …"), an
# unrecognised log prefix ("[2025-01-01 12:00:00]", "app[12]:", "(worker)"), a separator ("-",
# "|", ">").
EMBEDDED_HEAD_ENDS = (":", ",", "]", ")", "-", "|", ">")


def embedded_tb_head(text: str) -> str | None:
    """vLLM 0.8 logs `EngineCore hit an exception: Traceback (most recent call last):` and prints
    the frames raw after it: the log message before the header, or None."""
    s = text.rstrip()
    if not s.endswith(TB_HEAD_TEXT):
        return None
    head = s[: -len(TB_HEAD_TEXT)].rstrip()
    if not head or not head.endswith(EMBEDDED_HEAD_ENDS) or _margin_only(head):
        return None
    return head


def _margin_only(head: str) -> bool:
    return GROUP_MARGIN.match(head) is not None and not head.strip(" |+")


def exception_line(text: str, lenient: bool = False) -> tuple[str, str] | None:
    """(type, message) when the line looks like an exception line, else None.

    `lenient`: the line follows a frame's source line, where CPython prints only the exception
    line; accept what a user's abbreviation left of it (a type cut mid-word, no known suffix)."""
    if not text or text[0] in " \t" or len(text) > 100_000:
        return None
    if text[0] == "(":  # "(ValueError: message)": a user's own wrapping
        text = text[1:-1] if text.endswith(")") else text[1:]
        if not text or text[0] in " \t":
            return None
    head = text[:200]
    colon = head.find(":")
    name = head if colon < 0 else head[:colon]
    if not name or len(name) > 120 or " " in name:
        return None
    m = EXC.match(name)
    if m is None:
        return None
    if name.endswith(")") and "(" in name:
        # Ray's `RayTaskError(ValueError)` is a subclass of both: the cause's type is the one to act on.
        outer, inner = name[:-1].split("(", 1)
        if not (outer.rsplit(".", 1)[-1].endswith(_EXC_SUFFIXES) and inner.rsplit(".", 1)[-1][:1].isupper()):
            return None
        msg = "" if colon < 0 else text[colon + 1:].lstrip(" ")
        return inner, f"({outer}) {msg}".rstrip()
    last = name.rsplit(".", 1)[-1]
    # A cut type still looks like one: dotted ("torch.Accelerat"), CamelCase ("OutOfMem"), or the
    # start of a known suffix ("ValueErr"); a plain word ("Loading: 50%") is another writer's text.
    looks_like_type = "." in name or sum(ch.isupper() for ch in last) >= 2 or any(
        part in last for part in ("Err", "Exc", "Warn", "Interr", "Timeo"))
    if lenient and looks_like_type and last[:1].isupper() and not last.isupper() and len(name) >= 4:
        msg = "" if colon < 0 else text[colon + 1:].lstrip(" ")
        return name, msg
    if colon < 0:
        if not last.endswith(_EXC_SUFFIXES) and last not in ("KeyboardInterrupt", "StopIteration", "SystemExit"):
            return None
        return name, ""
    # "Name: msg" – require an exception-like class name to avoid "Note: …" or "INFO: …".
    if not (last[:1].isupper() and (last.endswith(_EXC_SUFFIXES) or "Error" in last or "Exception" in last
                                    or (("." in name) and last[:1].isupper()))):
        return None
    if last.isupper():  # INFO:, WARNING:, NCCL:
        return None
    msg = text[colon + 1:]
    if msg.startswith(" "):
        msg = msg[1:]
    return name, msg

"""Record headers inside a process's output: vLLM's logger (every version), uvicorn, torch's
c10 logger, NCCL debug lines and plain Python logging. What is left after one is the payload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VLLM = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)? "
    r"\[?(?P<file>[^\s\[\]:]+):(?P<line>\d+)\] ?"
)
_UVICORN = re.compile(r"^(?P<level>TRACE|DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
# c10 writes the date as month * 100 + day, unpadded: "[W505 …" is May 5, "[W1218 …" Dec 18.
# torch before 2.2 wrote no date at all: "[E ProcessGroupNCCL.cpp:916] ".
_C10 = re.compile(
    r"^\[(?P<sev>[IWEF])(?:(?P<mmdd>1[0-2]\d\d|[1-9]\d\d) (?P<hms>\d\d:\d\d:\d\d)\.\d+)? (?:\d+ )?"
    r"(?P<src>[\w.]+):(?P<ln>\d+)\] ?"
)
# Ray's C++ processes (raylet, core workers, the GCS): "[2025-12-12 15:10:48,697 C 42791 42791]
# experimental_mutable_object_provider.cc:153: …", the level a letter (C: a fatal RAY_CHECK).
_RAY_CPP = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?P<sev>[TDIWEC]) \d+ \d+\] "
    r"(?:\([\w-]+\) )?(?:(?P<src>[\w.-]+):(?P<ln>\d+): ?)?"
)
_RAY_LEVEL = {"T": "DEBUG", "D": "DEBUG", "I": "INFO", "W": "WARNING", "E": "ERROR", "C": "CRITICAL"}
# What the bulk scan must find so that it reads every line these native headers give an error
# level (ERROR lines count as error evidence): c10's "[E528 ", "[F1218 ", "[E " and Ray's ",697 E 4410 ",
# ",697 C 42791 " (a pid never starts with 0). vLLM's own levels are found by their words.
ERROR_HEADER_NEEDLES = tuple(f"{form}{digit}".encode() for form in ("[E", "[F", " E ", " C ") for digit in "123456789") \
    + (b"[E ", b"[F ")
_NCCL = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL (?P<level>INFO|WARN|ERROR|TRACE) ?"
)
_PYLOG = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?)\s+(?:-\s+)?(?:(?P<name>[\w.]+)\s+-\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?:-\s+)?"
)
# After a timestamp another program wrote: "LEVEL", "- name - LEVEL -", "LEVEL pid [file:line]"
# (Python logging and deployments' own formats).
_LEVELED = re.compile(
    r"^(?:-\s+)?(?:(?P<name>[\w.]+)\s+-\s+)?(?P<level>DEBUG|INFO|WARN(?:ING)?|ERROR|CRITICAL|FATAL)\b:?"
    r"(?:\s+-)?(?:\s+|$)(?:(?P<pid>\d+)\s+)?(?:\[(?P<src>[^\]\s]+:\d+)\]\s?)?"
)
# The level, then a full date and time: Ray Serve's replica logs ("ERROR 2025-05-23 00:42:04,876
# <deployment> <replica> <request id> -- message") and loggers formatted "%(levelname)s %(asctime)s".
_LEVEL_ISO = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?) "
    r"(?:(?P<name>\S+)(?: \S+){0,3} -- )?"
)
# glog's header without brackets (XLA/PJRT on TPU, Ascend transports): "E0118 22:42:45.737331
# 20084 tpu_pjrt_client.cc:1889] …", some with the year ("E20260106 06:43:02.966156 5793 …").
_GLOG = re.compile(
    r"(?P<sev>[IWEF])(?:\d{4})?(?P<mmdd>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.\d+ +(?:\d+ +)?(?P<src>[\w.-]+):(?P<ln>\d+)\] ?"
)
# A bracketed level first: C++ runtimes' logs (Ascend CANN's "[ERROR] RUNTIME(3939,):2026-08-14-…
# [stars_engine.cc:1548]4702 …"), shell scripts' and many launchers' own lines.
_BRACKET_LEVEL = re.compile(r"\[(?P<level>DEBUG|INFO|WARN(?:ING)?|ERROR|CRITICAL|FATAL)\]:? ")
# The tail of a vLLM header whose start a cut took away: "[core.py:515] ", "13:53:19 [core.py:515] ".
_VLLM_TAIL = re.compile(r"^(?:\d\d-\d\d )?(?:\d\d:\d\d:\d\d(?:\.\d+)? )?\[(?P<file>[\w.-]+\.py):(?P<line>\d+)\] ?")
# vLLM's header without its date and time (a format without %(asctime)s, or a paste that took
# them out): "ERROR [multiproc_executor.py:870] ".
_VLLM_UNTIMED = re.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \[(?P<file>[\w.-]+\.py):(?P<line>\d+)\] ?")
_LEVEL_NAMES = {"WARN": "WARNING", "FATAL": "CRITICAL"}
_C10_LEVEL = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}

# Leading text a VLLM_LOGGING_PREFIX may put before the header; longer means "not a header".
MAX_PREFIX = 64
VLLM_HEADER = _VLLM


@dataclass(slots=True)
class Header:
    kind: str  # vllm | uvicorn | c10 | nccl | pylog
    level: str | None
    time: str | None  # "MM-DD HH:MM:SS" for vLLM/c10, ISO-ish for pylog
    src: str | None  # file:line of the logging call
    end: int  # payload starts here
    pid: int | None = None


_LEVEL_WORDS = ("INFO ", "WARNING ", "ERROR ", "DEBUG ", "CRITICAL ")
_LEVELS_BEFORE = {w[0]: _LEVEL_WORDS[:i] for i, w in enumerate(_LEVEL_WORDS)}  # by first letter


def first_level_word_at(text: str, start: int) -> bool:
    """parse_header searches the level words in _LEVEL_WORDS order: would it take the header at
    `start` (no earlier-listed word within its reach)?"""
    for level in _LEVELS_BEFORE[text[start]]:
        if text.find(level, start, start + MAX_PREFIX + len(level)) >= 0:
            return False
    return True


def _vllm_header(m: re.Match) -> Header:
    level, md, hms, file, line = m.group("level", "md", "hms", "file", "line")
    return Header("vllm", level, f"{md} {hms}", f"{file}:{line}", m.end())


def parse_header(text: str, after_timestamp: bool = False) -> Header | None:
    """`after_timestamp`: a wrapper took a timestamp off the front, so a bare level word that
    follows is a record header (Python logging, custom formats)."""
    if not text:
        return None
    first = text[0]
    if first == "[" or first.isdigit() and ".py:" in text[:80]:
        m = _C10.match(text)
        if m:
            md = m.group("mmdd")
            md = md and md.zfill(4)
            return Header("c10", _C10_LEVEL[m.group("sev")], md and f"{md[:2]}-{md[2:]} {m.group('hms')}",
                          f"{m.group('src')}:{m.group('ln')}", m.end())
        m = _VLLM_TAIL.match(text)
        if m:
            return Header("vllm", None, None, f"{m.group('file')}:{m.group('line')}", m.end())
        if text[1:2].isdigit():
            m = _RAY_CPP.match(text)
            if m:
                src = f"{m.group('src')}:{m.group('ln')}" if m.group("src") else None
                return Header("c10", _RAY_LEVEL[m.group("sev")], m.group("ts"), src, m.end())
        m = _BRACKET_LEVEL.match(text)
        if m:
            level = m.group("level")
            return Header("pylog", _LEVEL_NAMES.get(level, level), None, "log", m.end())
    if first in "IWEF" and text[1:2].isdigit():
        m = _GLOG.match(text)
        if m:
            md = m.group("mmdd")
            return Header("c10", _C10_LEVEL[m.group("sev")], f"{md[:2]}-{md[2:]} {m.group('hms')}",
                          f"{m.group('src')}:{m.group('ln')}", m.end())
    if first in "DIWEC":
        m = _VLLM.match(text)
        # The common case, a header right after the process tag. The search below tries the
        # level words in order, so it would take an earlier-listed one further in first.
        if m and first_level_word_at(text, 0):
            return _vllm_header(m)
        m = _UVICORN.match(text)
        if m:
            return Header("uvicorn", m.group("level"), None, None, m.end())
        m = _LEVEL_ISO.match(text)
        if m:
            return Header("pylog", m.group("level"), m.group("ts"), m.group("name") or "log", m.end())
        m = _VLLM_UNTIMED.match(text)
        if m:
            return Header("vllm", m.group("level"), None, f"{m.group('file')}:{m.group('line')}", m.end())
    # vLLM header: searched, not anchored, because of custom prefixes.
    for level in _LEVEL_WORDS:
        idx = text.find(level, 0, MAX_PREFIX + len(level))
        if idx >= 0:
            m = _VLLM.match(text, idx)
            if m:
                return _vllm_header(m)
    if first.isdigit():
        m = _PYLOG.match(text)
        if m:
            return Header("pylog", m.group("level"), m.group("ts"), m.group("name"), m.end())
        m = _NCCL.match(text)
        if m:
            level = {"WARN": "WARNING", "TRACE": "DEBUG"}.get(m.group("level"), m.group("level"))
            return Header("nccl", level, None, None, m.end(), pid=int(m.group("pid")))
    elif ":" in text[:64] and "NCCL" in text[:96]:
        m = _NCCL.match(text)
        if m:
            level = {"WARN": "WARNING", "TRACE": "DEBUG"}.get(m.group("level"), m.group("level"))
            return Header("nccl", level, None, None, m.end(), pid=int(m.group("pid")))
    if after_timestamp and first in "DIWECF-":
        m = _LEVELED.match(text)
        if m:
            level = _LEVEL_NAMES.get(m.group("level"), m.group("level"))
            pid = int(m.group("pid")) if m.group("pid") else None
            # The logger name stands in for the call site: lines of one record share it.
            return Header("pylog", level, None, m.group("src") or m.group("name") or "log", m.end(), pid=pid)
    return None

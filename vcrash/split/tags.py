"""Process tags: vLLM's `(NAME pid=N) `, Ray's `(Actor pid=N, ip=…)` with its
`[repeated Nx across cluster]` suffix, `(raylet)`, and torch's `[rankN]:`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from sys import intern

_TAG = re.compile(r"\((?:(?P<name>[^()]*?) )?pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\) ?")
_RAYLET = re.compile(r"\((?P<name>raylet|autoscaler[^)]*?)(?:, ip=(?P<ip>[^)\s]+))?\) ?")
# The same tag as some platforms print it: "[EngineCore_DP0][pid=1242] ".
_BRACKET_TAG = re.compile(r"\[(?P<name>[^\[\]()\s][^\[\]()]{0,79})\]\[pid=(?P<pid>\d+)\] ?")
_RANK = re.compile(r"\[rank(?P<rank>\d+)\]: ?")
# A tag whose "(" an excerpt's cut took: "EngineCore_DP0 pid=1248800) ValueError: …" (a name of
# vLLM's kind, one capitalised word, so that prose is not read as a tag; Ray Serve's names add
# ":app:deployment" to it).
_CUT_TAG = re.compile(r"(?P<name>[A-Z][A-Za-z0-9_]{2,40}(?::[A-Za-z0-9_.-]{1,60}){0,3}) pid=(?P<pid>\d+)"
                      r"(?:, ip=(?P<ip>[^)\s]+))?\) ")
_RAY_REPEAT = re.compile(r"\s*\[repeated (?P<n>\d+)x across cluster\]\s*$")


@dataclass(slots=True)
class Tag:
    name: str | None = None
    pid: int | None = None
    ip: str | None = None
    rank: int | None = None
    repeated: int | None = None
    raylet: bool = False


def strip_tags(text: str, tag: Tag) -> str:
    """Strip leading process tags (doubled tags included) and torch rank prefixes."""
    for _ in range(4):
        if text.startswith("("):
            m = _TAG.match(text)
            if m:
                name, pid, ip = m.groups()
                if name:  # an inner tag without a name keeps the outer one's
                    tag.name = intern(name)
                tag.pid = int(pid)
                tag.ip = ip or tag.ip
                text = text[m.end():]
                continue
            m = _RAYLET.match(text)
            if m:
                tag.name = m.group("name").split()[0]
                tag.ip = m.group("ip")
                tag.raylet = True
                text = text[m.end():]
                continue
        elif text.startswith("[rank"):
            m = _RANK.match(text)
            if m:
                tag.rank = int(m.group("rank"))
                text = text[m.end():]
                continue
        elif text.startswith("[") and text.find("][pid=", 1, 84) > 0:
            m = _BRACKET_TAG.match(text)
            if m:
                tag.name = intern(m.group("name"))
                tag.pid = int(m.group("pid"))
                text = text[m.end():]
                continue
        elif tag.pid is None and text[:1].isalpha() and " pid=" in text[:56]:
            m = _CUT_TAG.match(text)
            if m:
                tag.name, tag.pid, tag.ip = intern(m.group("name")), int(m.group("pid")), m.group("ip")
                text = text[m.end():]
                continue
        break
    # Ray's suffix also outlives its tag: a paste re-prefixed by another logger keeps it.
    if text.endswith("cluster]"):
        m = _RAY_REPEAT.search(text)
        if m:
            tag.repeated = int(m.group("n"))
            text = text[: m.start()]
    return text


_TAG_ANYWHERE = re.compile(r"\((?:[^()]{0,60}? )?pid=\d+(?:, ip=[^)\s]+)?\)")


def split_at_inner_tags(text: str) -> list[str]:
    """A line that holds process tags after other text -> pieces that each start at a tag (the
    leading run of tags, e.g. `(EngineCore pid=1) (RayWorkerWrapper pid=2, ip=…)`, stays whole)."""
    cuts = []
    lead_end = 0
    for m in _TAG_ANYWHERE.finditer(text):
        if not text[lead_end:m.start()].strip():
            lead_end = m.end()  # still in the leading run of tags
            continue
        cut = m.start()
        while cut > 0 and text[cut - 1] in "> ":  # a quote in front of the tag belongs to its line
            cut -= 1
        if ">" not in text[cut:m.start()]:
            cut = m.start()  # only the space that joined the lines: the piece starts at its tag
        while text[cut] == " ":
            cut += 1  # the quote's own line starts at its '>'
        cuts.append(cut)
    if not cuts:
        return [text]
    bounds = [0] + cuts + [len(text)]
    return [text[a:b].rstrip() for a, b in zip(bounds, bounds[1:]) if text[a:b].strip()]


def find_inner_tag(text: str, limit: int = 80) -> re.Match | None:
    """A tag after a custom VLLM_LOGGING_PREFIX (0.31+ puts the tag after the prefix)."""
    idx = text.find(" pid=", 0, limit)
    if idx < 0:
        return None
    start = text.rfind("(", 0, idx)
    if start < 0:
        return None
    return _TAG.match(text, start)


_ENGINE = re.compile(r"^(?:EngineCore(?:_(?:DP)?\d+)?|DPEngineCoreActor|EngineCoreActor|DPMoEEngineCoreActor|MQLLMEngine)$")
_WORKER = re.compile(
    r"^(?:VllmWorkerProcess|VllmWorker(?: rank=\d+| [A-Z]{2,3}\d+(?:_[A-Z]{2,3}\d+)*)?|VllmWorker-\d+"
    r"|Worker(?:_[A-Z]{2,3}\d+)*|RayWorkerWrapper|RayWorkerProc|rank\d+)$"
)
_API = re.compile(r"^(?:APIServer(?:_DPRank_\d+)?|ApiServer_\d+|DPSupervisor)$")


@functools.lru_cache(maxsize=1024)  # a few names, one call per new process
def role_of(name: str | None) -> str:
    """engine-core | worker | api-server | main | ray | other."""
    if not name:
        return "main"
    if _ENGINE.match(name):
        return "engine-core"
    if _WORKER.match(name):
        return "worker"
    if _API.match(name):
        return "api-server"
    if name in ("MainProcess",):
        return "main"
    if name in ("raylet",) or name.startswith("autoscaler"):
        return "ray"
    if "Engine" in name:
        return "engine-core"
    if "Worker" in name or "worker" in name:
        return "worker"
    return "other"

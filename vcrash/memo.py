"""A bounded memo for the per-line and per-traceback hot paths.

Repeated text is the rule in server logs (the same warning every step, one traceback in every
rank, a crash loop), so pure functions of a line or a traceback are remembered; the memo is
emptied when full, which keeps memory bounded whatever the input and costs nothing per lookup.
"""

from __future__ import annotations

from typing import Generic, Hashable, TypeVar

V = TypeVar("V")
MEMO_SIZE = 4096
# Keys made of a traceback's content hold its texts alive: kept only up to these sizes (a cache of
# 1,024 such keys stays under ~8 MB).
MAX_KEYED_TEXT = 4096
MAX_KEYED_FRAMES = 64
MAX_KEYED_LINES = 64  # a traceback region's lines


class Memo(dict, Generic[V]):
    def __init__(self, size: int = MEMO_SIZE):
        super().__init__()
        self.size = size

    def put(self, key: Hashable, value: V) -> V:
        if len(self) >= self.size:
            self.clear()
        self[key] = value
        return value

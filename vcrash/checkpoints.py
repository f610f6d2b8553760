"""Where the log's clock moved, so that the fast path can re-read a window of skipped lines
(the metrics lines before a timeout, the progress after a hang warning).

A list of (line, offset, time) would grow with every line of a log whose lines are out of
time order (100 K processes' lines shuffled: every line a new time); past a cap, every other
checkpoint goes. A window then starts at an earlier checkpoint than it could have: it reads
more, never less.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

MAX_CHECKPOINTS = 1 << 15


class Checkpoints:
    def __init__(self, cap: int = MAX_CHECKPOINTS) -> None:
        self.cap = max(4, cap)
        self._lines = array("q")
        self._offsets = array("q")
        self._times: list[str] = []

    def note(self, lineno: int, offset: int, time: str) -> None:
        """The line at `lineno` (starting at byte `offset`) carries `time`: a checkpoint where
        the time differs from the last one's."""
        times = self._times
        if times and times[-1] == time:
            return
        if len(times) >= self.cap:
            self._thin()
        self._lines.append(lineno)
        self._offsets.append(offset)
        self._times.append(time)

    def _thin(self) -> None:
        # Every other one, the first and the last kept: the first (a window may start at the
        # log's first line), the last (what the next line's time is compared with), so that
        # what is kept is always a subset of what every checkpoint would be.
        last = len(self._times) - 1
        keep = slice(0, last, 2)
        self._lines = self._lines[keep] + self._lines[last:]
        self._offsets = self._offsets[keep] + self._offsets[last:]
        self._times = self._times[keep] + self._times[last:]

    @property
    def lines(self) -> array:
        """Each checkpoint's line, in order (for bisect; read only)."""
        return self._lines

    def __len__(self) -> int:
        return len(self._times)

    def __getitem__(self, index: int) -> tuple[int, int, str]:
        return self._lines[index], self._offsets[index], self._times[index]

    def __iter__(self) -> Iterator[tuple[int, int, str]]:
        return zip(self._lines, self._offsets, self._times)

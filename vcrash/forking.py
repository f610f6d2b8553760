"""Whether this process may fork a helper onto a second CPU.

Two helpers do: the bulk scan run ahead (scan_ahead.py) and the part of a huge JSON report
written beside the rest (report/forked.py). Both need fork (Linux), a second usable CPU that no
sibling worker already has, and no other thread (fork keeps only the calling one); and both
end their child the same way (`kill`: SIGKILL, then reaped).
"""

from __future__ import annotations

import os
import sys
import threading

_cpus_in_use = False  # set in a scan's pool workers: the other workers already use every CPU


def cpus_in_use() -> None:
    """This process is one of several analyzing at once (`vcrash scan --jobs`): never fork."""
    global _cpus_in_use
    _cpus_in_use = True


def can_fork() -> bool:
    """Fork is there and safe: Linux, and no other thread running."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


def second_cpu() -> bool:
    """A helper would run beside this process rather than take turns with it."""
    return can_fork() and not _cpus_in_use and len(os.sched_getaffinity(0)) >= 2


def reap(pid: int) -> int:
    """Waits for a helper that is ending on its own: its wait status (0: a clean exit; -1: reaped already)."""
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return -1


def kill(pid: int) -> None:
    """Ends a helper whatever it is doing, and reaps it (no zombie left behind)."""
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    reap(pid)

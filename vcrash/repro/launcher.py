"""Start processes in their own session, watch them, and always clean the whole group up.

Everything is plain stdlib (urllib, /proc) so the unit tests run without vLLM.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) from /proc/PID/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    try:
        return rest[0], int(rest[1]), int(rest[2]), int(rest[3])
    except (IndexError, ValueError):
        return None


def session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is `sid`."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st and st[3] == sid and st[0] != "Z":
            out.append(int(name))
    return sorted(out)


def proc_title(pid: int) -> str:
    """The process title (setproctitle rewrites cmdline: `VLLM::Worker...`)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def pid_alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


@dataclass(eq=False)
class Launched:
    """A process tree started with start_new_session=True: its pid is the pgid and the sid."""
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen
    started: float = field(default_factory=time.monotonic)
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def pids(self) -> list[int]:
        return session_pids(self.pid)

    def find(self, prefix: str) -> list[int]:
        """pids in the group whose process title starts with (or contains) `prefix`."""
        return [p for p in self.pids() if prefix in proc_title(p)]

    def poll(self) -> int | None:
        return self.proc.poll()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        # processes that left the group but not the session
        for p in self.pids():
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, grace: float = 15.0, sig: int = signal.SIGTERM) -> int | None:
        """SIGCONT (a stopped worker cannot die politely), `sig`, wait, then SIGKILL the rest."""
        if self.stopped:
            return self.proc.returncode
        self.signal_group(signal.SIGCONT)
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not self.pids():
                break
            time.sleep(0.2)
        self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL everything left in the session, then reap the leader."""
        for _ in range(3):
            left = self.pids()
            if not left and self.proc.poll() is not None:
                break
            self.signal_group(signal.SIGKILL)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.2)
        self.stopped = True
        _LIVE.discard(self)

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def __enter__(self) -> "Launched":
        return self

    def __exit__(self, *exc) -> None:
        self.stop(grace=10)


_LIVE: set["Launched"] = set()


def kill_all() -> int:
    """Kill every process tree launched here and not yet cleaned up (used on exit / Ctrl-C)."""
    n = 0
    for p in list(_LIVE):
        p.kill()
        n += 1
    return n


def launch(argv: list[str], log_path: Path, env: dict[str, str] | None = None,
           cwd: str | None = None) -> Launched:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "ab", buffering=0)
    try:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    finally:
        fh.close()
    launched = Launched(argv=argv, log_path=log_path, proc=proc)
    _LIVE.add(launched)
    return launched


# ---------------------------------------------------------------- HTTP (urllib only)

@dataclass
class HttpResult:
    status: int | None  # None: no answer (connection refused, timeout)
    body: str
    seconds: float
    error: str | None = None

    def excerpt(self, n: int = 300) -> str:
        b = self.body if self.body else (self.error or "")
        return b if len(b) <= n else b[:n] + "…"

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def http(method: str, url: str, body: dict | None = None, timeout: float = 30.0,
         data: bytes | None = None) -> HttpResult:
    """One request; ``data`` sends those bytes as the JSON body instead of ``body``."""
    if data is None:
        data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return HttpResult(r.status, r.read().decode("utf-8", "replace"), time.monotonic() - t0)
    except urllib.error.HTTPError as e:
        try:
            text = e.read().decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - the body is best effort
            text = ""
        return HttpResult(e.code, text, time.monotonic() - t0)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        return HttpResult(None, "", time.monotonic() - t0, error=f"{type(e).__name__}: {reason}")


def wait_until(pred: Callable[[], bool], timeout: float, interval: float = 0.5,
               tick: Callable[[float], None] | None = None) -> bool:
    t0 = time.monotonic()
    while True:
        if pred():
            return True
        el = time.monotonic() - t0
        if el >= timeout:
            return False
        if tick:
            tick(el)
        time.sleep(interval)

"""A Dask scheduler and workers as separate processes on 127.0.0.1 (`dask scheduler`, `dask worker`),
and an S3-compatible server (moto) for the tests of `scan --engine dask` and URL inputs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What the moto server accepts; the secret is distinctive so a test can look for it in every output.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "vcrash-test-key-id", "AWS_SECRET_ACCESS_KEY": "vcrash-Secret-0f9a7c31e2",
           "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(extra: dict | None = None) -> dict:
    """The environment for child processes: this worktree's vcrash first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.update(extra or {})
    return env


class ProcessCluster:
    """`dask scheduler` plus N `dask worker` processes; every process group is ended on close."""

    def __init__(self, workers: int = 2, env: dict | None = None):
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        dask = [sys.executable, "-m", "dask"]
        self._start([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"], env)
        self._wait_port()
        for i in range(workers):
            self._start([*dask, "worker", self.address, "--host", "127.0.0.1", "--nthreads", "1",
                         "--no-dashboard", "--name", f"w{i}"], env)
        self._wait_workers(workers)

    def _start(self, cmd: list[str], env: dict | None) -> None:
        self.procs.append(subprocess.Popen(cmd, env=child_env(env), cwd=ROOT, start_new_session=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _wait_port(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        self.close()
        raise RuntimeError("dask scheduler did not start")

    def _wait_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            client.wait_for_workers(n, timeout=60)

    def close(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)  # the group holds a worker's own child process
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

"""The installed vLLM's OpenAI server on the tiny model, bound to 127.0.0.1 on a free port."""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from rich.console import Console

from vcrash.repro.launcher import HttpResult, Launched, free_port, http, launch, wait_until

SERVED_NAME = "tiny"
KV_BYTES = 64 * 1024 * 1024


class ServerFailed(RuntimeError):
    pass


def serve_argv(model: Path, port: int, device: str, version: tuple[int, ...] = (),
               python: str | None = None) -> list[str]:
    argv = [python or sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME,
            "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager"]
    if not version or version >= (0, 12):
        # an explicit KV size is required on CPU (else it wants 92 % of the NUMA node)
        argv += ["--kv-cache-memory-bytes", str(KV_BYTES)]
    elif device == "cuda":
        argv += ["--gpu-memory-utilization", "0.3"]
    return argv


def _installed_version() -> tuple[int, ...]:
    from vcrash.repro.env import parse_version, vllm_installed

    return parse_version(vllm_installed()[1])


_INTERESTING = re.compile(r"(Starting|Loading|Loaded|init engine|Available routes|Uvicorn|"
                          r"Error|ERROR|KV cache|Application startup)")


class Server:
    def __init__(self, model: Path, log_path: Path, env: dict[str, str], device: str,
                 console: Console | None = None, python: str | None = None,
                 version: tuple[int, ...] | None = None):
        self.model, self.log_path, self.env, self.device = model, log_path, env, device
        self.python = python or sys.executable
        self.version = version
        self.console = console or Console(stderr=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: Launched | None = None
        self.ready_s: float | None = None

    # -- lifecycle
    def argv(self, version: tuple[int, ...] | None) -> list[str]:
        return serve_argv(self.model, self.port, self.device, version, self.python)

    def start(self, timeout: float = 240.0, wait: bool = True) -> float:
        if self.log_path.exists():
            self.log_path.unlink()
        version = self.version if self.version is not None else _installed_version()
        env = dict(self.env)
        if version and version < (0, 12) and self.device == "cpu":
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        self.proc = launch(self.argv(version), self.log_path, env=env)
        if wait:
            return self.wait_ready(timeout)
        return 0.0

    def wait_ready(self, timeout: float) -> float:
        assert self.proc
        t0 = self.proc.started
        last = {"line": "starting"}

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise ServerFailed(f"server exited with code {self.proc.poll()} before it was ready "
                                   f"(log: {self.log_path})")
            return self.health().status == 200

        with self.console.status("starting vLLM server…") as st:
            def tick(_el: float) -> None:
                for ln in reversed(self.proc.log_text().splitlines()[-30:]):
                    if _INTERESTING.search(ln):
                        last["line"] = ln.strip()[-90:]
                        break
                st.update(f"starting vLLM server on :{self.port} "
                          f"[{time.monotonic() - t0:4.0f}s] {last['line']}")
            ok = wait_until(ready, timeout, interval=1.0, tick=tick)
        if not ok:
            raise ServerFailed(f"server not ready after {timeout:.0f}s (log: {self.log_path})")
        self.ready_s = time.monotonic() - t0
        return self.ready_s

    def stop(self, grace: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        return self.proc.stop(grace=grace)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.kill() if exc[0] is not None else self.proc.stop(grace=20)

    # -- requests
    def health(self, timeout: float = 5.0) -> HttpResult:
        return http("GET", self.base + "/health", timeout=timeout)

    def chat(self, extra: dict | None = None, max_tokens: int = 16, timeout: float = 60.0,
             content: str = "Hello") -> HttpResult:
        body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens}
        body.update(extra or {})
        return http("POST", self.base + "/v1/chat/completions", body, timeout=timeout)

    def completion(self, extra: dict | None = None, max_tokens: int = 16, timeout: float = 60.0,
                   prompt: str = "Hello") -> HttpResult:
        body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens}
        body.update(extra or {})
        return http("POST", self.base + "/v1/completions", body, timeout=timeout)

    def alive(self) -> tuple[int | None, bool]:
        """(health status, whether a normal completion succeeds)."""
        h = self.health()
        if h.status != 200:
            return h.status, False
        c = self.completion(max_tokens=4, timeout=30)
        return h.status, c.status == 200

    # -- processes
    def worker_pids(self) -> list[int]:
        assert self.proc
        return self.proc.find("VLLM::Worker")

    def engine_pids(self) -> list[int]:
        assert self.proc
        return self.proc.find("VLLM::EngineCore")

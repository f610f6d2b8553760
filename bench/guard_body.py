"""Time and memory of the guard's inspection of large request bodies (issue 15).

    python bench/guard_body.py [MiB]          # default 100

Each body is streamed through ``StructuredOutputGuard`` in 64 KiB chunks to an app that drops
what it reads; the guard keeps 4 MiB in memory and spools the rest. Printed per shape: the
verdict, seconds, MiB/s and the Python heap's peak (tracemalloc) during the request.
"""
from __future__ import annotations

import asyncio
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vcrash.guard import StructuredOutputGuard  # noqa: E402

CHUNK = 64 * 1024
TAIL = b', "structured_outputs": {"json_object": "no"}, "guided_choice": ["a"]}'


def shapes(size: int):
    n = size // CHUNK
    yield "base64 image", b'{"messages": [{"role": "user", "content": [{"type": "image_url", ' \
        b'"image_url": {"url": "data:image/png;base64,', b"QUFB" * (CHUNK // 4), n, b'"}}]}]' + TAIL
    yield "whitespace padding", b'{"model": "m",', b" " * CHUNK, n, b'"messages": []' + TAIL
    yield "token id array", b'{"prompt": [1', b",12345" * (CHUNK // 6), n, b"]" + TAIL
    yield "escaped slashes", b'{"messages": [{"role": "user", "content": "', b"ab\\/" * (CHUNK // 4), \
        n, b'"}]' + TAIL
    yield "small objects", b'{"messages": [{"a": 1}', b', {"role": "user", "content": "hello"}' \
        * (CHUNK // 38), n, b"]" + TAIL
    yield "flat empty arrays", b'{"x": [[]', b",[]" * (CHUNK // 3), n, b"]" + TAIL


def run(head: bytes, block: bytes, n: int, tail: bytes) -> tuple[int, float, int, int]:
    served = iter([head, *([block] * n), tail])
    total = len(head) + len(block) * n + len(tail)

    async def receive():
        body = next(served, None)
        if body is None:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": bytes(bytearray(body)), "more_body": body is not tail}

    sent = []

    async def send(m):
        sent.append(m)

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    guard = StructuredOutputGuard(app, memory_bytes=4 * 1024 * 1024)
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    tracemalloc.start()
    t0 = time.perf_counter()
    asyncio.run(guard(scope, receive, send))
    took = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return sent[0]["status"], took, peak, total


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print(f"{'shape':20s} {'status':>6s} {'MiB':>6s} {'s':>6s} {'MiB/s':>7s} {'peak MiB':>9s}")
    for name, head, block, n, tail in shapes(mib * 1024 * 1024):
        status, took, peak, total = run(head, block, n, tail)
        print(f"{name:20s} {status:6d} {total / 2**20:6.0f} {took:6.2f} {total / 2**20 / took:7.0f} "
              f"{peak / 2**20:9.1f}")


if __name__ == "__main__":
    main()

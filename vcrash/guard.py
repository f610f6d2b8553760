"""A request guard for vLLM servers that cannot be upgraded yet.

``StructuredOutputGuard`` is a pure ASGI middleware (it imports nothing from vLLM,
starlette or fastapi) that vLLM's OpenAI-compatible server loads with::

    vllm serve MODEL --middleware vcrash.guard.StructuredOutputGuard

vLLM imports the dotted path and, because it is a class, calls
``app.add_middleware(StructuredOutputGuard)``; starlette then builds it as
``StructuredOutputGuard(app)``.

It stops the request shapes that make an affected engine die with
``ValueError: No valid structured output parameter found`` (vLLM 0.11.0 for the
server; ``json_object`` false up to 0.24.x) or with a fatal grammar-compile error
(empty json/grammar/regex/structural_tag strings, up to 0.25.x), on every route whose
body reaches the structured-output path (``ROUTES``; see docs/guard.md for the
versions): chat and text completions, Responses, SageMaker's ``/invocations``, the
chat batch route and the tokens-in ``/inference/v1/generate``.

* **rejected** with HTTP 400 and an OpenAI-style body
  ``{"error": {"message": ..., "type": "BadRequestError", "param": ..., "code": 400}}``:
  structured-output params that would reach the engine with no usable constraint
  (computed as vLLM 0.11.0 does: ``structured_outputs`` given means the legacy
  ``guided_*`` fields are ignored, and only some ``response_format`` types fill in a
  constraint on each route), ``json_object`` false after pydantic's coercion (``0``,
  ``"false"``, ``"no"``, ``"off"``, ...), empty ``json``/``regex``/``grammar``/
  ``structural_tag`` strings, an empty ``choice`` list, and, on chat, a ``json_schema``
  response format without ``json_schema.schema``;
* **rewritten**: ``response_format: {"type": "text"}`` is cut out of the body (it means
  "plain text", the default, while 0.11.0 turns it into an empty constraint); the rest of
  the body is kept byte for byte and ``Content-Length`` is adjusted.

Bodies of any size are inspected: ``guard_scan.BodyScanner`` reads them in one streaming
pass that keeps only the keys above, and the body itself is held in memory up to
``memory_bytes`` (default 8 MiB, env ``VCRASH_GUARD_MEMORY_BYTES``) and in an anonymous
temporary file beyond that, then replayed. Everything else passes untouched: other
methods and paths, bodies that are not a JSON object or not valid JSON (vLLM answers
those itself), and every response, including streaming (SSE) ones - the guard only
wraps ``receive``, never ``send``, unless it answers a 400 itself.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import deque
from typing import Any, Awaitable, Callable, MutableMapping

from vcrash.guard_scan import BodyScanner, Opaque

__all__ = ["StructuredOutputGuard", "inspect_request", "Verdict", "GUARDED_PATHS", "ROUTES"]

logger = logging.getLogger("vcrash.guard")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Path suffix -> the request model its body is validated as (docs/guard.md lists the
# vLLM versions that serve each route).
ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/chat/completions/batch": "chat",        # the chat fields, several conversations
    "/v1/completions": "completions",
    "/v1/responses": "responses",
    "/invocations": "invocations",                # SageMaker: chat or completion bodies
    "/inference/v1/generate": "generate",         # tokens in: sampling_params.structured_outputs
}
GUARDED_PATHS = tuple(ROUTES)
DEFAULT_MEMORY_BYTES = 8 * 1024 * 1024
REPLAY_CHUNK = 64 * 1024

# StructuredOutputsParams (0.11+) fields that make a constraint.
_CONSTRAINT_KEYS = ("json", "json_object", "regex", "choice", "grammar", "structural_tag")
# Legacy request fields and the constraint each one maps to.
_GUIDED_KEYS = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
    "structural_tag": "structural_tag",   # chat's deprecated top-level field (0.11.0)
}
_GUIDED_OPTION_KEYS = ("guided_whitespace_pattern",)

_SO_INTEREST = dict.fromkeys(_CONSTRAINT_KEYS)
# What the streaming scan keeps of a body: only what the rules below read.
INTEREST: dict = {
    "structured_outputs": _SO_INTEREST,
    "response_format": {"type": None, "json_schema": {"schema": None, "json_schema": None}},
    "messages": None,
    "sampling_params": {"structured_outputs": _SO_INTEREST},
    **dict.fromkeys(_GUIDED_KEYS),
    **dict.fromkeys(_GUIDED_OPTION_KEYS),
}

# pydantic's lax bool: what vLLM's request model turns into False / True
_FALSE_WORDS = frozenset({"0", "f", "false", "n", "no", "off"})
_TRUE_WORDS = frozenset({"1", "t", "true", "y", "yes", "on"})


class Verdict:
    """Outcome of inspecting one request body."""

    __slots__ = ("action", "message", "param", "drop")

    def __init__(self, action: str, message: str = "", param: str | None = None,
                 drop: str | None = None):
        self.action = action          # "pass" | "reject" | "rewrite"
        self.message = message
        self.param = param
        self.drop = drop              # the top-level key a "rewrite" cuts out

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Verdict({self.action!r}, {self.message!r}, param={self.param!r})"


_PASS = Verdict("pass")


def route_of(path: str, paths: tuple[str, ...] = GUARDED_PATHS) -> str | None:
    path = path.rstrip("/")
    for suffix in paths:
        if path.endswith(suffix.rstrip("/")):
            return ROUTES.get(suffix.rstrip("/"), "chat")
    return None


def as_bool(value: Any) -> bool | None:
    """The bool pydantic (lax mode) makes of a JSON value, or None when it refuses it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return False if value == 0 else True if value == 1 else None
    if isinstance(value, str):
        low = value.lower()
        return False if low in _FALSE_WORDS else True if low in _TRUE_WORDS else None
    return None


def _blank(value: Any) -> bool:
    if isinstance(value, Opaque):
        return value.kind == "string" and value.empty
    return isinstance(value, str) and value.strip() == ""


def _empty_list(value: Any) -> bool:
    if isinstance(value, Opaque):
        return value.kind == "array" and value.empty
    return isinstance(value, (list, tuple)) and len(value) == 0


def _degenerate(name: str, value: Any) -> str | None:
    """Why a constraint value cannot be used, or None when it is usable or unset."""
    if value is None:
        return None
    if name == "json_object":
        if as_bool(value) is False:
            return ("json_object must be true if set; omit it (and structured_outputs) "
                    "to disable structured outputs")
        return None
    if name == "choice":
        return "choice cannot be an empty list" if _empty_list(value) else None
    if _blank(value):
        return f"{name} cannot be an empty string"
    return None


def _usable(name: str, value: Any) -> bool:
    if value is None or _degenerate(name, value) is not None:
        return False
    if name == "json_object":
        return as_bool(value) is True
    return True


def _reject(message: str, param: str | None) -> Verdict:
    return Verdict("reject", message, param)


def _show(value: Any) -> str:
    """A short rendering of a (possibly scanned) value for an error message."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Opaque):
        return f"<{'empty ' if value.empty else ''}{value.kind}>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_structured_outputs(so: dict, name: str, filled_in: bool) -> Verdict | None:
    """A rejection for one structured_outputs object, or None. ``filled_in``: the route's
    response_format supplies a constraint after the request model is built."""
    usable = filled_in
    for key in _CONSTRAINT_KEYS:
        why = _degenerate(key, so.get(key))
        if why is not None:
            return _reject(f"{name}.{why}", f"{name}.{key}")
        usable = usable or _usable(key, so.get(key))
    if usable:
        return None
    return _reject(
        f"{name} must set one usable constraint (json, json_object: true, regex, choice, "
        f"grammar or structural_tag) but none is specified: {_show(so)[:200]}; omit {name} "
        f"to disable structured outputs", name)


def _response_format_fill(route: str, rf: Any) -> tuple[bool, Verdict | None]:
    """(does response_format supply a constraint on this route, rejection or None).

    0.11.0: chat fills json_object, json (from json_schema.schema) and structural_tag;
    completions fill json_object only and ignore the other types.
    """
    if not isinstance(rf, dict):
        return False, None
    kind = rf.get("type")
    if kind == "json_object":
        return True, None
    if route != "chat":
        return False, None
    if kind == "json_schema":
        js = rf.get("json_schema")
        if isinstance(js, dict) and js.get("schema") is not None:
            return True, None
        hint = ""
        if isinstance(js, dict) and js.get("json_schema") is not None:
            # the pydantic field is named json_schema but only its alias "schema" is read
            hint = " (json_schema.json_schema is not read: the key is \"schema\")"
        return False, _reject(
            "response_format of type json_schema needs json_schema.schema "
            f"(a JSON schema object); none was given{hint}",
            "response_format.json_schema.schema")
    if kind == "structural_tag":
        return True, None
    return False, None


def inspect_request(path: str, body: Any) -> Verdict:
    """Decide what to do with one request body (parsed, or a ``BodyScanner`` skeleton)."""
    route = route_of(path)
    if route is None or not isinstance(body, dict):
        return _PASS
    if route == "invocations":
        # vLLM tries the chat model first; only a body with messages validates as chat
        route = "chat" if body.get("messages") is not None else "completions"
    if route == "generate":
        sp = body.get("sampling_params")
        so = sp.get("structured_outputs") if isinstance(sp, dict) else None
        if isinstance(so, dict):
            return _check_structured_outputs(so, "sampling_params.structured_outputs",
                                             False) or _PASS
        return _PASS

    rewrite = False
    rf = body.get("response_format")
    if route in ("chat", "completions") and isinstance(rf, dict) and rf.get("type") == "text":
        # the default ("plain text"); 0.11.0 turns it into empty params: drop it
        rewrite, rf = True, None
    filled_in, rejection = _response_format_fill(route, rf)
    if rejection is not None:
        return rejection

    # Degenerate legacy values are refused wherever they appear.
    guided_present = False
    guided_usable = False
    for field, name in _GUIDED_KEYS.items():
        value = body.get(field)
        if value is None:
            continue
        guided_present = True
        why = _degenerate(name, value)
        if why is not None:
            return _reject(f"{field}: {why.replace(name + ' ', '', 1)}", field)
        guided_usable = guided_usable or _usable(name, value)
    guided_present = guided_present or any(body.get(f) is not None for f in _GUIDED_OPTION_KEYS)

    so = body.get("structured_outputs")
    if isinstance(so, dict):
        # 0.11.0 reads the guided_* fields only when structured_outputs is absent
        rejection = _check_structured_outputs(so, "structured_outputs", filled_in)
        if rejection is not None:
            return rejection
    elif so is None and guided_present and not (guided_usable or filled_in):
        return _reject(
            "guided_whitespace_pattern was given without a guided_json, guided_regex, "
            "guided_choice or guided_grammar constraint",
            "guided_whitespace_pattern")
    return Verdict("rewrite", drop="response_format") if rewrite else _PASS


def _error_body(message: str, param: str | None) -> bytes:
    import json

    return json.dumps({"error": {"message": message, "type": "BadRequestError",
                                 "param": param, "code": 400}}).encode()


class _Spool:
    """The request body as received: its messages in memory up to a limit, then a file."""

    def __init__(self, memory_bytes: int):
        self.memory_bytes = memory_bytes
        self.messages: list[Message] = []
        self.file = None
        self.size = 0

    def add(self, message: Message) -> None:
        chunk = message.get("body", b"") or b""
        self.size += len(chunk)
        if self.file is None and self.size > self.memory_bytes:
            try:
                self.file = tempfile.TemporaryFile(prefix="vcrash-guard-")
                for m in self.messages:
                    self.file.write(m.get("body", b"") or b"")
                self.messages = []
            except OSError as e:  # no disk: keep it in memory rather than fail the request
                logger.warning("vcrash guard: cannot spool a large body to disk (%s)", e)
                self.file, self.memory_bytes = None, float("inf")
        if self.file is not None:
            self.file.write(chunk)
        else:
            self.messages.append(message)

    def replay(self, receive: Receive, cut: list[list[int]] | None = None,
               tail: Message | None = None) -> Receive:
        """A receive that serves the body again (less the byte spans in cut: then as one
        chunk from memory, or file-sized chunks), then tail, then the server's own receive."""
        queue = deque(self.messages) if self.file is None and not cut else None
        chunks = None if queue is not None else self._chunks(cut or [])
        ahead = [next(chunks, None)] if chunks is not None else [None]
        if tail is not None:
            (queue if queue is not None else deque()).append(tail)
        pending_tail = [tail] if queue is None and tail is not None else []

        async def wrapped() -> Message:
            if queue:
                return queue.popleft()
            if ahead[0] is not None:
                body, ahead[0] = ahead[0], next(chunks, None)
                more = ahead[0] is not None or tail is not None
                return {"type": "http.request", "body": body, "more_body": more}
            if pending_tail:
                return pending_tail.pop()
            return await receive()

        return wrapped

    def _chunks(self, cut: list[list[int]]):
        pos = 0
        for data in self._raw():
            start, end = pos, pos + len(data)
            pos = end
            if cut:
                kept, at = [], start
                for a, b in cut:
                    if b <= at or a >= end:
                        continue
                    if a > at:
                        kept.append(data[at - start:a - start])
                    at = max(at, b)
                if at < end:
                    kept.append(data[at - start:])
                data = b"".join(kept)
            if data:
                yield data

    def _raw(self):
        if self.file is None:
            yield b"".join(m.get("body", b"") or b"" for m in self.messages)
            return
        self.file.seek(0)
        while True:
            data = self.file.read(REPLAY_CHUNK)
            if not data:
                return
            yield data

    def length_without(self, cut: list[list[int]]) -> int:
        return self.size - sum(b - a for a, b in cut)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class StructuredOutputGuard:
    """Pure ASGI middleware; see the module docstring.

    ``memory_bytes`` (or env ``VCRASH_GUARD_MEMORY_BYTES``) caps how much of one request
    body is held in memory; the rest of a larger body goes to a temporary file. Every body
    is inspected whatever its size.
    """

    def __init__(self, app: ASGIApp, memory_bytes: int | None = None,
                 paths: tuple[str, ...] = GUARDED_PATHS) -> None:
        self.app = app
        if memory_bytes is None:
            try:
                memory_bytes = int(os.environ.get("VCRASH_GUARD_MEMORY_BYTES",
                                                  DEFAULT_MEMORY_BYTES))
            except ValueError:
                memory_bytes = DEFAULT_MEMORY_BYTES
        self.memory_bytes = memory_bytes
        self.paths = tuple(p.rstrip("/") for p in paths)

    def _guarded(self, scope: Scope) -> bool:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            return False
        return route_of(str(scope.get("path") or ""), self.paths) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._guarded(scope):
            await self.app(scope, receive, send)
            return

        spool = _Spool(self.memory_bytes)
        scanner = BodyScanner(INTEREST, span_key="response_format")
        tail: Message | None = None
        complete = False
        try:
            while True:
                message = await receive()
                if message.get("type") != "http.request":
                    tail = message  # http.disconnect or something unexpected: replay as is
                    break
                spool.add(message)
                scanner.feed(message.get("body", b"") or b"")
                if not message.get("more_body", False):
                    complete = True
                    break

            verdict = _PASS
            if complete:
                try:
                    verdict = inspect_request(str(scope.get("path") or ""), scanner.finish())
                except Exception:  # never let the guard itself break a request
                    logger.exception("vcrash guard: inspection failed; passing the request on")
                    verdict = _PASS
                if verdict.action == "rewrite" and (scanner.encoding not in ("utf-8", "utf-8-sig")
                                                    or scanner.spans_overflow):
                    verdict = _reject("response_format {\"type\": \"text\"} must be dropped from "
                                      "this request, which only a UTF-8 body with few "
                                      "response_format keys allows; send it without it",
                                      "response_format")

            if verdict.action == "reject":
                logger.warning("vcrash guard: rejected POST %s with 400: %s",
                               scope.get("path"), verdict.message)
                payload = _error_body(verdict.message, verdict.param)
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(payload)).encode())]})
                await send({"type": "http.response.body", "body": payload, "more_body": False})
                return

            if verdict.action == "rewrite":
                cut = [list(s) for s in scanner.spans]
                logger.warning("vcrash guard: removed response_format {\"type\": \"text\"} "
                               "from POST %s", scope.get("path"))
                scope = dict(scope)
                scope["headers"] = _with_content_length(scope.get("headers") or [],
                                                        spool.length_without(cut))
                await self.app(scope, spool.replay(receive, cut, tail), send)
                return
            await self.app(scope, spool.replay(receive, None, tail), send)
        finally:
            spool.close()


def _with_content_length(headers: Any, length: int) -> list[tuple[bytes, bytes]]:
    out = [(n, v) for n, v in headers
           if n.lower() not in (b"content-length", b"transfer-encoding")]
    out.append((b"content-length", str(length).encode()))
    return out

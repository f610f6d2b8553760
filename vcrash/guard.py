"""A request guard for vLLM servers that cannot be upgraded yet.

``StructuredOutputGuard`` is a pure ASGI middleware (it imports nothing from vLLM,
starlette or fastapi) that vLLM's OpenAI-compatible server loads with::

    vllm serve MODEL --middleware vcrash.guard.StructuredOutputGuard

vLLM imports the dotted path and, because it is a class, calls
``app.add_middleware(StructuredOutputGuard)``; starlette then builds it as
``StructuredOutputGuard(app)``.

It stops the request shapes that make an affected engine die with
``ValueError: No valid structured output parameter found`` (vLLM 0.11.0 for the
server; ``json_object: false`` up to 0.24.x) or with a fatal grammar-compile error
(empty json/grammar/regex/structural_tag strings, up to 0.25.x), on
``POST .../v1/chat/completions``, ``.../v1/completions`` and ``.../v1/responses``:

* **rejected** with HTTP 400 and an OpenAI-style body
  ``{"error": {"message": ..., "type": "BadRequestError", "param": ..., "code": 400}}``:
  a ``structured_outputs`` object with no usable constraint (``{}``, or option keys
  only), ``json_object: false``, empty ``json``/``regex``/``grammar``/
  ``structural_tag`` strings, an empty ``choice`` list, the same degenerate
  values in the legacy ``guided_*`` fields (and ``guided_whitespace_pattern``
  alone, an empty top-level ``structural_tag``), and, on chat completions,
  ``response_format: {"type": "json_schema"}`` without a schema;
* **rewritten**: ``response_format: {"type": "text"}`` is removed from the body
  (it means "plain text", the default, so dropping it changes nothing for the
  client, while 0.11.0 turns it into an empty constraint). ``Content-Length`` is
  adjusted.

Everything else passes through untouched, byte for byte: other methods and
paths, bodies that are not a JSON object, malformed JSON, bodies larger than
``max_body_bytes`` (default 32 MiB; those are streamed on without inspection),
and every response, including streaming (SSE) ones - the guard only wraps
``receive``, never ``send``, unless it answers a 400 itself.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Awaitable, Callable, MutableMapping

__all__ = ["StructuredOutputGuard", "inspect_request", "Verdict", "GUARDED_PATHS"]

logger = logging.getLogger("vcrash.guard")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GUARDED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
DEFAULT_MAX_BODY = 32 * 1024 * 1024

# StructuredOutputsParams (0.11+) / GuidedDecodingParams (<0.11) fields.
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


class Verdict:
    """Outcome of inspecting one request body."""

    __slots__ = ("action", "message", "param", "body")

    def __init__(self, action: str, message: str = "", param: str | None = None,
                 body: dict | None = None):
        self.action = action          # "pass" | "reject" | "rewrite"
        self.message = message
        self.param = param
        self.body = body              # the rewritten request for "rewrite"

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Verdict({self.action!r}, {self.message!r}, param={self.param!r})"


_PASS = Verdict("pass")


def _degenerate(name: str, value: Any) -> str | None:
    """Why a constraint value cannot be used, or None when it is usable or unset."""
    if value is None:
        return None
    if name == "json_object":
        if value is False:
            return ("json_object must be true if set; omit it (and structured_outputs) "
                    "to disable structured outputs")
        return None
    if name == "choice":
        if isinstance(value, (list, tuple)) and len(value) == 0:
            return "choice cannot be an empty list"
        return None
    if isinstance(value, str) and value.strip() == "":
        return f"{name} cannot be an empty string"
    return None


def _usable(name: str, value: Any) -> bool:
    if value is None or _degenerate(name, value) is not None:
        return False
    if name == "json_object":
        return value is True
    return True


def _reject(message: str, param: str | None) -> Verdict:
    return Verdict("reject", message, param)


def _response_format_constraint(rf: Any) -> tuple[bool, Verdict | None]:
    """(adds a usable constraint, rejection or None) for a response_format object."""
    if not isinstance(rf, dict):
        return False, None
    kind = rf.get("type")
    if kind == "json_object":
        return True, None
    if kind == "json_schema":
        js = rf.get("json_schema")
        schema = None
        if isinstance(js, dict):
            schema = js.get("schema", js.get("json_schema"))
        if schema is None:
            return False, _reject(
                "response_format of type json_schema needs json_schema.schema "
                "(a JSON schema object); none was given",
                "response_format.json_schema.schema")
        return True, None
    if kind == "structural_tag":
        return True, None
    return False, None


def inspect_request(path: str, body: Any) -> Verdict:
    """Decide what to do with one parsed request body (pure function, no I/O)."""
    if not isinstance(body, dict):
        return _PASS
    rewritten: dict | None = None
    usable = False
    so_present = False

    # response_format: {"type": "text"} -> drop it (the default; 0.11.0 turns it
    # into an empty StructuredOutputsParams that kills the engine core).
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "text":
        rewritten = dict(body)
        del rewritten["response_format"]
        rf = None
    elif rf is not None:
        adds, rejection = _response_format_constraint(rf)
        # Only chat turns a schema-less json_schema format into empty params (0.11.0
        # ChatCompletionRequest.to_sampling_params); completions ignore it there.
        if rejection is not None and path.rstrip("/").endswith("/chat/completions"):
            return rejection
        usable = usable or adds

    so = body.get("structured_outputs")
    so_key = "structured_outputs"
    if so is not None:
        if not isinstance(so, dict):
            return _PASS if rewritten is None else Verdict("rewrite", body=rewritten)
        so_present = True
        for name in _CONSTRAINT_KEYS:
            why = _degenerate(name, so.get(name))
            if why is not None:
                return _reject(f"{so_key}.{why}", f"{so_key}.{name}")
            usable = usable or _usable(name, so.get(name))

    guided_present = False
    for field, name in _GUIDED_KEYS.items():
        value = body.get(field)
        if value is None:
            continue
        guided_present = True
        why = _degenerate(name, value)
        if why is not None:
            return _reject(f"{field}: {why.replace(name + ' ', '', 1)}"
                           if field != name else why, field)
        usable = usable or _usable(name, value)
    for field in _GUIDED_OPTION_KEYS:
        if body.get(field) is not None:
            guided_present = True

    if so_present and not usable:
        shown = json.dumps(so, sort_keys=True)[:200]
        return _reject(
            f"{so_key} must set one usable constraint (json, json_object: true, regex, "
            f"choice, grammar or structural_tag) but none is specified: {shown}; omit "
            f"{so_key} to disable structured outputs",
            so_key)
    if guided_present and not usable:
        return _reject(
            "guided_whitespace_pattern was given without a guided_json, guided_regex, "
            "guided_choice or guided_grammar constraint",
            "guided_whitespace_pattern")
    if rewritten is not None:
        return Verdict("rewrite", body=rewritten)
    return _PASS


def _error_body(message: str, param: str | None) -> bytes:
    return json.dumps({"error": {"message": message, "type": "BadRequestError",
                                 "param": param, "code": 400}}).encode()


class StructuredOutputGuard:
    """Pure ASGI middleware; see the module docstring.

    ``max_body_bytes`` (or env ``VCRASH_GUARD_MAX_BODY``) caps how much of a
    request body is buffered for inspection; larger bodies pass through unread.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int | None = None,
                 paths: tuple[str, ...] = GUARDED_PATHS) -> None:
        self.app = app
        if max_body_bytes is None:
            try:
                max_body_bytes = int(os.environ.get("VCRASH_GUARD_MAX_BODY", DEFAULT_MAX_BODY))
            except ValueError:
                max_body_bytes = DEFAULT_MAX_BODY
        self.max_body_bytes = max_body_bytes
        self.paths = tuple(p.rstrip("/") for p in paths)

    def _guarded(self, scope: Scope) -> bool:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            return False
        path = str(scope.get("path") or "").rstrip("/")
        return any(path.endswith(p) for p in self.paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._guarded(scope):
            await self.app(scope, receive, send)
            return

        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self.app(scope, receive, send)
            return

        # Buffer the request body (only the body; responses are never touched).
        messages: list[Message] = []
        size = 0
        complete = False
        while True:
            message = await receive()
            messages.append(message)
            if message.get("type") != "http.request":
                break  # http.disconnect or something unexpected: replay as is
            size += len(message.get("body", b"") or b"")
            if not message.get("more_body", False):
                complete = True
                break
            if size > self.max_body_bytes:
                break

        verdict = _PASS
        if complete:
            raw = b"".join(m.get("body", b"") or b"" for m in messages)
            try:
                parsed = json.loads(raw)
            except (ValueError, UnicodeDecodeError, RecursionError):
                parsed = None
            try:
                verdict = inspect_request(str(scope.get("path") or ""), parsed)
            except Exception:  # never let the guard itself break a request
                logger.exception("vcrash guard: inspection failed; passing the request on")
                verdict = _PASS

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
            new_body = json.dumps(verdict.body, ensure_ascii=False).encode("utf-8")
            logger.warning("vcrash guard: removed response_format {\"type\": \"text\"} "
                           "from POST %s", scope.get("path"))
            scope = dict(scope)
            scope["headers"] = _with_content_length(scope.get("headers") or [], len(new_body))
            messages = [{"type": "http.request", "body": new_body, "more_body": False}]

        await self.app(scope, _replay(messages, receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or []:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _with_content_length(headers: Any, length: int) -> list[tuple[bytes, bytes]]:
    out = [(n, v) for n, v in headers
           if n.lower() not in (b"content-length", b"transfer-encoding")]
    out.append((b"content-length", str(length).encode()))
    return out


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def wrapped() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return wrapped

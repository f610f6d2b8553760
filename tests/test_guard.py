"""Unit tests for vcrash.guard.StructuredOutputGuard, with a fake ASGI app (no vLLM)."""
from __future__ import annotations

import asyncio
import json

import pytest

from vcrash.guard import DEFAULT_MEMORY_BYTES, StructuredOutputGuard, inspect_request

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
RESP = "/v1/responses"
MSGS = [{"role": "user", "content": "Hello"}]


class FakeApp:
    """Records what it received; answers 200 with a (optionally streamed) echo."""

    def __init__(self, stream_chunks: list[bytes] | None = None, read_after: bool = False):
        self.calls = 0
        self.scope = None
        self.body = b""
        self.messages: list[dict] = []
        self.stream_chunks = stream_chunks
        self.read_after = read_after
        self.after: dict | None = None

    async def __call__(self, scope, receive, send):
        self.calls += 1
        self.scope = scope
        if scope["type"] == "http":
            while True:
                m = await receive()
                self.messages.append(m)
                if m["type"] != "http.request":
                    break
                self.body += m.get("body", b"")
                if not m.get("more_body", False):
                    break
            if self.stream_chunks is not None:
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"text/event-stream")]})
                for c in self.stream_chunks:
                    await send({"type": "http.response.body", "body": c, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"ok": true}'})
            if self.read_after:
                self.after = await receive()


def run(app, body: bytes | list[bytes] = b"", path: str = CHAT, method: str = "POST",
        headers: list | None = None, scope_type: str = "http", extra_messages=(), **kw):
    chunks = body if isinstance(body, list) else [body]
    if headers is None:
        total = sum(len(c) for c in chunks)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(total).encode())]
    scope = {"type": scope_type, "method": method, "path": path, "headers": headers,
             "query_string": b"", "root_path": ""}
    queue = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
             for i, c in enumerate(chunks)]
    queue += list(extra_messages) + [{"type": "http.disconnect"}]
    sent: list[dict] = []

    async def receive():
        return queue.pop(0)

    async def send(m):
        sent.append(m)

    guard = StructuredOutputGuard(app, **kw)
    asyncio.run(guard(scope, receive, send))
    return sent


def status_of(sent):
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def body_of(sent) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def req(**extra) -> bytes:
    return json.dumps({"model": "tiny", "messages": MSGS, "max_tokens": 16, **extra}).encode()


def creq(**extra) -> bytes:
    return json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 16, **extra}).encode()


def assert_rejected(sent, app, param_prefix: str | None = None, contains: str | None = None):
    assert app.calls == 0, "the app must not see a rejected request"
    assert status_of(sent) == 400
    start = next(m for m in sent if m["type"] == "http.response.start")
    hdrs = dict(start["headers"])
    assert hdrs[b"content-type"] == b"application/json"
    payload = body_of(sent)
    assert int(hdrs[b"content-length"]) == len(payload)
    err = json.loads(payload)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert isinstance(err["message"], str) and err["message"]
    if param_prefix is not None:
        assert err["param"] and err["param"].startswith(param_prefix)
    if contains is not None:
        assert contains in err["message"]
    return err


# ------------------------------------------------------------------ rejections

@pytest.mark.parametrize("body,param", [
    (req(structured_outputs={}), "structured_outputs"),
    (req(structured_outputs={"disable_any_whitespace": True}), "structured_outputs"),
    (req(structured_outputs={"backend": "xgrammar"}), "structured_outputs"),
    (req(structured_outputs={"whitespace_pattern": r"\s*"}), "structured_outputs"),
    (req(structured_outputs={"json": None, "regex": None}), "structured_outputs"),
    (req(structured_outputs={"json_object": False}), "structured_outputs.json_object"),
    (req(structured_outputs={"json": ""}), "structured_outputs.json"),
    (req(structured_outputs={"json": "   "}), "structured_outputs.json"),
    (req(structured_outputs={"regex": ""}), "structured_outputs.regex"),
    (req(structured_outputs={"grammar": ""}), "structured_outputs.grammar"),
    (req(structured_outputs={"structural_tag": ""}), "structured_outputs.structural_tag"),
    (req(structured_outputs={"choice": []}), "structured_outputs.choice"),
    (req(structured_outputs={"json": {"type": "object"}, "json_object": False}),
     "structured_outputs.json_object"),
    (req(guided_json=""), "guided_json"),
    (req(guided_regex=""), "guided_regex"),
    (req(guided_grammar=""), "guided_grammar"),
    (req(guided_choice=[]), "guided_choice"),
    (req(guided_whitespace_pattern=r"\s*"), "guided_whitespace_pattern"),
    (req(structural_tag=""), "structural_tag"),
    (req(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
     "response_format"),
    (req(response_format={"type": "json_schema"}), "response_format"),
    (req(response_format={"type": "text"}, structured_outputs={}), "structured_outputs"),
])
def test_chat_degenerate_shapes_are_rejected(body, param):
    app = FakeApp()
    assert_rejected(run(app, body), app, param_prefix=param)


@pytest.mark.parametrize("body", [
    creq(structured_outputs={}),
    creq(structured_outputs={"json_object": False}),
    creq(guided_json=""),
    creq(guided_choice=[]),
])
def test_completions_degenerate_shapes_are_rejected(body):
    app = FakeApp()
    assert_rejected(run(app, body, path=COMP), app)


def test_responses_structured_outputs_empty_is_rejected():
    app = FakeApp()
    body = json.dumps({"model": "tiny", "input": "Hi", "structured_outputs": {}}).encode()
    assert_rejected(run(app, body, path=RESP), app, param_prefix="structured_outputs")


@pytest.mark.parametrize("path,body", [
    # 0.11.0 builds no params for these, so they cannot crash it: left to vLLM
    (RESP, json.dumps({"model": "tiny", "input": "Hi",
                       "text": {"format": {"type": "json_schema", "name": "x"}}}).encode()),
    (COMP, creq(response_format={"type": "json_schema", "json_schema": {"name": "x"}})),
])
def test_shapes_harmless_on_that_endpoint_pass(path, body):
    app = FakeApp()
    sent = run(app, body, path=path)
    assert app.calls == 1 and app.body == body and status_of(sent) == 200


def test_reject_message_names_the_problem():
    app = FakeApp()
    err = assert_rejected(run(app, req(structured_outputs={})), app)
    assert "none is specified" in err["message"]
    app = FakeApp()
    err = assert_rejected(run(app, req(structured_outputs={"json_object": False})), app)
    assert "json_object must be true" in err["message"]


def test_rejected_request_body_is_fully_consumed_but_app_not_called():
    app = FakeApp()
    body = req(structured_outputs={})
    sent = run(app, [body[:10], body[10:30], body[30:]])
    assert_rejected(sent, app)


# ------------------------------------------------------------------ passthrough

@pytest.mark.parametrize("body", [
    req(),
    req(structured_outputs={"choice": ["a", "b"]}),
    req(structured_outputs={"json": {"type": "object"}}),
    req(structured_outputs={"json": {}}),
    req(structured_outputs={"json_object": True}),
    req(structured_outputs={"regex": "[ab]+"}),
    req(structured_outputs={"grammar": "root ::= \"a\""}),
    req(structured_outputs={"choice": ["a"], "disable_any_whitespace": True}),
    req(structured_outputs=None),
    req(response_format={"type": "json_object"}),
    req(response_format={"type": "json_schema",
                         "json_schema": {"name": "x", "schema": {"type": "object"}}}),
    req(guided_json={"type": "object"}),
    req(guided_choice=["yes", "no"]),
    req(guided_regex="[0-9]+"),
    req(guided_json={"type": "object"}, guided_whitespace_pattern=r"\s*"),
    req(guided_decoding_backend="xgrammar"),
    req(response_format="text"),              # malformed: vLLM's validation answers it
    req(structured_outputs="oops"),           # malformed: likewise
    b"[1, 2, 3]",
    b"",
    b"{not json",
    b"\xff\xfe\x00garbage",
    b'{"a": ' * 5000 + b"1" + b"}" * 5000,    # deep nesting: RecursionError, passed on
    b"null",
])
def test_everything_else_passes_byte_for_byte(body):
    app = FakeApp()
    sent = run(app, body)
    assert app.calls == 1
    assert app.body == body
    assert status_of(sent) == 200 and body_of(sent) == b'{"ok": true}'
    assert dict(app.scope["headers"])[b"content-length"] == str(len(body)).encode()


def test_chunked_body_is_replayed_in_the_same_chunks():
    app = FakeApp()
    body = req(structured_outputs={"choice": ["a", "b"]})
    chunks = [body[:7], body[7:40], body[40:]]
    run(app, chunks)
    assert app.body == body
    assert [m["body"] for m in app.messages[:3]] == chunks
    assert [m["more_body"] for m in app.messages[:3]] == [True, True, False]


def test_receive_after_replay_reaches_the_server_disconnect():
    app = FakeApp(read_after=True)
    run(app, req())
    assert app.after == {"type": "http.disconnect"}


@pytest.mark.parametrize("method,path", [
    ("GET", CHAT), ("GET", "/health"), ("POST", "/v1/embeddings"), ("POST", "/tokenize"),
    ("PUT", CHAT),
])
def test_other_methods_and_paths_are_not_inspected(method, path):
    app = FakeApp()
    body = req(structured_outputs={})          # would be rejected on a guarded path
    sent = run(app, body, path=path, method=method)
    assert app.calls == 1 and app.body == body and status_of(sent) == 200


def test_non_http_scopes_pass():
    calls = []

    async def app(scope, receive, send):
        calls.append(scope["type"])

    guard = StructuredOutputGuard(app)

    async def noop(*a):
        return {"type": "lifespan.startup"}

    asyncio.run(guard({"type": "lifespan"}, noop, noop))
    asyncio.run(guard({"type": "websocket", "path": CHAT}, noop, noop))
    assert calls == ["lifespan", "websocket"]


def test_root_path_prefix_and_trailing_slash_are_guarded():
    app = FakeApp()
    assert_rejected(run(app, req(structured_outputs={}), path="/proxy/v1/chat/completions/"), app)


def test_streaming_response_passes_untouched():
    chunks = [b'data: {"a": 1}\n\n', b'data: {"b": 2}\n\n', b"data: [DONE]\n\n"]
    app = FakeApp(stream_chunks=chunks)
    body = req(stream=True, structured_outputs={"choice": ["a", "b"]})
    sent = run(app, body)
    assert app.body == body
    assert sent[0]["status"] == 200
    assert [m["body"] for m in sent[1:-1]] == chunks
    assert all(m.get("more_body") for m in sent[1:-1]) and sent[-1]["more_body"] is False


def test_streaming_request_with_text_format_is_rewritten_and_streams():
    chunks = [b"data: x\n\n", b"data: [DONE]\n\n"]
    app = FakeApp(stream_chunks=chunks)
    sent = run(app, req(stream=True, response_format={"type": "text"}))
    assert json.loads(app.body)["stream"] is True
    assert "response_format" not in json.loads(app.body)
    assert [m["body"] for m in sent[1:-1]] == chunks


# ------------------------------------------------------------------ rewrite

def test_text_response_format_is_dropped_and_content_length_fixed():
    app = FakeApp()
    original = {"model": "tiny", "messages": [{"role": "user", "content": "héllo ✓"}],
                "max_tokens": 16, "response_format": {"type": "text"}, "temperature": 0.5}
    raw = json.dumps(original).encode()
    headers = [(b"host", b"x"), (b"content-type", b"application/json"),
               (b"content-length", str(len(raw)).encode()), (b"x-custom", b"1")]
    sent = run(app, raw, headers=headers)
    assert status_of(sent) == 200 and app.calls == 1
    got = json.loads(app.body)
    expected = dict(original)
    del expected["response_format"]
    assert got == expected
    hdrs = app.scope["headers"]
    cl = [v for n, v in hdrs if n == b"content-length"]
    assert cl == [str(len(app.body)).encode()]
    assert (b"x-custom", b"1") in hdrs and (b"host", b"x") in hdrs
    assert app.messages[0] == {"type": "http.request", "body": app.body, "more_body": False}


def test_text_response_format_rewrite_on_completions():
    app = FakeApp()
    run(app, creq(response_format={"type": "text"}), path=COMP)
    assert "response_format" not in json.loads(app.body)


def test_rewrite_keeps_real_constraints():
    app = FakeApp()
    run(app, req(response_format={"type": "text"}, structured_outputs={"choice": ["a", "b"]}))
    assert json.loads(app.body)["structured_outputs"] == {"choice": ["a", "b"]}


def test_rewrite_drops_transfer_encoding():
    app = FakeApp()
    raw = req(response_format={"type": "text"})
    headers = [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")]
    run(app, [raw[:20], raw[20:]], headers=headers)
    names = [n for n, _ in app.scope["headers"]]
    assert b"transfer-encoding" not in names and names.count(b"content-length") == 1


def test_disconnect_while_buffering_is_replayed():
    app = FakeApp()
    scope = {"type": "http", "method": "POST", "path": CHAT, "headers": []}
    queue = [{"type": "http.request", "body": b'{"model"', "more_body": True},
             {"type": "http.disconnect"}]

    async def receive():
        return queue.pop(0)

    sent = []

    async def send(m):
        sent.append(m)

    asyncio.run(StructuredOutputGuard(app)(scope, receive, send))
    assert app.calls == 1
    assert [m["type"] for m in app.messages] == ["http.request", "http.disconnect"]


# ------------------------------------------------------------------ misc

def test_module_imports_no_web_framework():
    import subprocess
    import sys

    code = ("import sys, vcrash.guard; "
            "bad = [m for m in ('vllm', 'starlette', 'fastapi', 'torch') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_inspect_request_is_total():
    for b in (None, 1, "x", [], {}, {"structured_outputs": []}, {"response_format": None},
              {"guided_choice": "abc"}, {"text": "x"}):
        assert inspect_request(CHAT, b).action in ("pass", "reject", "rewrite")


def test_guard_works_with_starlette_add_middleware_if_available():
    starlette = pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient  # needs httpx

    async def chat(request):
        return JSONResponse({"seen": await request.json()})

    app = Starlette(routes=[Route(CHAT, chat, methods=["POST"])])
    app.add_middleware(StructuredOutputGuard)
    client = TestClient(app)
    r = client.post(CHAT, json={"model": "t", "messages": MSGS, "structured_outputs": {}})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    r = client.post(CHAT, json={"model": "t", "messages": MSGS, "response_format": {"type": "text"}})
    assert r.status_code == 200 and "response_format" not in r.json()["seen"]
    r = client.post(CHAT, json={"model": "t", "messages": MSGS,
                                "structured_outputs": {"choice": ["a", "b"]}})
    assert r.status_code == 200 and r.json()["seen"]["structured_outputs"] == {"choice": ["a", "b"]}
    del starlette


# ------------------------------------------------------------------ every route (issue 15)

INVOCATIONS = "/invocations"
BATCH = "/v1/chat/completions/batch"
GENERATE = "/inference/v1/generate"


@pytest.mark.parametrize("path,body", [
    (INVOCATIONS, req(structured_outputs={})),                    # a chat body
    (INVOCATIONS, creq(structured_outputs={})),                   # a completion body
    (INVOCATIONS, req(structured_outputs={"json_object": "false"})),
    (INVOCATIONS, req(response_format={"type": "json_schema", "json_schema": {"name": "x"}})),
    (BATCH, json.dumps({"messages": [MSGS, MSGS], "structured_outputs": {}}).encode()),
    (GENERATE, json.dumps({"token_ids": [1, 2], "sampling_params": {
        "max_tokens": 4, "structured_outputs": {}}}).encode()),
    (GENERATE, json.dumps({"token_ids": [1, 2], "sampling_params": {
        "structured_outputs": {"json_object": "off"}}}).encode()),
    ("/sagemaker-prefix/invocations/", req(structured_outputs={})),
])
def test_every_structured_output_route_is_guarded(path, body):
    app = FakeApp()
    assert_rejected(run(app, body, path=path), app)


def test_invocations_completion_body_keeps_completion_rules():
    # a completion body ignores a schema-less json_schema format (0.11.0): not rejected
    app = FakeApp()
    body = creq(response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    sent = run(app, body, path=INVOCATIONS)
    assert app.calls == 1 and app.body == body and status_of(sent) == 200


def test_invocations_text_format_is_rewritten():
    app = FakeApp()
    run(app, req(response_format={"type": "text"}), path=INVOCATIONS)
    assert "response_format" not in json.loads(app.body) and app.calls == 1


@pytest.mark.parametrize("path,body", [
    (INVOCATIONS, req(structured_outputs={"choice": ["a", "b"]})),
    (INVOCATIONS, json.dumps({"input": ["a"], "model": "e"}).encode()),   # an embedding body
    (BATCH, json.dumps({"messages": [MSGS], "structured_outputs": {"regex": "a+"}}).encode()),
    (GENERATE, json.dumps({"token_ids": [1], "sampling_params": {"max_tokens": 4}}).encode()),
    (GENERATE, json.dumps({"token_ids": [1], "sampling_params": {
        "structured_outputs": {"choice": ["x"]}}}).encode()),
    ("/v1/messages", json.dumps({"messages": MSGS, "structured_outputs": {}}).encode()),
])
def test_valid_or_unrelated_bodies_on_the_new_routes_pass(path, body):
    app = FakeApp()
    sent = run(app, body, path=path)
    assert app.calls == 1 and app.body == body and status_of(sent) == 200


# ------------------------------------------------------------------ coerced falsy json_object

@pytest.mark.parametrize("falsy", [False, 0, 0.0, "0", "false", "False", "FALSE", "f", "no",
                                   "N", "off", "OFF"])
@pytest.mark.parametrize("beside", [
    {"guided_json": {"type": "object"}},       # 0.11.0 ignores guided_* once structured_outputs is set
    {"guided_choice": ["a", "b"]},
    {"response_format": {"type": "text"}},
    {},
])
def test_json_object_coerced_to_false_is_rejected(falsy, beside):
    app = FakeApp()
    body = req(structured_outputs={"json_object": falsy}, **beside)
    err = assert_rejected(run(app, body), app, param_prefix="structured_outputs.json_object")
    assert "json_object must be true" in err["message"]


@pytest.mark.parametrize("truthy", [True, 1, 1.0, "1", "true", "TRUE", "t", "y", "yes", "on"])
def test_json_object_coerced_to_true_passes(truthy):
    app = FakeApp()
    body = req(structured_outputs={"json_object": truthy})
    run(app, body)
    assert app.calls == 1 and app.body == body


def test_json_object_escaped_false_string_is_decoded_before_deciding():
    app = FakeApp()
    body = (b'{"model": "tiny", "messages": [], "structured\\u005foutputs": '
            b'{"json_object": "\\u0066alse"}, "guided_json": {"type": "object"}}')
    assert_rejected(run(app, body), app, param_prefix="structured_outputs.json_object")


@pytest.mark.parametrize("value,expected", [
    (0, False), (1, True), (-0.0, False), (2, None), (0.5, None), ("No", False),
    ("yes", True), (" false", None), ("", None), ("none", None), (None, None), ([], None),
])
def test_as_bool_follows_pydantic_lax_mode(value, expected):
    from vcrash.guard import as_bool

    assert as_bool(value) is expected


# ------------------------------------------------------------------ which constraint vLLM uses

@pytest.mark.parametrize("path,body", [
    # structured_outputs given: 0.11.0 never reads the guided_* fields
    (CHAT, req(structured_outputs={}, guided_json={"type": "object"})),
    (COMP, creq(structured_outputs={}, guided_regex="a+")),
    # completions fill in json_object only; a json_schema format adds nothing there
    (COMP, creq(structured_outputs={}, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})),
    (COMP, creq(guided_whitespace_pattern=" ", response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {}}})),
])
def test_constraints_vllm_would_not_use_do_not_count(path, body):
    app = FakeApp()
    assert_rejected(run(app, body, path=path), app)


@pytest.mark.parametrize("path,body", [
    (COMP, creq(structured_outputs={}, response_format={"type": "json_object"})),
    (CHAT, req(structured_outputs={}, response_format={"type": "json_object"})),
    (CHAT, req(structured_outputs={"disable_any_whitespace": True}, response_format={
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})),
    (CHAT, req(guided_whitespace_pattern=" ", response_format={"type": "json_object"})),
])
def test_constraints_that_the_response_format_fills_in_pass(path, body):
    app = FakeApp()
    run(app, body, path=path)
    assert app.calls == 1 and app.body == body


# ------------------------------------------------------------------ schema key spelling

def test_json_schema_under_the_field_name_is_not_a_schema_on_chat():
    # vLLM reads JsonSchemaResponseFormat.json_schema only by its alias "schema"
    app = FakeApp()
    body = req(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "json_schema": {"type": "object"}}})
    err = assert_rejected(run(app, body), app, param_prefix="response_format.json_schema.schema")
    assert 'the key is "schema"' in err["message"]
    app = FakeApp()
    assert_rejected(run(app, body, path=INVOCATIONS), app)


def test_json_schema_spelling_is_harmless_on_completions():
    app = FakeApp()
    body = creq(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "json_schema": {"type": "object"}}})
    run(app, body, path=COMP)
    assert app.calls == 1 and app.body == body


# ------------------------------------------------------------------ bodies of any size

def _padded(extra: dict, pad: int, where: str = "front") -> bytes:
    core = json.dumps({"model": "tiny", "messages": MSGS, **extra}).encode()
    if where == "front":
        return b" " * pad + core
    return core[:-1] + b"," + b" " * pad + b'"pad": 1}'


@pytest.mark.parametrize("where", ["front", "inside"])
def test_whitespace_padding_past_memory_is_still_inspected(where):
    app = FakeApp()
    body = _padded({"structured_outputs": {}}, 3 * 1024 * 1024, where)
    chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    assert_rejected(run(app, chunks, headers=headers, memory_bytes=256 * 1024), app)


def test_large_legitimate_body_is_spooled_and_replayed_byte_for_byte():
    app = FakeApp()
    image = "data:image/png;base64," + "iVBORw0KGgo" * 300_000         # ~3.3 MB
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": "?"}]}],
        "structured_outputs": {"choice": ["cat", "dog"]}}).encode()
    chunks = [body[i:i + 50_000] for i in range(0, len(body), 50_000)]
    sent = run(app, chunks, memory_bytes=1024 * 1024)
    assert app.calls == 1 and app.body == body and status_of(sent) == 200
    reqs = [m for m in app.messages if m["type"] == "http.request"]
    assert all(m["more_body"] for m in reqs[:-1]) and reqs[-1]["more_body"] is False
    assert max(len(m["body"]) for m in reqs) <= 64 * 1024


def test_rewrite_of_a_spooled_body_cuts_only_the_text_format():
    app = FakeApp()
    pad = "x" * 2_000_000
    body = (b'{"response_format": {"type": "text"}, "model": "tiny", "messages": '
            + json.dumps([{"role": "user", "content": pad}]).encode()
            + b', "response_format" :{ "type":"text" } , "max_tokens": 4}')
    chunks = [body[i:i + 70_000] for i in range(0, len(body), 70_000)]
    run(app, chunks, memory_bytes=500_000)
    assert app.calls == 1
    got = json.loads(app.body)
    assert got == {"model": "tiny", "messages": [{"role": "user", "content": pad}], "max_tokens": 4}
    assert dict(app.scope["headers"])[b"content-length"] == str(len(app.body)).encode()


def test_rewrite_in_memory_keeps_the_rest_byte_for_byte():
    app = FakeApp()
    body = b'{"model":"tiny",  "response_format": {"type":"text"},\n "messages": [] }'
    run(app, body)
    assert app.body == b'{"model":"tiny",\n "messages": [] }'


def test_utf16_body_is_inspected_like_json_loads_reads_it():
    app = FakeApp()
    body = json.dumps({"model": "tiny", "messages": MSGS, "structured_outputs": {}}).encode("utf-16")
    assert_rejected(run(app, body), app)
    app = FakeApp()
    ok = json.dumps({"model": "tiny", "messages": MSGS}).encode("utf-16")
    run(app, ok)
    assert app.body == ok


def test_declared_length_no_longer_skips_inspection():
    app = FakeApp()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"999999999")]
    assert_rejected(run(app, req(structured_outputs={}), headers=headers), app)


def test_default_memory_limit(monkeypatch):
    monkeypatch.delenv("VCRASH_GUARD_MEMORY_BYTES", raising=False)
    assert StructuredOutputGuard(FakeApp()).memory_bytes == DEFAULT_MEMORY_BYTES == 8 * 1024 * 1024
    monkeypatch.setenv("VCRASH_GUARD_MEMORY_BYTES", "100")
    assert StructuredOutputGuard(FakeApp()).memory_bytes == 100
    monkeypatch.setenv("VCRASH_GUARD_MEMORY_BYTES", "lots")
    assert StructuredOutputGuard(FakeApp()).memory_bytes == DEFAULT_MEMORY_BYTES


def test_a_100_mb_body_is_inspected_with_bounded_memory():
    """Streamed through the guard in 64 KiB chunks to an app that drops what it reads:
    the Python heap grows by far less than the body, whatever the verdict."""
    import time
    import tracemalloc

    head = b'{"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url", ' \
           b'"image_url": {"url": "data:image/png;base64,'
    tail = b'"}}]}], "structured_outputs": {"json_object": "no"}, "guided_choice": ["a"]}'
    block = b"QUFB" * 16384                                   # 64 KiB of base64
    n_blocks = 100 * 1024 * 1024 // len(block)
    total = len(head) + n_blocks * len(block) + len(tail)

    class Drain:
        calls = 0

        async def __call__(self, scope, receive, send):
            self.calls += 1

    served = {"i": 0}

    async def receive():
        i = served["i"]
        served["i"] += 1
        if i == 0:
            return {"type": "http.request", "body": head, "more_body": True}
        if i <= n_blocks:
            return {"type": "http.request", "body": bytes(bytearray(block)), "more_body": True}
        if i == n_blocks + 1:
            return {"type": "http.request", "body": tail, "more_body": False}
        return {"type": "http.disconnect"}

    sent = []

    async def send(m):
        sent.append(m)

    app = Drain()
    guard = StructuredOutputGuard(app, memory_bytes=4 * 1024 * 1024)
    scope = {"type": "http", "method": "POST", "path": CHAT,
             "headers": [(b"content-length", str(total).encode())]}
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        asyncio.run(guard(scope, receive, send))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.monotonic() - t0
    assert app.calls == 0 and sent[0]["status"] == 400
    assert json.loads(sent[1]["body"])["error"]["param"] == "structured_outputs.json_object"
    assert peak < 8 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB for a {total / 2**20:.0f} MiB body"
    assert took < 60

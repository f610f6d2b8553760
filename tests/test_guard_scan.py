"""The guard's streaming body scan keeps exactly what json.loads would give at the kept keys."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcrash.guard import INTEREST, inspect_request
from vcrash.guard_scan import MAX_SPANS, BodyScanner, Opaque

PATHS = ["/v1/chat/completions", "/v1/completions", "/invocations", "/v1/responses",
         "/inference/v1/generate", "/v1/chat/completions/batch"]


def scan(body: bytes, chunk: int, span_key: str | None = "response_format") -> BodyScanner:
    s = BodyScanner(INTEREST, span_key=span_key)
    for i in range(0, len(body), chunk):
        s.feed(body[i:i + chunk])
    s.finish()
    return s


def project(value, node):
    """What the scan should keep of a json.loads result."""
    out = {}
    for key, sub in node.items():
        if key not in value:
            continue
        v = value[key]
        if isinstance(sub, dict) and isinstance(v, dict):
            out[key] = project(v, sub)
        elif isinstance(v, (dict, list)):
            out[key] = Opaque("object" if isinstance(v, dict) else "array", not v)
        else:
            out[key] = v
    return out


scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, 1.0, 1e300]),
                    st.sampled_from(["", " ", "false", "no", "OFF", "1", "yes", "a+", "text",
                                     "json_object", "json_schema", "é✓", "😀", "\\", '"', "\n"]),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["type", "schema", "json_schema", "name", "a", "json",
                                     "choice", "json_object", "regex"]), inner, max_size=3)),
    max_leaves=8)
so = st.dictionaries(st.sampled_from(["json", "json_object", "regex", "choice", "grammar",
                                      "structural_tag", "disable_any_whitespace"]), values, max_size=3)
rf = st.one_of(values, st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "json_object", "json_schema", "structural_tag", "x"])},
    optional={"json_schema": st.one_of(values, st.dictionaries(
        st.sampled_from(["name", "schema", "json_schema"]), values, max_size=2))}))
bodies = st.dictionaries(
    st.sampled_from(["model", "messages", "prompt", "structured_outputs", "response_format",
                     "guided_json", "guided_choice", "guided_regex", "guided_whitespace_pattern",
                     "structural_tag", "sampling_params", "max_tokens"]),
    st.one_of(values, so, rf, st.fixed_dictionaries({"structured_outputs": so})), max_size=6)


@settings(max_examples=300, deadline=None)
@given(body=bodies, chunk=st.sampled_from([1, 2, 3, 5, 64, 10**6]),
       style=st.sampled_from(["compact", "indent", "ascii", "utf16", "bom"]),
       path=st.sampled_from(PATHS))
def test_scan_matches_json_loads(body, chunk, style, path):
    if style == "compact":
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    elif style == "indent":
        raw = json.dumps(body, indent=2, ensure_ascii=False).encode()
    elif style == "ascii":
        raw = json.dumps(body).encode()
    elif style == "utf16":
        raw = json.dumps(body).encode("utf-16")
    else:
        raw = b"\xef\xbb\xbf" + json.dumps(body).encode()
    s = scan(raw, chunk)
    parsed = json.loads(raw)
    assert s.failed is None and s.result == project(parsed, INTEREST)
    a, b = inspect_request(path, parsed), inspect_request(path, s.result)
    assert (a.action, a.param) == (b.action, b.param)
    if style in ("compact", "indent", "ascii", "bom"):
        cut = raw
        for start, end in reversed(s.spans):
            cut = cut[:start] + cut[end:]
        expected = {k: v for k, v in parsed.items() if k != "response_format"}
        assert json.loads(cut) == expected


@pytest.mark.parametrize("raw,failed", [
    (b"[1, 2]", "not-object"), (b"", "not-object"), (b"  ", "not-object"), (b"null", "not-object"),
    (b'{"a": 1', "malformed"), (b'{"a": 1} {}', "malformed"), (b'{"a" 1}', "malformed"),
    (b'{"structured_outputs": {"json": "\\x"}}', "malformed"),
    (b'{"structured_outputs": {"json": "a\nb"}}', "malformed"),     # raw control character
    (b'{"structured_outputs": {"json_object": tru}}', "malformed"),
    (b'{"structured_outputs": {"json": "\xff"}}', "malformed"),
    (b'{"x": ' + b"[" * 100_010 + b"]" * 100_010 + b"}", "too-deep"),
], ids=lambda v: v[:40].decode("latin-1") if isinstance(v, bytes) else v)
def test_bodies_that_json_loads_refuses_give_no_skeleton(raw, failed):
    s = scan(raw, 7)
    assert s.result is None or s.failed
    assert s.failed == failed


def test_long_strings_are_summarised_not_kept():
    s = scan(b'{"guided_json": "' + b" \\t" * 200_000 + b'", "guided_regex": "'
             + b" " * 10_000 + b'x"}', 4096)
    assert s.result == {"guided_json": Opaque("string", True),
                        "guided_regex": Opaque("string", False)}


def test_nan_and_infinity_are_literals_json_loads_accepts():
    s = scan(b'{"structured_outputs": {"json_object": NaN, "json": -Infinity}}', 3)
    assert s.failed is None and s.result["structured_outputs"]["json"] == float("-inf")


def test_span_list_is_capped():
    raw = b"{" + b",".join(b'"response_format": 1, "a": 1' for _ in range(MAX_SPANS + 5)) + b"}"
    s = scan(raw, 1000)
    assert s.spans_overflow and len(s.spans) == MAX_SPANS

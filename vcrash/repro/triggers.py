"""The structured-output triggers, run against the AFFECTED vLLM 0.11.0 build, bare and guarded.

* bare: each trigger on a fresh server (a trigger kills it): baseline chat 200, then the
  trigger; the engine is expected to die with ``No valid structured output parameter found``;
* guarded (``--middleware vcrash.guard.StructuredOutputGuard``): one server; every trigger is
  expected to get 400 (or, for ``response_format: text``, a normal 200 after the guard drops
  it) with the engine alive after each, and valid structured-output requests still succeed;
* fixed (``run_fixed``): every trigger on one server of a fixed build → 400/200, engine alive;
* offline (``run_offline``, ``OFFLINE_TRIGGERS``): ``LLM.generate(..., SamplingParams(
  structured_outputs=StructuredOutputsParams(...)))`` in a child of the vLLM under test
  (``python -m vcrash.repro.triggers offline MODEL NAME...``).

``vcrash repro run structured-output-no-valid-param --affected`` (``affected_flow``) runs all of
these and writes the side-by-side verdict.json.

CLI (builds the affected env on first use, see ``vcrash.repro.affected``)::

    python -m vcrash.repro.triggers list
    python -m vcrash.repro.triggers run --out DIR [--trigger NAME ...] [--no-bare] [--no-guarded]
                                        [--samples SAMPLES_DIR]

Writes ``DIR/bare-<trigger>.log``, ``DIR/guarded.log`` and ``DIR/results.json``; with
``--samples`` also the analyzer samples ``affected-0.11.0-<trigger>.log`` and
``guarded-0.11.0.log`` under ``SAMPLES_DIR/structured-output-no-valid-param/``.
Exit code: 0 every expectation held, 1 one did not, 2 could not run.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from vcrash.repro import affected as aff
from vcrash.repro.launcher import Launched, free_port, http, kill_all, launch, wait_until

RULE = "structured-output-no-valid-param"
ROOT_RX = r"ValueError: No valid structured output parameter found"
SERVED = "tiny"


@dataclass(frozen=True)
class Trigger:
    name: str
    endpoint: str            # "chat" | "completions" | "invocations" (a chat body)
    extra: dict
    guarded: str             # what the guard does: "400" | "rewrite"
    stream: bool = False
    note: str = ""
    pad: int = 0             # bytes of JSON whitespace added to the body


PAD_BYTES = 40 * 1024 * 1024     # past the old guard's 32 MiB inspection cap


TRIGGERS: dict[str, Trigger] = {t.name: t for t in [
    Trigger("response-format-text", "chat", {"response_format": {"type": "text"}}, "rewrite",
            note="the headline: an ordinary OpenAI client option"),
    Trigger("structured-outputs-empty", "chat", {"structured_outputs": {}}, "400"),
    Trigger("completions-structured-outputs-empty", "completions", {"structured_outputs": {}}, "400"),
    Trigger("json-object-false", "chat", {"structured_outputs": {"json_object": False}}, "400",
            note="also kills 0.11.1-0.24.x"),
    Trigger("stream-response-format-text", "chat", {"response_format": {"type": "text"}}, "rewrite",
            stream=True, note="SSE 200 with an error event"),
    Trigger("structured-outputs-options-only", "chat",
            {"structured_outputs": {"disable_any_whitespace": True}}, "400"),
    Trigger("guided-whitespace-pattern", "chat", {"guided_whitespace_pattern": " "}, "400",
            note="legacy field alone"),
    Trigger("json-schema-without-schema", "chat",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "400"),
    # the bypasses of the first guard (issue 15)
    Trigger("invocations-structured-outputs-empty", "invocations", {"structured_outputs": {}}, "400",
            note="SageMaker route, dispatched to the chat handler"),
    Trigger("json-object-false-string", "chat",
            {"structured_outputs": {"json_object": "false"}, "guided_json": {"type": "object"}}, "400",
            note="pydantic makes 'false' False; guided_json is ignored once structured_outputs is set"),
    Trigger("json-schema-inner-key", "chat",
            {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "x", "json_schema": {"type": "object"}}}}, "400",
            note="the schema is read from the alias 'schema' only"),
    Trigger("padded-structured-outputs-empty", "chat", {"structured_outputs": {}}, "400",
            pad=PAD_BYTES, note="40 MiB of whitespace"),
]}
DEFAULT_BARE = ["response-format-text", "structured-outputs-empty",
                "completions-structured-outputs-empty", "json-object-false",
                "stream-response-format-text", "invocations-structured-outputs-empty",
                "json-object-false-string", "json-schema-inner-key",
                "padded-structured-outputs-empty"]

# offline (`vllm.LLM`) triggers: name -> StructuredOutputsParams(**kwargs). They run in a child
# of the vLLM under test (`python -m vcrash.repro.triggers offline MODEL NAME...`); the guard is
# HTTP middleware, so it has nothing to say about them.
OFFLINE_TRIGGERS: dict[str, dict] = {
    "offline-structured-outputs-empty": {},            # SamplingParams(structured_outputs=StructuredOutputsParams())
    "offline-json-object-false": {"json_object": False},
}
DEFAULT_OFFLINE = ["offline-structured-outputs-empty"]

# The one valid instance of FORCED_SCHEMA, written without whitespace.
FORCED_JSON = '{"a":"x"}'
FORCED_SCHEMA = {"type": "object", "properties": {"a": {"enum": ["x"]}}, "required": ["a"],
                 "additionalProperties": False}


def json_prefix_ok(text: str | None, expected: str = FORCED_JSON) -> bool:
    """The output is the forced JSON, or a non-empty prefix of it (cut by max_tokens), once
    whitespace is dropped: what a grammar-constrained sampler may emit whatever it samples."""
    compact = "".join((text or "").split())
    return bool(compact) and expected.startswith(compact)


@dataclass(frozen=True)
class Valid:
    """A legitimate request that must be served through the guard."""

    name: str
    endpoint: str
    extra: dict
    check: Callable[[str | None], bool]
    stream: bool = False
    pad: int = 0


# Every sampled request carries seed 0 and temperature 0; the checks hold for any output the
# constraint allows, so no verdict depends on what the tiny random model samples.
_FIXED = {"seed": 0, "temperature": 0}
VALID: list[Valid] = [
    Valid("choice", "chat", {"structured_outputs": {"choice": ["alpha", "beta"]}, **_FIXED},
          lambda text: text in ("alpha", "beta")),
    Valid("json_schema", "chat", {
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer",
                                                                   "schema": FORCED_SCHEMA}},
        "structured_outputs": {"disable_any_whitespace": True}, **_FIXED}, json_prefix_ok),
    Valid("regex", "chat", {"structured_outputs": {"regex": "(yes|no)"}, **_FIXED},
          lambda text: text in ("yes", "no")),
    Valid("guided_choice (legacy)", "chat", {"guided_choice": ["yes", "no"], **_FIXED},
          lambda text: text in ("yes", "no")),
    Valid("plain chat", "chat", dict(_FIXED), lambda text: text is not None),
    Valid("response_format text", "chat", {"response_format": {"type": "text"}, **_FIXED},
          lambda text: text is not None),
    Valid("image-sized body (24 MiB user field)", "chat",
          {"user": "iVBORw0KGgo" * (24 * 1024 * 1024 // 11),
           "structured_outputs": {"choice": ["cat", "dog"]}, **_FIXED},
          lambda text: text in ("cat", "dog")),
    Valid("whitespace-padded valid body (40 MiB)", "completions",
          {"structured_outputs": {"choice": ["x", "y"]}, **_FIXED},
          lambda text: text in ("x", "y"), pad=PAD_BYTES),
    Valid("streaming choice", "chat", {"structured_outputs": {"choice": ["alpha", "beta"]}, **_FIXED},
          lambda text: text in ("alpha", "beta"), stream=True),
]


def stream_text(body: str) -> str | None:
    """The content of an SSE completion stream, or None when it errs or never ends."""
    if "data: [DONE]" not in body:
        return None
    parts = []
    for line in body.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        try:
            event = json.loads(line[6:])
        except ValueError:
            return None
        if "error" in event:
            return None
        for choice in event.get("choices") or []:
            parts.append((choice.get("delta") or {}).get("content") or choice.get("text") or "")
    return "".join(parts)


@dataclass
class Outcome:
    trigger: str
    mode: str                  # "bare" | "guarded"
    status: int | None = None
    body: str = ""
    seconds: float | None = None
    health_after: int | None = None
    engine_alive_after: bool | None = None
    exited_after_s: float | None = None
    exit_code: int | None = None
    value_error_in_log: bool | None = None
    ok: bool = False
    detail: str = ""
    outcome: str = ""          # offline: "raised" | "accepted" | "not-reached"
    log: str = ""              # the log file (name under the out dir)


@dataclass
class Report:
    vllm_version: str
    results: list[Outcome] = field(default_factory=list)
    valid: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)


class TriggerServer:
    """A vLLM server (any build) started from ``argv_for(port)`` with ``env``, logging to ``log``."""

    def __init__(self, argv_for: Callable[[int], list[str]], env: dict[str, str], log: Path):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        if log.exists():
            log.unlink()
        self.log = log
        self.proc: Launched = launch(argv_for(self.port), log, env=env)

    def wait_ready(self, timeout: float = 300) -> float:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.poll()} before ready ({self.log})")
            return http("GET", self.base + "/health", timeout=5).status == 200
        if not wait_until(ready, timeout, interval=1.0):
            raise RuntimeError(f"server not ready after {timeout:.0f}s ({self.log})")
        return time.monotonic() - self.proc.started

    def post(self, endpoint: str, extra: dict, max_tokens: int = 16, stream: bool = False,
             timeout: float = 90, pad: int = 0):
        if endpoint in ("chat", "invocations"):
            body = {"model": SERVED, "messages": [{"role": "user", "content": "Hello"}],
                    "max_tokens": max_tokens}
            path = "/v1/chat/completions" if endpoint == "chat" else "/invocations"
        else:
            body = {"model": SERVED, "prompt": "Hello", "max_tokens": max_tokens}
            path = "/v1/completions"
        if stream:
            body["stream"] = True
        body.update(extra)
        return http("POST", self.base + path, timeout=timeout, data=request_bytes(body, pad))

    def alive(self) -> tuple[int | None, bool]:
        h = http("GET", self.base + "/health", timeout=5).status
        if h != 200:
            return h, False
        return h, self.post("completions", {}, max_tokens=4, timeout=30).status == 200


def request_bytes(body: dict, pad: int = 0) -> bytes:
    """The JSON body, with pad bytes of whitespace between two members when asked."""
    raw = json.dumps(body).encode()
    if not pad:
        return raw
    cut = raw.index(b", ") + 1
    return raw[:cut] + b" " * pad + raw[cut:]


class AffectedServer(TriggerServer):
    def __init__(self, env: aff.AffectedEnv, model: Path, log: Path, guard: bool):
        super().__init__(lambda port: aff.serve_argv(env, model, port, SERVED, guard=guard),
                         aff.child_env(env, guard=guard), log)


def _say(msg: str) -> None:
    print(f"· {msg}", file=sys.stderr, flush=True)


def run_bare(env, model: Path, trig: Trigger, out: Path) -> Outcome:
    o = Outcome(trig.name, "bare")
    log = out / f"bare-{trig.name}.log"
    srv = AffectedServer(env, model, log, guard=False)
    try:
        ready = srv.wait_ready()
        base = srv.post("chat", {}, timeout=120)
        if base.status != 200:
            o.detail = f"baseline chat got {base.status}: {base.excerpt(200)}"
            return o
        _say(f"[bare {trig.name}] ready in {ready:.0f}s, baseline 200 in {base.seconds:.1f}s")
        t0 = time.monotonic()
        r = srv.post(trig.endpoint, trig.extra, stream=trig.stream, timeout=60, pad=trig.pad)
        o.status, o.body, o.seconds = r.status, r.excerpt(600), r.seconds
        time.sleep(0.3)
        o.health_after = http("GET", srv.base + "/health", timeout=5).status
        rc = srv.proc.wait_exit(30)
        if rc is not None:
            o.exited_after_s, o.exit_code = time.monotonic() - t0, rc
            o.engine_alive_after = False
        else:
            o.health_after, o.engine_alive_after = srv.alive()
    finally:
        if srv.proc.poll() is None:
            srv.proc.stop(grace=20)
    text = log.read_text(errors="replace")
    o.value_error_in_log = "ValueError: No valid structured output parameter found" in text
    o.ok = bool(o.engine_alive_after is False and o.value_error_in_log)
    o.detail = ("engine died with the ValueError" if o.ok else
                "engine died for another reason" if o.engine_alive_after is False else
                "engine survived")
    _say(f"[bare {trig.name}] HTTP {o.status} in {o.seconds or 0:.2f}s; health {o.health_after}; "
         f"exit {o.exit_code} after {o.exited_after_s or 0:.1f}s; {o.detail}")
    return o


def run_guarded(env, model: Path, names: list[str], out: Path, rep: Report) -> list[Outcome]:
    outs: list[Outcome] = []
    log = out / "guarded.log"
    srv = AffectedServer(env, model, log, guard=True)
    try:
        rep.timings["guarded_ready_s"] = srv.wait_ready()
        base = srv.post("chat", {}, timeout=120)
        _say(f"[guarded] ready in {rep.timings['guarded_ready_s']:.0f}s, baseline {base.status}")
        if base.status != 200:
            o = Outcome("baseline", "guarded", base.status, base.excerpt(300), detail="baseline failed")
            return [o]
        for name in names:
            trig = TRIGGERS[name]
            o = Outcome(name, "guarded")
            r = srv.post(trig.endpoint, trig.extra, stream=trig.stream, timeout=60, pad=trig.pad)
            o.status, o.body, o.seconds = r.status, r.excerpt(600), r.seconds
            time.sleep(0.3)
            o.health_after, o.engine_alive_after = srv.alive()
            if trig.guarded == "400":
                err = (r.json() or {}).get("error", {}) if r.status == 400 else {}
                o.ok = r.status == 400 and err.get("type") == "BadRequestError" and bool(o.engine_alive_after)
            else:
                o.ok = (r.status == 200 and bool(o.engine_alive_after)
                        and ("data: [DONE]" in r.body and '"error"' not in r.body if trig.stream
                             else bool((r.json() or {}).get("choices"))))
            o.detail = "as expected" if o.ok else "unexpected"
            _say(f"[guarded {name}] HTTP {o.status} in {o.seconds:.2f}s; health {o.health_after}, "
                 f"engine {'alive' if o.engine_alive_after else 'DEAD'}: {o.detail}")
            outs.append(o)
            if not o.engine_alive_after:
                break
        for v in VALID:
            r = srv.post(v.endpoint, v.extra, max_tokens=24, timeout=120, stream=v.stream, pad=v.pad)
            text = served_text(r, v)
            good = r.status == 200 and text is not None and v.check(text)
            rep.valid.append({"name": v.name, "status": r.status, "content": text, "ok": good,
                              "seconds": round(r.seconds, 3)})
            _say(f"[guarded valid {v.name}] HTTP {r.status} in {r.seconds:.2f}s: {text!r} -> "
                 f"{'ok' if good else 'NOT OK'}")
        h, alive = srv.alive()
        rep.valid.append({"name": "engine alive at the end", "status": h, "ok": alive})
    finally:
        t0 = time.monotonic()
        if srv.proc.poll() is None:
            srv.proc.stop(grace=20)
        rep.timings["guarded_stop_s"] = time.monotonic() - t0
    text = log.read_text(errors="replace")
    for o in outs:
        o.value_error_in_log = "No valid structured output parameter found" in text
    return outs


def served_text(r, v: Valid) -> str | None:
    """The generated text of a response to a Valid request (None: not a normal answer)."""
    if r.status != 200:
        return None
    if v.stream:
        return stream_text(r.body)
    try:
        choice = (r.json() or {})["choices"][0]
        return choice.get("message", {}).get("content") if v.endpoint == "chat" else choice.get("text")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def run_fixed(argv_for: Callable[[int], list[str]], env: dict[str, str], names: list[str],
              out: Path, log_name: str = "fixed.log", ready_timeout: float = 300
              ) -> tuple[list[Outcome], dict[str, float]]:
    """Every server trigger on ONE server of a fixed build: 400 or 200, engine alive after each.

    Raises RuntimeError when the server does not come up (the caller reports the leg as not run).
    """
    outs: list[Outcome] = []
    timings: dict[str, float] = {}
    log = out / log_name
    srv = TriggerServer(argv_for, env, log)
    try:
        timings["ready_s"] = srv.wait_ready(ready_timeout)
        base = srv.post("chat", {}, timeout=120)
        _say(f"[fixed] ready in {timings['ready_s']:.0f}s, baseline {base.status}")
        if base.status != 200:
            raise RuntimeError(f"fixed build: baseline chat got {base.status}: {base.excerpt(200)}")
        for name in names:
            trig = TRIGGERS[name]
            o = Outcome(name, "fixed", log=log_name)
            r = srv.post(trig.endpoint, trig.extra, stream=trig.stream, timeout=60, pad=trig.pad)
            o.status, o.body, o.seconds = r.status, r.excerpt(600), r.seconds
            time.sleep(0.3)
            o.health_after, o.engine_alive_after = srv.alive()
            error_event = trig.stream and '"error"' in r.body
            o.ok = r.status in (200, 400) and bool(o.engine_alive_after) and not error_event
            o.detail = ("rejected with 400, engine alive" if o.ok and r.status == 400 else
                        "served (200), engine alive" if o.ok else
                        "error event in the stream" if error_event else
                        "engine DEAD" if not o.engine_alive_after else f"unexpected HTTP {r.status}")
            _say(f"[fixed {name}] HTTP {o.status} in {o.seconds:.2f}s; health {o.health_after}: {o.detail}")
            outs.append(o)
            if not o.engine_alive_after:
                break
    finally:
        t0 = time.monotonic()
        if srv.proc.poll() is None:
            srv.proc.stop(grace=20)
        timings["stop_s"] = time.monotonic() - t0
    text = log.read_text(errors="replace")
    for o in outs:
        o.value_error_in_log = "ValueError: No valid structured output parameter found" in text
    return outs, timings


def run_offline(python: str, env: dict[str, str], model: Path, names: list[str], out: Path,
                mode: str, log_name: str, timeout: float = 300) -> list[Outcome]:
    """The offline triggers in one child of ``python`` (``offline`` driver below).

    mode "bare" expects the engine to die with the ValueError; "fixed" expects it alive.
    Triggers after a death are returned with outcome "not-reached".
    """
    log = out / log_name
    if log.exists():
        log.unlink()
    p = launch([python, "-m", "vcrash.repro.triggers", "offline", str(model), *names], log, env=env)
    try:
        rc = p.wait_exit(timeout)
    finally:
        p.stop(grace=10)
    text = log.read_text(errors="replace")
    res = {}
    for ln in text.splitlines():
        i = ln.find("[offline] RESULT ")
        if i >= 0:
            try:
                d = json.loads(ln[i + len("[offline] RESULT "):])
            except ValueError:
                continue
            res[d.get("name")] = d
    value_error = "ValueError: No valid structured output parameter found" in text
    outs = []
    for name in names:
        o = Outcome(name, mode, log=log_name, value_error_in_log=value_error)
        d = res.get(name)
        if d is None:
            o.outcome = "not-reached"
            o.detail = ("the driver timed out" if rc is None else
                        "engine-up" in res and "not reached (an earlier trigger killed the engine)"
                        or f"the offline driver exited {rc} before this trigger (see {log_name})")
            outs.append(o)
            continue
        o.outcome, o.body, o.seconds = d["outcome"], d.get("detail", ""), d.get("seconds")
        o.engine_alive_after = d.get("engine_alive_after")
        if mode == "bare":
            o.ok = o.engine_alive_after is False and value_error
            o.detail = ("engine died with the ValueError" if o.ok else
                        "engine died for another reason" if o.engine_alive_after is False else
                        "engine survived")
        else:
            o.ok = bool(o.engine_alive_after)
            o.detail = (f"{o.outcome}, engine alive" if o.ok else f"{o.outcome}, engine DEAD")
        _say(f"[{mode} {name}] {o.outcome}: {o.body[:120]}; {o.detail}")
        outs.append(o)
    return outs


def offline_main(model: str, names: list[str]) -> int:
    """Runs INSIDE the vLLM under test: one LLM(), a baseline, then each offline trigger."""
    import vllm
    from vllm import LLM, SamplingParams
    import vllm.sampling_params as sp

    from vcrash.repro.env import parse_version

    def result(name: str, outcome: str, detail: str = "", **kw) -> None:
        print("[offline] RESULT " + json.dumps({"name": name, "outcome": outcome,
                                                  "detail": detail[:400], **kw}), flush=True)

    def alive() -> bool:
        try:
            o = llm.generate("Hello", SamplingParams(max_tokens=4), use_tqdm=False)
            return bool(o and o[0].outputs)
        except Exception:  # noqa: BLE001
            return False

    t0 = time.monotonic()
    SOP = getattr(sp, "StructuredOutputsParams", None)
    field_name = "structured_outputs"
    if SOP is None:
        SOP, field_name = sp.GuidedDecodingParams, "guided_decoding"
    kw = {}
    if parse_version(vllm.__version__) >= (0, 12):
        kw["kv_cache_memory_bytes"] = 64 * 1024 * 1024  # older CPU builds: VLLM_CPU_KVCACHE_SPACE
    llm = LLM(model=model, dtype="float32", max_model_len=1024, enforce_eager=True, **kw)
    result("engine-up", "ok", f"vLLM {vllm.__version__}: LLM() ready after {time.monotonic() - t0:.1f}s",
           engine_alive_after=alive())
    for name in names:
        t1 = time.monotonic()
        try:
            p = SOP(**OFFLINE_TRIGGERS[name])
            o = llm.generate("Hello", SamplingParams(max_tokens=8, **{field_name: p}), use_tqdm=False)
            outcome, detail, exc = "accepted", f"finish_reason={o[0].outputs[0].finish_reason}", None
        except Exception as e:  # noqa: BLE001 - every outcome is recorded
            outcome, detail, exc = "raised", f"{type(e).__name__}: {e}", type(e).__name__
        secs = round(time.monotonic() - t1, 3)
        ok = alive()
        result(name, outcome, detail, exc_type=exc, seconds=secs, engine_alive_after=ok)
        if not ok:
            time.sleep(3)  # let the dying engine core finish writing its traceback
            return 3
    return 0


def write_samples(out: Path, rep: Report, samples: Path, date: str) -> list[Path]:
    from vcrash.repro.verdict import make_sample

    written = []
    dest_dir = samples / RULE
    for o in rep.results:
        src = out / rep.logs.get(f"{o.mode}:{o.trigger}", "")
        if o.mode == "bare" and o.ok and src.is_file():
            trig = TRIGGERS[o.trigger]
            desc = f"{trig.endpoint} {json.dumps(trig.extra)}" + (" stream" if trig.stream else "")
            origin = (f"captured from a vLLM {aff.VLLM_VERSION} (vllm-cpu) server on this project's "
                      f"CPU runs, trigger {desc}, {date}")
            dest = dest_dir / f"affected-{aff.VLLM_VERSION}-{o.trigger}.log"
            if make_sample(src, dest, RULE, origin, ROOT_RX):
                written.append(dest)
    g = out / "guarded.log"
    guarded_ok = [o for o in rep.results if o.mode == "guarded"]
    if g.is_file() and guarded_ok and all(o.ok for o in guarded_ok):
        names = ", ".join(o.trigger for o in guarded_ok)
        origin = (f"captured from a vLLM {aff.VLLM_VERSION} (vllm-cpu) server on this project's CPU "
                  f"runs with --middleware vcrash.guard.StructuredOutputGuard; triggers {names} "
                  f"answered 400 (response_format text rewritten), valid structured outputs served, "
                  f"graceful stop, {date}")
        dest = dest_dir / f"guarded-{aff.VLLM_VERSION}.log"
        if make_sample(g, dest, "none", origin):
            written.append(dest)
    return written


def summarize(results: list[dict], valid: list[dict]) -> tuple[str, str]:
    """(verdict, details) in `vcrash repro run` terms for a results.json's lists.

    "reproduced+fix-confirmed": every bare trigger killed the engine with the ValueError and
    the guard turned every trigger into 400/200 with the engine alive and valid requests served.
    """
    bare = [r for r in results if r["mode"] == "bare"]
    guarded = [r for r in results if r["mode"] == "guarded"]
    parts, verdicts = [], []
    if bare:
        died = [r["trigger"] for r in bare if r["ok"]]
        parts.append(f"bare 0.11.0: {len(died)}/{len(bare)} triggers killed the engine with "
                     f"'No valid structured output parameter found'")
        verdicts.append("reproduced" if len(died) == len(bare) else "failed")
    if guarded:
        good = [r["trigger"] for r in guarded if r["ok"]]
        vok = all(v["ok"] for v in valid) if valid else False
        parts.append(f"guarded: {len(good)}/{len(guarded)} triggers answered 400/200 with the engine "
                     f"alive; valid structured outputs {'served' if vok else 'NOT all served'}")
        verdicts.append("fix-confirmed" if len(good) == len(guarded) and vok else "failed")
    verdict = "failed" if "failed" in verdicts or not verdicts else "+".join(verdicts)
    return verdict, "; ".join(parts)


def run(out: Path, bare: list[str], guarded: list[str], samples: Path | None = None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        env = aff.ensure(say=_say)
    except aff.AffectedEnvUnavailable as e:
        for r in e.reasons:
            print(f"cannot run: {r}", file=sys.stderr)
        return 2
    rep = Report(vllm_version=env.version)
    if env.built_s is not None:
        rep.timings["env_build_s"] = env.built_s
    model, built = aff.ensure_model(env)
    if built is not None:
        rep.timings["model_build_s"] = built
    try:
        for name in bare:
            t1 = time.monotonic()
            o = run_bare(env, model, TRIGGERS[name], out)
            rep.timings[f"bare:{name}_s"] = time.monotonic() - t1
            rep.results.append(o)
            rep.logs[f"bare:{name}"] = f"bare-{name}.log"
        if guarded:
            t1 = time.monotonic()
            for o in run_guarded(env, model, guarded, out, rep):
                rep.results.append(o)
                rep.logs[f"guarded:{o.trigger}"] = "guarded.log"
            rep.timings["guarded_s"] = time.monotonic() - t1
    finally:
        kill_all()
    rep.timings["total_s"] = time.monotonic() - t0
    ok = all(o.ok for o in rep.results) and all(v["ok"] for v in rep.valid)
    d = asdict(rep)
    verdict, details = summarize(d["results"], d["valid"])
    (out / "results.json").write_text(json.dumps(
        {"ok": ok, "verdict": verdict, "details": details, **d}, indent=1, default=str))
    if samples is not None:
        for p in write_samples(out, rep, samples, time.strftime("%Y-%m-%d")):
            _say(f"sample written: {p}")
    _say(f"{'all expectations held' if ok else 'SOME EXPECTATIONS FAILED'} "
         f"in {rep.timings['total_s']:.0f}s; results: {out / 'results.json'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vcrash.repro.triggers")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--trigger", action="append", default=None, choices=sorted(TRIGGERS),
                   help=f"bare triggers (default: {', '.join(DEFAULT_BARE)})")
    r.add_argument("--guarded-trigger", action="append", default=None, choices=sorted(TRIGGERS),
                   help="guarded triggers (default: all)")
    r.add_argument("--no-bare", action="store_true")
    r.add_argument("--no-guarded", action="store_true")
    r.add_argument("--samples", type=Path, default=None)
    o = sub.add_parser("offline", help="(runs inside the vLLM under test) the offline triggers")
    o.add_argument("model")
    o.add_argument("names", nargs="+", choices=sorted(OFFLINE_TRIGGERS))
    a = ap.parse_args(argv)
    if a.cmd == "offline":
        return offline_main(a.model, a.names)
    if a.cmd == "list":
        for t in TRIGGERS.values():
            print(f"{t.name:40s} {t.endpoint:12s} {json.dumps(t.extra)}{' stream' if t.stream else ''}"
                  f"  guard: {t.guarded}")
        for n, kw in OFFLINE_TRIGGERS.items():
            print(f"{n:40s} {'offline':12s} StructuredOutputsParams(**{json.dumps(kw)})  guard: n/a")
        return 0
    bare = [] if a.no_bare else (a.trigger or DEFAULT_BARE)
    guarded = [] if a.no_guarded else (a.guarded_trigger or list(TRIGGERS))
    return run(a.out.resolve(), bare, guarded, a.samples.resolve() if a.samples else None)


if __name__ == "__main__":
    sys.exit(main())

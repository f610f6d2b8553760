"""The scenario registry: which rule each reproduces, what it needs, and how it runs.

Scenario run functions get a `Ctx` and return a `Verdict` (without rediagnosis; the runner adds
that). They import nothing from vLLM: the server runs as a child process.
"""
from __future__ import annotations

import math
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rich.console import Console

from vcrash.repro.env import child_env, parse_version
from vcrash.repro.launcher import launch, wait_until
from vcrash.repro.server import Server, ServerFailed
from vcrash.repro.verdict import Step, Verdict


@dataclass
class Ctx:
    device: str
    out: Path
    model: Path
    vllm_version: str | None
    console: Console
    timeout: float = 600.0      # whole-scenario budget
    options: dict = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    python: str = sys.executable          # interpreter with the vLLM under test
    env_fn: Callable[..., dict[str, str]] | None = None  # env builder for another vLLM venv

    @property
    def version(self) -> tuple[int, ...]:
        return parse_version(self.vllm_version)

    def env(self, **extra: str) -> dict[str, str]:
        if self.env_fn is not None:
            return self.env_fn(extra)
        return child_env(self.device, extra)

    def server(self, log: Path, **extra: str) -> Server:
        return Server(self.model, log, self.env(**extra), self.device, self.console,
                      python=self.python, version=self.version)

    def left(self) -> float:
        return self.timeout - (time.monotonic() - self.started)

    def say(self, msg: str) -> None:
        self.console.print(f"[dim]·[/dim] {msg}")


@dataclass
class Capture:
    """A captured log and how to turn it into a sample."""
    log: str           # file name under out/
    expect: str        # rule id or "none"
    sample_rule: str   # samples/<sample_rule>/
    sample_name: str
    root_regex: str | None = None
    primary: bool = False  # the log whose rediagnosis decides `rediagnosed_as`


@dataclass
class Scenario:
    id: str
    rule: str
    title: str
    needs: str
    versions: str
    duration: str
    run: Callable[[Ctx], tuple[Verdict, list[Capture]]]
    expected_rule: str | None = None  # rule the analyzer should name on a reproduced log


REGISTRY: dict[str, Scenario] = {}


def register(s: Scenario) -> Scenario:
    REGISTRY[s.id] = s
    return s


def by_rule(rule: str) -> Scenario | None:
    if rule in REGISTRY:
        return REGISTRY[rule]
    for s in REGISTRY.values():
        if s.rule == rule:
            return s
    return None


def _verdict(ctx: Ctx, sc_id: str, rule: str) -> Verdict:
    return Verdict(rule=rule, scenario=sc_id, vllm_version=ctx.vllm_version, device=ctx.device,
                   verdict="failed", details="")


# ====================================================================== structured outputs

SO_RULE = "structured-output-no-valid-param"

# (name, endpoint, extra body)
SO_TRIGGERS: list[tuple[str, str, dict]] = [
    ("chat structured_outputs={}", "chat", {"structured_outputs": {}}),
    ("completions structured_outputs={}", "completions", {"structured_outputs": {}}),
    ("chat structured_outputs={json_object:false}", "chat", {"structured_outputs": {"json_object": False}}),
    ("chat structured_outputs options only", "chat", {"structured_outputs": {"disable_any_whitespace": True}}),
    ("chat response_format=text", "chat", {"response_format": {"type": "text"}}),
    ("chat response_format=json_schema without schema", "chat",
     {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
    ("chat response_format=json_schema without json_schema", "chat",
     {"response_format": {"type": "json_schema"}}),
    ("chat structured_outputs={json:''}", "chat", {"structured_outputs": {"json": ""}}),
    ("chat structured_outputs={grammar:''}", "chat", {"structured_outputs": {"grammar": ""}}),
    ("chat structured_outputs={regex:''}", "chat", {"structured_outputs": {"regex": ""}}),
    ("chat structured_outputs={structural_tag:''}", "chat", {"structured_outputs": {"structural_tag": ""}}),
    ("chat guided_whitespace_pattern alone (legacy)", "chat", {"guided_whitespace_pattern": " "}),
]


def so_affected(v: tuple[int, ...]) -> tuple[bool | None, str]:
    """Is this build affected through the server, per vllm-log-facts §5.3?"""
    if not v:
        return None, "unknown vLLM version"
    if v < (0, 8):
        return False, "V1 structured outputs did not exist before 0.8.0"
    if v < (0, 11):
        return True, ("0.8.0–0.10.x: affected offline (empty GuidedDecodingParams, json_object=False); "
                      "the server path was not reachable")
    if v < (0, 11, 1):
        return True, "0.11.0: response_format text / structured_outputs {} kill the engine"
    if v < (0, 25):
        return True, "0.11.1–0.24.x: structured_outputs {json_object: false} still kills the engine"
    return False, "fixed: rejected with HTTP 400 since 0.25.0 (PR #45346), per-request failure since 0.26.0"


def run_structured_output(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    v = _verdict(ctx, SO_RULE, SO_RULE)
    affected, why = so_affected(ctx.version)
    v.affected = affected
    caps: list[Capture] = []
    log = ctx.out / "server.log"
    srv = ctx.server(log)
    died_on: str | None = None
    try:
        v.timings["server_ready_s"] = srv.start(timeout=min(300, ctx.left()))
        ctx.say(f"server ready in {v.timings['server_ready_s']:.0f}s on port {srv.port}")
        base = srv.completion(max_tokens=8)
        v.steps.append(Step("baseline completion", "ok" if base.status == 200 else "error",
                            http_status=base.status, body_excerpt=base.excerpt(160), seconds=base.seconds))
        if base.status != 200:
            v.details = "the engine did not serve a plain completion before any trigger"
            return v, caps
        for name, ep, extra in SO_TRIGGERS:
            t0 = time.monotonic()
            r = (srv.chat if ep == "chat" else srv.completion)(extra=extra, max_tokens=16, timeout=60)
            time.sleep(0.3)
            h, ok = srv.alive()
            outcome = ("rejected" if r.status and 400 <= r.status < 500 else
                       "served" if r.status == 200 else "server-error" if r.status else "no-answer")
            v.steps.append(Step(name, outcome, http_status=r.status, body_excerpt=r.excerpt(300),
                                health_after=h, engine_alive_after=ok, seconds=time.monotonic() - t0))
            ctx.say(f"{name}: HTTP {r.status} → health {h}, engine {'alive' if ok else 'DEAD'}")
            if not ok:
                died_on = name
                break
        v.timings["requests_s"] = time.monotonic() - ctx.started - v.timings["server_ready_s"]
    except ServerFailed as e:
        v.details = str(e)
        return v, caps
    finally:
        t_stop = time.monotonic()
        if srv.proc and srv.proc.poll() is None and died_on:
            srv.proc.wait_exit(15)  # let the dying server finish its own output
        srv.stop(grace=20)
        v.timings["stop_s"] = time.monotonic() - t_stop
        v.logs.append(log.name)

    # offline API variant (child process, in-process engine)
    if not ctx.options.get("skip_offline") and ctx.left() > 60:
        off_log = ctx.out / "offline.log"
        t0 = time.monotonic()
        argv = [ctx.python, "-m", "vcrash.repro.offline", str(ctx.model)]
        if ctx.options.get("bypass"):
            argv.append("--bypass")
        p = launch(argv, off_log, env=ctx.env(VLLM_ENABLE_V1_MULTIPROCESSING="0"))
        try:
            with ctx.console.status("offline LLM() variants…"):
                rc = p.wait_exit(min(240, ctx.left()))
        finally:
            p.stop(grace=5)
        v.logs.append(off_log.name)
        res = _offline_results(off_log)
        for r in res:
            v.steps.append(Step("offline " + r["name"], r["outcome"], detail=r.get("detail", "")))
        v.timings["offline_s"] = time.monotonic() - t0
        if rc is None:
            v.steps.append(Step("offline", "timeout", detail="offline driver did not finish"))
        offline_dead = [r["name"] for r in res if r["outcome"] == "dead"]
        if offline_dead and not died_on:
            died_on = "offline " + offline_dead[0]
        reached = "ValueError: No valid structured output parameter found" in off_log.read_text(errors="replace")
        if ctx.options.get("bypass"):
            v.steps.append(Step("offline bypass reached the ValueError", "yes" if reached else "no",
                                engine_alive_after=not offline_dead,
                                detail="white box: json_object=False set after construction, request put "
                                       "straight into the engine core (skips SamplingParams.verify)"))
        if ctx.options.get("bypass") and reached:
            # 0.32.0: the ValueError fails only that request (FinishReason.ERROR), the engine serves on
            caps.append(Capture("offline.log", SO_RULE, SO_RULE,
                                f"bypass-{'engine-died' if offline_dead else 'per-request'}-{ctx.vllm_version}.log",
                                r"ValueError: No valid structured output parameter found"))

    if died_on:
        v.verdict = "reproduced" if affected is not False else "failed"
        v.details = (f"engine died after trigger '{died_on}' ({why})" if affected is not False else
                     f"engine died after '{died_on}' although {ctx.vllm_version} should be fixed")
        caps.insert(0, Capture("server.log", SO_RULE, SO_RULE, f"affected-{ctx.vllm_version}.log",
                               r"ValueError: No valid structured output parameter found", primary=True))
    else:
        served = [s for s in v.steps if s.engine_alive_after]
        n400 = sum(1 for s in v.steps if s.http_status and 400 <= s.http_status < 500)
        if affected:
            v.verdict = "failed"
            v.details = f"expected the engine to die on {ctx.vllm_version} ({why}); it survived every trigger"
        else:
            v.verdict = "fix-confirmed"
            v.details = (f"vLLM {ctx.vllm_version}: {n400} of {len(SO_TRIGGERS)} degenerate requests "
                         f"rejected with 4xx, the rest served; engine alive after all "
                         f"{len(served)} checks ({why})")
        caps.insert(0, Capture("server.log", "none", SO_RULE, f"fixed-{ctx.vllm_version}-400s.log",
                               primary=True))
    return v, caps


def _offline_results(log: Path) -> list[dict]:
    import json
    out = []
    for ln in log.read_text(errors="replace").splitlines():
        i = ln.find("[offline] RESULT ")
        if i >= 0:
            try:
                out.append(json.loads(ln[i + len("[offline] RESULT "):]))
            except ValueError:
                pass
    return out


# ====================================================================== execute-model timeout

EM_RULE = "v1-execute-model-rpc-timeout"
# 0.32.0 times out on execute_model or on sample_tokens (whichever RPC the stall hits)
EM_ROOT = r"TimeoutError: RPC call to \w+ timed out"


class DutyCycle(threading.Thread):
    """SIGSTOP/SIGCONT a process: `run_s` running, then stopped for the next entry of `stops`
    (the last entry repeats), until told to end. stops=None freezes it for good (hung variant)."""

    def __init__(self, pid: int, run_s: float, stops: list[float] | float | None):
        super().__init__(daemon=True)
        self.pid, self.run_s = pid, run_s
        self.stops = [stops] if isinstance(stops, (int, float)) else stops
        self.done = threading.Event()
        self.cycles = 0

    def _sig(self, sig: int) -> bool:
        try:
            os.kill(self.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def run(self) -> None:
        try:
            while not self.done.is_set():
                if self.done.wait(self.run_s):
                    break
                if not self._sig(signal.SIGSTOP):
                    break
                self.cycles += 1
                if self.stops is None:
                    self.done.wait()
                else:
                    self.done.wait(self.stops[min(self.cycles, len(self.stops)) - 1])
                if not self._sig(signal.SIGCONT):
                    break
        finally:
            self._sig(signal.SIGCONT)

    def end(self) -> None:
        self.done.set()
        self.join(timeout=5)
        self._sig(signal.SIGCONT)


class Load(threading.Thread):
    """Back-to-back completions until told to stop or one fails."""

    def __init__(self, srv: Server, max_tokens: int, timeout: float):
        super().__init__(daemon=True)
        self.srv, self.max_tokens, self.timeout = srv, max_tokens, timeout
        self.done = threading.Event()
        self.results: list = []

    def run(self) -> None:
        while not self.done.is_set():
            r = self.srv.completion(max_tokens=self.max_tokens, extra={"ignore_eos": True},
                                    timeout=self.timeout)
            self.results.append(r)
            if r.status != 200:
                break

    def failed(self) -> bool:
        return any(r.status != 200 for r in self.results)

    def end(self, timeout: float) -> None:
        self.done.set()
        self.join(timeout=timeout)


def em_affected(v: tuple[int, ...]) -> tuple[bool | None, str]:
    if not v:
        return None, "unknown vLLM version"
    if v < (0, 8):
        return False, "V0 engine: no execute_model RPC timeout (see v0 rules)"
    if v < (0, 9):
        return True, "0.8.x: hard-coded EXECUTE_MODEL_TIMEOUT_S; the env var has no effect"
    return True, "multiproc executor: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS bounds each execute_model RPC"


def _seen(v: Verdict) -> str:
    return next((s.detail for s in v.steps if s.name.endswith("timeout message")), "RPC call timed out")


def run_execute_model_timeout(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    v = _verdict(ctx, EM_RULE, EM_RULE)
    affected, why = em_affected(ctx.version)
    v.affected = affected
    caps: list[Capture] = []
    hung = bool(ctx.options.get("hung"))
    timeout_s = int(ctx.options.get("em_timeout", 5))
    # slow, not frozen: growing stalls, the first ones shorter than the timeout (progress goes
    # on, the stats line shows it), then one longer than it
    run_s = 0.7
    stops = [max(1.0, timeout_s * f) for f in (0.4, 0.6, 0.8)] + [float(timeout_s + 2)]
    stop_s = stops[-1]
    duty = ("frozen for good (hung)" if hung else
            f"{run_s:.1f}s running / stopped {', '.join(f'{x:.0f}' for x in stops)}s (last repeats)")

    # -------- phase A: tight timeout, slowed worker -> expect the RPC timeout
    name_a = "server-hung.log" if hung else "server-slow.log"
    ok_a, step_time = _em_phase(ctx, v, ctx.out / name_a, timeout_s, run_s,
                                None if hung else stops, expect_death=True, label="reproduce")
    v.logs.append(name_a)
    if ok_a:
        caps.append(Capture(name_a, EM_RULE, EM_RULE,
                            f"{'hung' if hung else 'slow'}-worker-{ctx.vllm_version}.log", EM_ROOT))
    if not ok_a or hung or ctx.options.get("skip_fix") or ctx.left() < 120:
        if ok_a:
            v.verdict = "reproduced"
            v.details = (f"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={timeout_s}, worker {duty}: "
                         f"'{_seen(v)}' killed the engine ({why})")
            if not hung and not ctx.options.get("skip_fix"):
                v.details += "; fix phase skipped (out of time)"
        elif not v.details:
            v.details = "the execute_model timeout did not fire"
        return v, caps

    # -------- phase B: timeout sized from the measured step time -> engine survives
    sized = int(math.ceil(2 * (stop_s + run_s + (step_time or 0.05)))) + 5
    ok_b, _ = _em_phase(ctx, v, ctx.out / "server-fixed.log", sized, run_s, stops,
                        expect_death=False, label="fix")
    v.logs.append("server-fixed.log")
    if ok_b:
        caps.append(Capture("server-fixed.log", "none", EM_RULE, f"fixed-sized-timeout-{ctx.vllm_version}.log"))
        v.verdict = "reproduced"
        v.details = (f"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={timeout_s} with the worker {duty}: "
                     f"'{_seen(v)}' killed the engine; fix confirmed: "
                     f"timeout sized to {sized}s (2×(stall+run+step {step_time or 0:.3f}s)+5) and the "
                     f"same duty cycle, the engine served and stayed healthy")
    else:
        v.verdict = "failed"
        v.details = f"reproduced with {timeout_s}s, but the sized timeout {sized}s did not keep the engine alive"
    return v, caps


def _em_phase(ctx: Ctx, v: Verdict, log: Path, timeout_s: int, run_s: float,
              stops: list[float] | None, expect_death: bool, label: str) -> tuple[bool, float | None]:
    srv = ctx.server(log, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=str(timeout_s), VLLM_LOG_STATS_INTERVAL="2")
    step_time = None
    duty: DutyCycle | None = None
    try:
        try:
            ready = srv.start(timeout=min(300, ctx.left()))
        except ServerFailed as e:
            v.steps.append(Step(f"{label}: start", "error", detail=str(e)))
            v.details = str(e)
            return False, None
        v.timings[f"{label}_server_ready_s"] = ready
        ctx.say(f"({label}) server ready in {ready:.0f}s (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={timeout_s})")
        w = srv.completion(max_tokens=64, extra={"ignore_eos": True}, timeout=60)
        if w.status == 200:
            step_time = w.seconds / 64
        v.steps.append(Step(f"{label}: warm-up 64 tokens", "ok" if w.status == 200 else "error",
                            http_status=w.status, seconds=w.seconds,
                            extra={"step_time_s": round(step_time, 4) if step_time else None}))
        workers = srv.worker_pids()
        if not workers:
            v.steps.append(Step(f"{label}: find worker", "error",
                                detail="no VLLM::Worker process in the server's session"))
            v.details = "could not find the worker process (multiproc executor needed)"
            return False, step_time
        wpid = workers[0]
        # keep the engine busy: back-to-back 1000-token requests (a tiny model decodes ~1000
        # tokens/s, one request alone can end before the first stall)
        load = Load(srv, max_tokens=1000, timeout=max(90, 4 * timeout_s + 60))
        t0 = time.monotonic()
        load.start()
        time.sleep(0.2)
        duty = DutyCycle(wpid, run_s, stops)
        duty.start()
        want_cycles = len(stops) + 1 if stops else 1
        ctx.say(f"({label}) worker pid {wpid} "
                f"{'frozen' if stops is None else f'duty cycle {run_s}s run / stops {stops}s'}, "
                f"back-to-back 1000-token requests")
        budget = (sum(stops) + stops[-1] + run_s * want_cycles + 30) if stops else 4 * timeout_s + 30

        def finished() -> bool:
            if re.search(EM_ROOT, srv.proc.log_text()) or srv.proc.poll() is not None:
                return True
            if load.failed():
                return True
            return duty.cycles >= want_cycles and (stops is not None)

        with ctx.console.status(f"({label}) requests under a slowed worker…"):
            wait_until(finished, budget, 0.5)
        duty.end()
        load.end(timeout=60)
        died = False
        if load.failed() or srv.proc.poll() is not None:  # the log line may land a moment later
            wait_until(lambda: re.search(EM_ROOT, srv.proc.log_text()) is not None, 10, 0.5)
        m = re.search(EM_ROOT, srv.proc.log_text())
        timed_out = m is not None
        if m:
            v.steps.append(Step(f"{label}: timeout message", "logged", detail=m.group(0)))
        if expect_death and timed_out:
            died = wait_until(lambda: srv.proc.poll() is not None or srv.health(2).status != 200, 30, 1)
        h, ok = (None, False) if died else srv.alive()
        codes = [x.status for x in load.results]
        bad = next((x for x in load.results if x.status != 200), None)
        v.steps.append(Step(f"{label}: requests under duty cycle", "timeout" if timed_out else
                            ("ok" if codes and not bad else "error"),
                            http_status=bad.status if bad else (codes[-1] if codes else None),
                            body_excerpt=bad.excerpt(200) if bad else None, health_after=h,
                            engine_alive_after=ok, seconds=time.monotonic() - t0,
                            extra={"duty_cycles": duty.cycles, "timeout_s": timeout_s,
                                   "run_s": run_s, "stops_s": stops, "http_statuses": codes}))
        ctx.say(f"({label}) requests: HTTP {codes}, RPC timeout logged: {timed_out}, "
                f"engine {'alive' if ok else 'dead'} ({duty.cycles} stops)")
        if expect_death:
            if died:
                srv.proc.wait_exit(20)
            return timed_out and not ok, step_time
        if stops is not None and duty.cycles < want_cycles:
            v.steps.append(Step(f"{label}: duty cycle check", "inconclusive",
                                detail=f"only {duty.cycles} stops happened, fewer than {want_cycles}"))
            return False, step_time
        return (not timed_out) and ok and bool(codes) and bad is None, step_time
    finally:
        if duty:
            duty.end()
        srv.stop(grace=20)


# ====================================================================== engine-ready timeout

ER_RULE = "v1-engine-startup-ready-timeout"
ER_MSG = r"Timed out waiting for engine(s| core processes)"


def run_engine_ready_timeout(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    v = _verdict(ctx, ER_RULE, ER_RULE)
    limit = int(ctx.options.get("ready_timeout", 5))
    log = ctx.out / "server.log"
    caps: list[Capture] = []
    srv = ctx.server(log, VLLM_ENGINE_READY_TIMEOUT_S=str(limit))
    srv.start(wait=False)
    try:
        with ctx.console.status("waiting for the worker to start loading the model…"):
            seen = wait_until(lambda: bool(srv.worker_pids()) and "Starting to load model" in srv.proc.log_text()
                              or srv.proc.poll() is not None, min(240, ctx.left()), 0.2)
        if not seen or srv.proc.poll() is not None:
            v.details = "the server exited or never reached model loading"
            return v, caps
        wpid = srv.worker_pids()[0]
        os.kill(wpid, signal.SIGSTOP)
        watch = max(6 * limit, 30)
        ctx.say(f"worker {wpid} frozen during start-up; VLLM_ENGINE_READY_TIMEOUT_S={limit}, watching {watch}s")
        t0 = time.monotonic()
        fired = wait_until(lambda: re.search(ER_MSG, srv.proc.log_text()) is not None
                           or srv.proc.poll() is not None, watch, 1)
        v.steps.append(Step("stalled start-up", "timeout-fired" if fired else "silent",
                            seconds=time.monotonic() - t0,
                            extra={"ready_timeout_s": limit, "server_exited": srv.proc.poll() is not None}))
        if fired:
            v.verdict = "reproduced"
            v.details = f"VLLM_ENGINE_READY_TIMEOUT_S={limit} fired during a stalled start-up"
            caps.append(Capture(log.name, ER_RULE, ER_RULE, f"stalled-startup-{ctx.vllm_version}.log", ER_MSG))
            return v, caps
        # honest part: it did not fire. What does a plain stop print?
        t1 = time.monotonic()
        os.kill(srv.proc.pid, signal.SIGTERM)
        after = wait_until(lambda: re.search(ER_MSG, srv.proc.log_text()) is not None
                           or srv.proc.poll() is not None, 30, 0.5)
        msg_after = re.search(ER_MSG, srv.proc.log_text()) is not None
        v.steps.append(Step("SIGTERM to the API server", "message-after-sigterm" if msg_after else "exited",
                            seconds=time.monotonic() - t1, extra={"exited": srv.proc.poll() is not None}))
        v.verdict = "not-affected"
        v.details = (f"vLLM {ctx.vllm_version}: VLLM_ENGINE_READY_TIMEOUT_S={limit} did not fire during a "
                     f"{watch}s stall of the worker in model loading (the front end waits without limit)"
                     + (f"; the timeout message was printed only {time.monotonic() - t1:.0f}s after SIGTERM, "
                        "so in a log it points at the stop, not at a real deadline" if msg_after else ""))
        _ = after
        if msg_after:
            caps.append(Capture(log.name, ER_RULE, ER_RULE, f"sigterm-during-stalled-startup-{ctx.vllm_version}.log",
                                ER_MSG))
        return v, caps
    finally:
        srv.stop(grace=15)
        v.logs.append(log.name)


# ====================================================================== shutdown noise

SN_RULE = "engine-core-died-at-exit-shutdown-noise"
SN_NOISE = (r"AsyncLLM output_handler failed|Engine core proc \S+ died unexpectedly|"
            r"force killing remaining process|EngineDeadError")


def run_shutdown_noise(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    """A healthy server, one request, a plain SIGTERM: does the stop leave crash-looking noise?"""
    v = _verdict(ctx, SN_RULE, SN_RULE)
    v.affected = ctx.version >= (0, 11) if ctx.version else None
    log = ctx.out / "server.log"
    srv = ctx.server(log)
    caps: list[Capture] = []
    try:
        try:
            v.timings["server_ready_s"] = srv.start(timeout=min(300, ctx.left()))
        except ServerFailed as e:
            v.details = str(e)
            return v, caps
        c = srv.completion(max_tokens=16)
        v.steps.append(Step("completion", "ok" if c.status == 200 else "error", http_status=c.status,
                            seconds=c.seconds))
        t0 = time.monotonic()
        rc = srv.stop(grace=30)
        v.steps.append(Step("plain SIGTERM stop", f"exit {rc}", seconds=time.monotonic() - t0))
    finally:
        srv.stop(grace=10)
        v.logs.append(log.name)
    noise = sorted({m.group(0) for m in re.finditer(SN_NOISE, log.read_text(errors="replace"))})
    v.steps.append(Step("shutdown noise in the log", "yes" if noise else "no", detail="; ".join(noise)))
    v.verdict = "reproduced" if noise else "not-affected"
    v.details = (f"a plain stop of a healthy server logged: {'; '.join(noise)} — no crash happened"
                 if noise else "the plain stop left no crash-looking lines this time (the noise is racy)")
    caps.append(Capture(log.name, "none", SN_RULE, f"plain-sigterm-{ctx.vllm_version}.log"))
    return v, caps


# ====================================================================== registry

register(Scenario(
    id=SO_RULE, rule=SO_RULE,
    title="Degenerate structured-output requests (server + offline API)",
    needs="CPU or GPU; any vLLM ≥ 0.8 (affected: 0.8.0–0.24.x; fixed: ≥ 0.25.0)",
    versions="affected < 0.25.0 (server: 0.11.0 for {} / text, 0.11.1–0.24.x for json_object=false)",
    duration="≈ 50 s on 2 idle CPU cores (server start ≈ 30–45 s, 12 triggers ≈ 5 s, offline ≈ 13 s); up to ≈ 3.5 min on a busy machine",
    run=run_structured_output))

register(Scenario(
    id=EM_RULE, rule=EM_RULE,
    title="execute_model RPC timeout with a slowed (SIGSTOP/SIGCONT) worker, then the sized-timeout fix",
    needs="CPU or GPU; multiproc executor; vLLM ≥ 0.9 (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS); Linux signals",
    versions="all V1 multiproc builds (0.8 hard-codes the timeout)",
    duration="≈ 130 s on 2 CPU cores (two server starts ≈ 40–50 s, ≈ 20 s per phase); --hung ≈ 70 s",
    run=run_execute_model_timeout))

register(Scenario(
    id=ER_RULE, rule=ER_RULE,
    title="VLLM_ENGINE_READY_TIMEOUT_S with the worker frozen during model loading",
    needs="CPU or GPU; vLLM ≥ 0.14 (env var)",
    versions="0.32.0: does not fire during a stalled start-up (prints its message only after SIGTERM)",
    duration="≈ 110 s on 2 CPU cores (start to model loading, 30 s watch, SIGTERM)",
    run=run_engine_ready_timeout))

register(Scenario(
    id=SN_RULE, rule=SN_RULE,
    title="Healthy server, one request, plain SIGTERM: the stop logs EngineDeadError-looking noise",
    needs="CPU or GPU; vLLM ≥ 0.11",
    versions="0.32.0: AsyncLLM output_handler failed … EngineDeadError after a plain stop (racy)",
    duration="≈ 45 s on 2 idle CPU cores (one server start)",
    run=run_shutdown_noise))


# ====================================================================== start-up misconfigurations
# port already in use, --max-model-len above the model's limit, KV cache too small: the server
# is started with one bad argument, must exit before it is ready, and the log must name the rule;
# then the fix (one changed argument) must give a healthy server that serves a completion.

class ArgServer(Server):
    """The standard reproducer server with extra CLI arguments appended (argparse keeps the last
    value of a repeated option) and optionally a fixed port."""

    def __init__(self, *a, extra_args: list[str] | None = None, port: int | None = None, **kw):
        super().__init__(*a, **kw)
        self.extra_args = list(extra_args or [])
        if port is not None:
            self.port = port
            self.base = f"http://127.0.0.1:{port}"

    def argv(self, version: tuple[int, ...] | None) -> list[str]:
        # vLLM's parser keeps the last value given, so the extras override the standard ones.
        return super().argv(version) + self.extra_args


def _arg_server(ctx: Ctx, log: Path, extra_args: list[str], port: int | None = None) -> ArgServer:
    return ArgServer(ctx.model, log, ctx.env(), ctx.device, ctx.console, python=ctx.python,
                     version=ctx.version, extra_args=extra_args, port=port)


def _bad_start(ctx: Ctx, v: Verdict, log: Path, args: list[str], root: str, label: str,
               port: int | None = None) -> bool:
    """Start with `args`; True when the server exits before it is ready and `root` is in the log."""
    srv = _arg_server(ctx, log, args, port)
    t0 = time.monotonic()
    try:
        try:
            srv.start(timeout=min(300, ctx.left()))
            ready, err = True, ""
        except ServerFailed as e:
            ready, err = False, str(e)
        rc = srv.proc.poll() if srv.proc else None
        if not ready and rc is None and srv.proc:  # not ready in time: still running
            rc = srv.proc.wait_exit(5)
        found = re.search(root, srv.proc.log_text()) if srv.proc else None
        v.timings[f"{label}_exit_s"] = time.monotonic() - t0
        what = " ".join(args + (["--port", str(port)] if port is not None else [])) or "the standard arguments"
        v.steps.append(Step(f"{label}: start with {what}",
                            "ready" if ready else f"exit {rc}", detail=found.group(0) if found else err,
                            seconds=time.monotonic() - t0,
                            extra={"root_line_in_log": found is not None, "port": srv.port}))
        ctx.say(f"({label}) {'server became READY' if ready else f'server exited with code {rc}'} after "
                f"{time.monotonic() - t0:.0f}s; root line {'found' if found else 'NOT found'}")
        return (not ready) and found is not None
    finally:
        srv.stop(grace=15)
        v.logs.append(log.name)


def _fixed_start(ctx: Ctx, v: Verdict, log: Path, args: list[str], label: str = "fix") -> bool:
    """Start with the fixed `args`; True when /health is 200 and a completion is served."""
    srv = _arg_server(ctx, log, args)
    try:
        try:
            v.timings[f"{label}_server_ready_s"] = srv.start(timeout=min(300, ctx.left()))
        except ServerFailed as e:
            v.steps.append(Step(f"{label}: start with {' '.join(args) or 'the standard arguments'}",
                                "error", detail=str(e)))
            return False
        c = srv.completion(max_tokens=8)
        h, ok = srv.alive()
        v.steps.append(Step(f"{label}: start with {' '.join(args) or 'the standard arguments'}",
                            "ok" if c.status == 200 and ok else "error", http_status=c.status,
                            health_after=h, engine_alive_after=ok,
                            seconds=v.timings[f"{label}_server_ready_s"]))
        ctx.say(f"({label}) server ready in {v.timings[f'{label}_server_ready_s']:.0f}s, "
                f"completion HTTP {c.status}, health {h}")
        return c.status == 200 and ok
    finally:
        srv.stop(grace=20)
        v.logs.append(log.name)


def _misconfig(ctx: Ctx, rule: str, bad: list[str], root: str, fix: list[str], what: str,
               fix_what: str, sample: str, port: int | None = None,
               hold: Callable[[], object] | None = None,
               mark: str | None = None) -> tuple[Verdict, list[Capture]]:
    v = _verdict(ctx, rule, rule)
    v.affected = True
    caps: list[Capture] = []
    holder = hold() if hold else None
    try:
        ok_a = _bad_start(ctx, v, ctx.out / "server-bad.log", bad, root, "reproduce", port)
    finally:
        if holder is not None:
            holder.close()
    if not ok_a:
        v.details = f"{what}: the server did not fail with the expected message"
        return v, caps
    caps.append(Capture("server-bad.log", rule, rule, f"captured-{sample}-{ctx.vllm_version}.log", mark or root,
                        primary=True))
    v.details = f"{what}: the server exited before it was ready"
    if ctx.options.get("skip_fix") or ctx.left() < 90:
        v.verdict = "reproduced"
        v.details += "; fix phase skipped" + ("" if ctx.options.get("skip_fix") else " (out of time)")
        return v, caps
    ok_b = _fixed_start(ctx, v, ctx.out / "server-fixed.log", fix)
    caps.append(Capture("server-fixed.log", "none", rule, f"fixed-{sample}-{ctx.vllm_version}.log"))
    if ok_b:
        v.verdict = "reproduced"
        v.details += f"; fix confirmed: {fix_what} → server healthy, completion served"
    else:
        v.verdict = "failed"
        v.details += f"; but the fix ({fix_what}) did not give a healthy server"
    return v, caps


PU_RULE = "port-already-in-use"
PU_ROOT = r"\[Errno 98\]|[Aa]ddress already in use"


class _PortHolder:
    """A plain listening socket on 127.0.0.1 (the 'other process' holding the port)."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]

    def close(self) -> None:
        self.sock.close()


def run_port_in_use(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    h = _PortHolder()
    return _misconfig(ctx, PU_RULE, [], PU_ROOT, [],
                      f"--port {h.port} held by a listening socket on 127.0.0.1",
                      "a free port", "port-held-by-socket", port=h.port, hold=lambda: h)


ML_RULE = "max-model-len-exceeds-derived"
ML_ROOT = r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len"
# the analyzer's primary line is the exception line, the message is on the next one (pydantic)
ML_MARK = r"ValidationError: \d+ validation errors? for|ValueError: User-specified max_model_len"
ML_MODEL_LIMIT = 2048  # max_position_embeddings of the tiny model (vcrash/repro/model.py)


def run_max_model_len(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    bad = str(2 * ML_MODEL_LIMIT)
    return _misconfig(ctx, ML_RULE, ["--max-model-len", bad], ML_ROOT,
                      ["--max-model-len", str(ML_MODEL_LIMIT)],
                      f"--max-model-len {bad} on a model with max_position_embeddings={ML_MODEL_LIMIT}",
                      f"--max-model-len {ML_MODEL_LIMIT}", "max-model-len-4096", mark=ML_MARK)


KV_RULE = "kv-cache-too-small-for-max-model-len"
KV_ROOT = (r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache|"
           r"To serve at least one request with the models?'s max seq len \(\d+\)")
KV_TINY = 256 * 1024  # bytes; the tiny model needs 1 KiB per token (2 layers × K,V × 64 × fp32)


def run_kv_too_small(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    return _misconfig(ctx, KV_RULE, ["--max-model-len", "2048", "--kv-cache-memory-bytes", str(KV_TINY)],
                      KV_ROOT, ["--max-model-len", "2048"],
                      f"--kv-cache-memory-bytes {KV_TINY} (≈ 256 tokens) with --max-model-len 2048",
                      "--kv-cache-memory-bytes 67108864 (the default here) with the same --max-model-len 2048",
                      "kv-256k-max-model-len-2048")


# ====================================================================== worker killed

WK_RULE = "worker-proc-died-unexpectedly"
WK_ROOT = r"Worker proc \S+ died unexpectedly|Worker \S+ pid \d+ died, exit code: -?\d+"


def run_worker_killed(ctx: Ctx) -> tuple[Verdict, list[Capture]]:
    """Healthy server, one completion, SIGKILL to the VLLM::Worker process: the engine notices."""
    v = _verdict(ctx, WK_RULE, WK_RULE)
    v.affected = ctx.version >= (0, 8, 5) if ctx.version else None
    log = ctx.out / "server.log"
    srv = ctx.server(log)
    caps: list[Capture] = []
    try:
        try:
            v.timings["server_ready_s"] = srv.start(timeout=min(300, ctx.left()))
        except ServerFailed as e:
            v.details = str(e)
            return v, caps
        c = srv.completion(max_tokens=8)
        v.steps.append(Step("baseline completion", "ok" if c.status == 200 else "error",
                            http_status=c.status, seconds=c.seconds))
        workers = srv.worker_pids()
        if not workers:
            v.details = "no VLLM::Worker process in the server's session (multiproc executor needed)"
            return v, caps
        t0 = time.monotonic()
        os.kill(workers[0], signal.SIGKILL)
        ctx.say(f"SIGKILL to worker pid {workers[0]}")
        seen = wait_until(lambda: re.search(WK_ROOT, srv.proc.log_text()) is not None, 60, 0.5)
        exited = wait_until(lambda: srv.proc.poll() is not None, 30, 0.5)
        h = srv.health(2).status if not exited else None
        v.steps.append(Step("SIGKILL the worker", "logged" if seen else "silent",
                            detail=(re.search(WK_ROOT, srv.proc.log_text()) or [""])[0] if seen else "",
                            health_after=h, engine_alive_after=False if exited else None,
                            seconds=time.monotonic() - t0,
                            extra={"worker_pid": workers[0], "server_exit_code": srv.proc.poll()}))
        ctx.say(f"worker death logged: {seen}; server {'exited ' + str(srv.proc.poll()) if exited else 'still up'}")
    finally:
        srv.stop(grace=20)
        v.logs.append(log.name)
    if seen:
        v.verdict = "reproduced"
        v.details = ("SIGKILL of the VLLM::Worker process of a healthy server: the engine logged the "
                     "worker death" + (f" and the server exited (code {srv.proc.poll()})" if exited else ""))
        caps.append(Capture(log.name, WK_RULE, WK_RULE, f"captured-sigkill-worker-{ctx.vllm_version}.log",
                            WK_ROOT, primary=True))
    else:
        v.details = "the worker was killed but the engine logged no worker death"
    return v, caps


register(Scenario(
    id=PU_RULE, rule=PU_RULE,
    title="--port held by a listening socket on 127.0.0.1, then a free port",
    needs="CPU or GPU; any vLLM",
    versions="all versions",
    duration="≈ 66 s on 2 CPU cores (bad start exits in 18 s, fix server ready 47 s)",
    run=run_port_in_use))

register(Scenario(
    id=ML_RULE, rule=ML_RULE,
    title="--max-model-len 4096 above the tiny model's max_position_embeddings 2048, then 2048",
    needs="CPU or GPU; any vLLM",
    versions="all versions (pydantic ValidationError since 0.10)",
    duration="≈ 45 s on 2 CPU cores (bad start exits in 12 s, fix server ready 32 s)",
    run=run_max_model_len))

register(Scenario(
    id=KV_RULE, rule=KV_RULE,
    title="--kv-cache-memory-bytes 256 KiB with --max-model-len 2048, then 64 MiB",
    needs="CPU or GPU; vLLM ≥ 0.12 (--kv-cache-memory-bytes)",
    versions="all versions (V1 wording)",
    duration="≈ 73 s on 2 CPU cores (bad start exits in 38 s, fix server ready 33 s)",
    run=run_kv_too_small))

register(Scenario(
    id=WK_RULE, rule=WK_RULE,
    title="SIGKILL the VLLM::Worker process of a healthy server",
    needs="CPU or GPU; multiproc executor; Linux signals",
    versions="V1 0.8.5+ (V0 wording also matched)",
    duration="≈ 42 s on 2 CPU cores (server ready 37 s, exit 4.5 s after the SIGKILL)",
    run=run_worker_killed))

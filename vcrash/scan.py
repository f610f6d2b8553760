"""`vcrash scan`: many logs -> one row each, an aggregate by rule, and the CI formats.

Each log is analyzed on its own (in parallel with `--jobs N`, a process pool); a worker sends
back only a small `LogResult` (row facts plus the compact findings the CI formats need), never
the report with its tracebacks, so a folder of thousands of logs keeps memory flat. The tables
are pandas frames (imported only here). Machine output goes to stdout or the `-o` file; the
progress bar and human chatter go to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import List, Optional, TextIO

import typer

from vcrash.config import IGNORE_HELP, SELECT_HELP
from vcrash.errors import Fatal, one_line_errors

from vcrash.report.findings import Batch, LogResult, fail_exit_code, problem_severities

SCAN_FORMATS = ("table", "csv", "json", "jsonl", "sarif", "junit", "github", "gitlab", "markdown", "html")
FAIL_LEVELS = ("error", "warning", "note", "never")
ENGINES = ("local", "dask")
SCAN_SCHEMA = "vcrash/scan@1"
ROW_COLUMNS = ("path", "size", "lines", "vllm_version", "status", "rule", "severity", "exception", "line",
               "time", "fingerprint", "findings", "error", "warning", "explained_by")
RULE_COLUMNS = ("rule", "severity", "kind", "count", "logs", "first_seen", "last_seen", "example")
INT_COLUMNS = ("size", "lines", "line", "findings")
MAX_TABLE_ROWS = 200


# --------------------------------------------------------------------------- per-log analysis

_WORKER: dict = {}


def worker_state(pack, selectors: tuple[tuple[str, ...], tuple[str, ...]], redact: bool) -> dict:
    """What analyzing one log needs, built once per worker process from a loaded pack."""
    from vcrash.analyze import Options
    from vcrash.classify.match import Matcher
    from vcrash.redact import Redactor

    options = Options(select=selectors[0], ignore=selectors[1])
    return dict(pack=pack, matcher=Matcher(pack), options=options, redactor=Redactor(enabled=redact))


def _init_worker(rule_dirs: list[str], include_bundled: bool, redact: bool,
                 selectors: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()), pooled: bool = False) -> None:
    from vcrash import forking
    from vcrash.classify.rules import load_pack
    from vcrash.collector import pace_for_batch_run

    pace_for_batch_run()
    if pooled:
        forking.cpus_in_use()  # the pool's other workers have the other CPUs (no helper forks)
    _WORKER.update(worker_state(load_pack(rule_dirs, include_bundled=include_bundled), selectors, redact))


def scan_one(source, state: dict | None = None):
    """Analyze one log in this process and keep only its small result: a `LogResult`, or a
    `Skipped` for a listed object whose content is not a log (sniffed here, on the worker)."""
    from vcrash.analyze import analyze_source, build_report, run_links
    from vcrash.read import Skipped, remote_url
    from vcrash.report.findings import result_for_input
    from vcrash.scan_links import run_facts

    w = state if state is not None else _WORKER
    try:
        if source.walked and remote_url(source.path):
            from vcrash.remote import sniff

            reason = sniff(source.path)
            if reason:
                return Skipped(source.display, reason)
        state_, summary = analyze_source(source, 0, w["matcher"], w["options"])
        report = build_report([state_], [summary], w["matcher"], w["pack"], w["options"])
        result = result_for_input(summary, report.diagnoses, w["redactor"])
        result.runs = run_facts(run_links([state_], with_pids=True), report.diagnoses)
        return result
    except Exception as exc:  # one bad log never aborts a scan of thousands
        from vcrash.remote import scrub

        first = scrub(str(exc).splitlines()[0]) if str(exc) else ""
        return LogResult(path=source.display, status="unreadable",
                         error=f"{source.display}: analysis failed: {type(exc).__name__}: {first}")


def collect(outcomes: list, skipped: list | None) -> list[LogResult]:
    """Rows in input order; objects found not to be logs go to `skipped`."""
    from vcrash.read import Skipped

    rows = []
    for out in outcomes:
        if isinstance(out, Skipped):
            if skipped is not None:
                skipped.append(out)
        else:
            rows.append(out)
    return rows


def run_scan(sources: list, rule_dirs: list[str] | None = None, *, include_bundled: bool = True,
             jobs: int | None = None, redact: bool = True, progress: bool = False,
             select: list[str] | None = None, ignore: list[str] | None = None,
             skipped: list | None = None) -> list[LogResult]:
    """Analyze every source (in input order in the result), `jobs` processes at a time."""
    rule_dirs = list(rule_dirs or [])
    selectors = (tuple(select or ()), tuple(ignore or ()))
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(sources) or 1))
    results: list = [None] * len(sources)
    bar = _progress(len(sources)) if progress else None
    if jobs == 1:
        _init_worker(rule_dirs, include_bundled, redact, selectors)
        with bar or _nullcontext() as b:
            for i, src in enumerate(sources):
                results[i] = scan_one(src)
                if b is not None:
                    b.advance()
        return collect(results, skipped)
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker,
                             initargs=(rule_dirs, include_bundled, redact, selectors, True)) as pool:
        # Submit everything before the progress bar starts its thread (the pool may fork).
        futures = {pool.submit(scan_one, src): i for i, src in enumerate(sources)}
        with bar or _nullcontext() as b:
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                if b is not None:
                    b.advance()
    return collect(results, skipped)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _progress:
    """A rich progress bar on stderr (only used when stderr is a terminal)."""

    def __init__(self, total: int, label: str = "scanning"):
        self.total = total
        self.label = label

    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._p = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                           console=Console(stderr=True), transient=True)
        self._p.__enter__()
        self._task = self._p.add_task("scan", total=self.total)
        return self

    def advance(self) -> None:
        self._p.advance(self._task)

    def __exit__(self, *exc):
        return self._p.__exit__(*exc)


# --------------------------------------------------------------------------- tables


def logs_frame(results: list[LogResult]):
    import pandas as pd

    df = pd.DataFrame([r.row() for r in results], columns=list(ROW_COLUMNS))
    for col in INT_COLUMNS:
        df[col] = df[col].astype("Int64")
    return df


def rules_frame(results: list[LogResult]):
    """The aggregate by rule: findings, distinct logs, first/last seen (log time), an example."""
    import pandas as pd

    records = [{"rule": f["rule"], "severity": f["severity"], "kind": f["kind"], "path": r.path,
                "time": f.get("time"), "example": f"{r.path}:{f['line']}", "order": i}
               for i, r in enumerate(results) for f in r.findings]
    if not records:
        return pd.DataFrame(columns=list(RULE_COLUMNS))
    df = pd.DataFrame(records)
    agg = df.groupby("rule", sort=False).agg(
        severity=("severity", "first"), kind=("kind", "first"), count=("rule", "size"),
        logs=("path", "nunique"), first_seen=("time", "min"), last_seen=("time", "max"),
        example=("example", "first"), order=("order", "min"))
    agg = agg.reset_index().sort_values(["count", "order", "rule"], ascending=[False, True, True], kind="stable")
    agg = agg.drop(columns=["order"]).reset_index(drop=True)
    for col in ("count", "logs"):
        agg[col] = agg[col].astype("Int64")
    return agg[list(RULE_COLUMNS)]


def _records(df) -> list[dict]:
    """Frame -> JSON-ready dicts (pandas NA -> None, numpy scalars -> Python)."""
    out = []
    for rec in df.astype(object).to_dict("records"):
        clean = {}
        for k, v in rec.items():
            if v is None:
                clean[k] = None
            elif hasattr(v, "item"):
                clean[k] = v.item()
            else:
                try:
                    import pandas as pd

                    clean[k] = None if pd.isna(v) else v
                except (TypeError, ValueError):
                    clean[k] = v
        out.append(clean)
    return out


def summary_counts(results: list[LogResult]) -> dict:
    counts = {"logs": len(results), "crashed": 0, "explained": 0, "damaged": 0, "healthy": 0, "unreadable": 0}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    counts["findings"] = sum(len(r.findings) for r in results)
    return counts


# --------------------------------------------------------------------------- renderers


def render_table(batch: Batch, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    results = batch.results
    console = Console(file=out, width=None if out.isatty() else 160, highlight=False, emoji=False,
                      no_color=None if out.isatty() else True)  # None: rich honours NO_COLOR
    table = Table(title="Logs", header_style="bold", box=None, title_justify="left")
    for col in ("path", "lines", "vllm", "status", "rule", "severity", "line", "exception"):
        table.add_column(col, overflow="fold")
    style = {"crashed": "red", "explained": "cyan", "damaged": "yellow", "unreadable": "yellow", "healthy": "green"}
    for r in results[:MAX_TABLE_ROWS]:
        row = r.row()
        table.add_row(row["path"], str(row["lines"]), row["vllm_version"] or "", f"[{style[r.status]}]{r.status}[/]",
                      row["rule"] or "", row["severity"] or "", str(row["line"] or ""),
                      (row["exception"] or r.explained_text() or row["error"] or row["warning"] or "")[:100])
    console.print(table)
    if len(results) > MAX_TABLE_ROWS:
        console.print(f"… {len(results) - MAX_TABLE_ROWS} more logs (use --format csv or json)", style="dim")
    agg = rules_frame(results)
    if len(agg):
        console.print()
        rt = Table(title="By rule", header_style="bold", box=None, title_justify="left")
        for col in RULE_COLUMNS:
            rt.add_column(col.replace("_", " "), overflow="fold")
        for rec in _records(agg):
            rt.add_row(*["" if rec[c] is None else str(rec[c]) for c in RULE_COLUMNS])
        console.print(rt)
    c = summary_counts(results)
    console.print(f"\n{c['logs']} logs: {counts_text(c)}", style="dim")


def counts_text(c: dict) -> str:
    damaged = f"{c['damaged']} damaged, " if c["damaged"] else ""
    explained = f"{c['explained']} explained by another log, " if c.get("explained") else ""
    return f"{c['crashed']} crashed, {explained}{c['healthy']} healthy, {damaged}{c['unreadable']} unreadable"


def render_csv(batch: Batch, out: TextIO) -> None:
    logs_frame(batch.results).to_csv(out, index=False, lineterminator="\n")


def render_jsonl(batch: Batch, out: TextIO) -> None:
    for rec in _records(logs_frame(batch.results)):
        out.write(json.dumps({"schema": SCAN_SCHEMA, **rec}, ensure_ascii=False) + "\n")


def scan_document(batch: Batch) -> dict:
    logs = _records(logs_frame(batch.results))
    for rec, res in zip(logs, batch.results):
        rec["diagnoses"] = [{k: f[k] for k in ("rank", "rule", "kind", "severity", "line", "time", "exception",
                                                "fingerprint", "occurrences")} for f in res.findings]
        if res.explained_by:  # the roots in other logs that explain this log's symptoms
            rec["explained"] = res.explained_by
    from vcrash import __version__

    return {"schema": SCAN_SCHEMA, "vcrash_version": __version__, "rule_pack_version": batch.rule_pack_version,
            "summary": summary_counts(batch.results) | {"skipped": len(batch.skipped)}, "logs": logs,
            "rules": _records(rules_frame(batch.results)), "skipped": batch.skipped}


def render_json(batch: Batch, out: TextIO) -> None:
    json.dump(scan_document(batch), out, indent=2, ensure_ascii=False)
    out.write("\n")


def scan_renderer(fmt: str):
    local = {"table": render_table, "csv": render_csv, "json": render_json, "jsonl": render_jsonl}
    if fmt in local:
        return local[fmt]
    import importlib

    from vcrash.report import BATCH_RENDERERS

    module, name = BATCH_RENDERERS[fmt]
    return getattr(importlib.import_module(module), name)


def write_scan_outputs(batch: Batch, outputs: list[tuple[str, str | None]]) -> None:

    from vcrash.report import write_to

    for fmt, path in outputs:
        render = scan_renderer(fmt)
        write_to(path, lambda out, render=render: render(batch, out))


# --------------------------------------------------------------------------- the command


def parse_scan_outputs(specs: list[str]) -> list[tuple[str, str | None]]:
    from vcrash.report import parse_output_specs

    return parse_output_specs(specs, SCAN_FORMATS)


MAX_ERROR_LINES = 20


@one_line_errors
def scan_command(
    paths: List[str] = typer.Argument(..., metavar="PATH", help="Files, directories, globs (compressed logs too)."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", help=f"One of: {', '.join(SCAN_FORMATS)}."),
    output: List[str] = typer.Option([], "--output", "-o", metavar="FMT[=PATH]",
                                     help="Extra output; repeatable. Without PATH it goes to stdout."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="Parallel workers (default: CPU count)."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", help="error (default) | warning | note | never."),
    rules: List[str] = typer.Option([], "--rules", metavar="DIR", help="User rule folder; repeatable."),
    select: List[str] = typer.Option([], "--select", metavar="RULES", help=SELECT_HELP),
    ignore: List[str] = typer.Option([], "--ignore", metavar="RULES", help=IGNORE_HELP),
    redact: bool = typer.Option(True, "--redact/--no-redact", help="Redact prompts, tokens, keys, emails."),
    include: List[str] = typer.Option([], "--include", metavar="GLOB",
                                      help="Read only entries matching it (name or path under PATH); repeatable."),
    exclude: List[str] = typer.Option([], "--exclude", metavar="GLOB", help="Skip entries matching it; repeatable."),
    follow_symlinks: bool = typer.Option(False, "--follow-symlinks",
                                         help="Read file symlinks that lead out of the scanned folder."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List every skipped entry with its reason."),
    engine: str = typer.Option("local", "--engine", help="local (a process pool) | dask (a Dask cluster)."),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="ADDRESS",
                                            help="With --engine dask: the cluster's scheduler, e.g. "
                                                 "tcp://host:8786 (default: $DASK_SCHEDULER_ADDRESS, "
                                                 "else a local cluster)."),
):
    """Analyze every log under PATH (in parallel) and tabulate: one row per log, an aggregate by rule."""
    from vcrash.analyze import derived_rules
    from vcrash.cli import report_skipped, selection_options, settings_and_pack
    from vcrash.read import expand_inputs
    from vcrash.remote import public
    from vcrash.report import check_one_stdout
    from vcrash.scan_links import explain_across_logs

    if fail_on is not None and fail_on not in FAIL_LEVELS:
        raise typer.BadParameter(f"--fail-on must be one of {', '.join(FAIL_LEVELS)}")
    if fmt is not None and fmt not in SCAN_FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(SCAN_FORMATS)}")
    if jobs is not None and jobs < 1:
        raise typer.BadParameter("--jobs must be at least 1")
    if engine not in ENGINES:
        raise typer.BadParameter(f"--engine must be one of {', '.join(ENGINES)}")
    if scheduler is not None and engine != "dask":
        raise typer.BadParameter("--scheduler needs --engine dask")
    outputs = parse_scan_outputs(output)
    if fmt is None and not any(path is None for _, path in outputs):
        fmt = "table"
    if fmt is not None:
        outputs.insert(0, (fmt, None))
    check_one_stdout(outputs)
    if "-" in paths:
        raise typer.BadParameter("scan reads files and folders, not stdin (use 'vcrash analyze -')")
    settings, pack = settings_and_pack(select, ignore, fail_on, rules)  # warnings here, not in the workers
    skipped: list = []
    # special_files=False: a scan never opens a FIFO, device or socket, even one named on the command line.
    selection = selection_options(include, exclude, follow_symlinks, special_files=False)
    if engine == "dask":
        from vcrash.scan_dask import DaskEngine

        cluster = DaskEngine(scheduler, jobs)
    else:
        cluster = _nullcontext()
    with cluster as dask:
        sources = expand_inputs(paths, selection, skipped, list_map=dask.list_map if dask else None)
        if not sources:
            report_skipped(skipped, verbose)
            raise Fatal("no log files found in " + " ".join(public(p) for p in paths))
        progress = sys.stderr.isatty() and len(sources) > 1
        if dask is None:
            results = run_scan(sources, settings.rules, jobs=jobs, redact=redact, select=settings.select,
                               ignore=settings.ignore, progress=progress, skipped=skipped)
        else:
            if progress and dask.dashboard:
                sys.stderr.write(f"vcrash: Dask dashboard: {dask.dashboard}\n")
            results = dask.scan(sources, pack, select=settings.select, ignore=settings.ignore, redact=redact,
                                progress=progress, skipped=skipped)
    report_skipped(skipped, verbose)
    rules_by_id = {r.id: r for r in [*derived_rules(pack), *pack.rules]}
    explain_across_logs(results, rules_by_id)
    batch = Batch(results, rules_by_id, pack.version, skipped=[s.to_dict() for s in skipped])
    write_scan_outputs(batch, outputs)
    counts = summary_counts(results)
    if fmt != "table":
        sys.stderr.write(f"vcrash: scanned {counts['logs']} logs: {counts_text(counts)}\n")
    damaged = [r for r in results if r.warning and r.status != "unreadable"]
    for r in damaged[:MAX_ERROR_LINES]:
        sys.stderr.write(f"vcrash: warning: {r.warning}\n")
    if len(damaged) > MAX_ERROR_LINES:
        sys.stderr.write(f"vcrash: … and {len(damaged) - MAX_ERROR_LINES} more damaged logs\n")
    bad = [r for r in results if r.status == "unreadable"]
    for r in bad[:MAX_ERROR_LINES]:
        sys.stderr.write(f"vcrash: {r.error}\n")
    if len(bad) > MAX_ERROR_LINES:
        sys.stderr.write(f"vcrash: … and {len(bad) - MAX_ERROR_LINES} more unreadable logs\n")
    if bad:
        raise typer.Exit(2)
    severities = [f["severity"] for r in results for f in r.findings] + problem_severities(results)
    raise typer.Exit(fail_exit_code(severities, settings.fail_on))

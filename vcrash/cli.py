"""The typer app: thin commands that parse options, call the pipeline and render.

Exit codes (ruff's convention): 0 nothing at or above --fail-on, 1 at least one diagnosis at or
above it, 2 usage error, unreadable input, bad rule file or internal error — always one line on
stderr, never a traceback of vcrash's own.
"""

from __future__ import annotations

import os
import signal
import sys


def _is_program() -> bool:
    """This process is the vcrash program (`vcrash …` or `python -m vcrash …`), not an importer."""
    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    main_mod = sys.modules.get("__main__")
    return prog == "vcrash" or (prog == "__main__.py" and getattr(main_mod, "__package__", None) == "vcrash")


def _interrupted_at_start(signum, frame) -> None:
    # Ctrl-C while the imports below run (typer, rich, pandas for scan) comes before main()'s
    # try: without this it prints a Python traceback.
    os.write(2, b"vcrash: interrupted\n")
    os._exit(130)


if _is_program():
    signal.signal(signal.SIGINT, _interrupted_at_start)

import json  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import List, Optional  # noqa: E402

import typer  # noqa: E402

from vcrash import __version__
from vcrash.config import IGNORE_HELP, SELECT_HELP
from vcrash.errors import Fatal, one_line_errors, report_error, unknown_rule

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Why did the vLLM server die? Rebuild the crash from its log and say how to fix it.")
rules_app = typer.Typer(add_completion=False, no_args_is_help=True, help="List, show, lint and test rules.")
app.add_typer(rules_app, name="rules")

ANALYZE_FORMATS = ("rich", "text", "json", "jsonl", "markdown", "sarif", "junit", "github", "gitlab", "html")
FAIL_LEVELS = ("error", "warning", "note", "never")


def _err(message: str) -> None:
    report_error(message)


def _load_pack(rules_dirs: list[str] | None):
    """The bundled rules plus the given folders, else those of the project's settings file."""
    from vcrash.classify.rules import load_pack
    from vcrash.config import load_config

    pack = load_pack(rules_dirs or load_config().rules)
    warn_duplicates(pack)
    return pack


def warn_duplicates(pack) -> None:
    for rid, used, replaced in pack.duplicates:
        _err(f"warning: rule {rid!r} is defined twice in one folder: {used} replaces {replaced}")


def _renderers():
    from vcrash.report import RENDERERS

    return RENDERERS


def parse_outputs(specs: list[str]) -> list[tuple[str, str | None]]:
    from vcrash.report import parse_output_specs

    return parse_output_specs(specs, ANALYZE_FORMATS)


def exit_code_for(report, fail_on: str) -> int:
    if fail_on == "never":
        return 0
    order = {"error": 0, "warning": 1, "note": 2}
    limit = order[fail_on]
    severities = [d.rule.severity for d in report.diagnoses]
    severities += ["warning" for i in report.inputs if i.damaged]  # read only up to the damage
    return 1 if any(order[s] <= limit for s in severities) else 0


def settings_and_pack(select: list[str], ignore: list[str], fail_on: str | None, rules: list[str]):
    """The command line over [tool.vcrash] / vcrash.toml; the pack; selectors checked against it."""
    from vcrash.analyze import derived_rules
    from vcrash.classify.rules import load_pack
    from vcrash.config import check_selectors, resolve

    settings = resolve(select, ignore, fail_on, rules)
    pack = load_pack(settings.rules)  # a bad rule file stops here with exit 2, before any work
    warn_duplicates(pack)
    check_selectors([r.id for r in [*pack.rules, *derived_rules(pack)]], settings.select, settings.ignore)
    return settings, pack


def selection_options(include: list[str], exclude: list[str], follow_symlinks: bool, special_files: bool = True):
    from vcrash.read import Selection

    return Selection(tuple(include), tuple(exclude), follow_symlinks, special_files)


def report_skipped(skipped: list, verbose: bool) -> None:
    """Entries a walk passed over: each with its reason under --verbose, else one count line."""
    if verbose:
        for s in skipped:
            _err(f"skipped {s.path}: {s.reason}")
    elif skipped:
        _err(f"skipped {len(skipped)} entr{'y' if len(skipped) == 1 else 'ies'} in the given folders "
             "(--verbose lists them with the reason)")


def write_outputs(report, outputs: list[tuple[str, str | None]], redact: bool) -> None:
    from vcrash.redact import Redactor
    from vcrash.report import write_to

    renderers = _renderers()
    redactor = Redactor(enabled=redact)
    for fmt, path in outputs:
        render = renderers.get(fmt)
        if render is None:
            raise Fatal(f"format {fmt!r} is not available in this build")
        write_to(path, lambda out, render=render: render(report, out, redactor))


@app.command()
@one_line_errors
def analyze(
    logs: List[str] = typer.Argument(..., metavar="LOG...", help="Files, directories, globs, or - for stdin."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f", help=f"One of: {', '.join(ANALYZE_FORMATS)}."),
    output: List[str] = typer.Option([], "--output", "-o", metavar="FMT[=PATH]",
                                     help="Extra output; repeatable. Without PATH it goes to stdout."),
    rules: List[str] = typer.Option([], "--rules", metavar="DIR", help="User rule folder; repeatable."),
    fail_on: Optional[str] = typer.Option(None, "--fail-on", help="error (default) | warning | note | never."),
    select: List[str] = typer.Option([], "--select", metavar="RULES", help=SELECT_HELP),
    ignore: List[str] = typer.Option([], "--ignore", metavar="RULES", help=IGNORE_HELP),
    follow: bool = typer.Option(False, "--follow", "-F", help="Tail a growing log and report as crashes happen."),
    until_first: bool = typer.Option(False, "--until-first", help="With --follow: exit at the first root diagnosis."),
    redact: bool = typer.Option(True, "--redact/--no-redact", help="Redact prompts, tokens, keys, emails."),
    fast_path: str = typer.Option("auto", "--fast-path", help="auto | on | off: skip routine lines in bulk (auto: unless the input is a hard-wrapped paste; off: every line through the per-line path)."),
    include: List[str] = typer.Option([], "--include", metavar="GLOB",
                                      help="In folders and globs, read only entries matching it; repeatable."),
    exclude: List[str] = typer.Option([], "--exclude", metavar="GLOB",
                                      help="In folders and globs, skip entries matching it; repeatable."),
    follow_symlinks: bool = typer.Option(False, "--follow-symlinks",
                                         help="Read file symlinks that lead out of a walked folder."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="List every skipped entry with its reason."),
):
    """Rebuild the crash from vLLM server logs and rank its root cause above its symptoms."""
    from vcrash.analyze import Options, analyze as run_analyze
    from vcrash.read import expand_inputs
    from vcrash.report import check_one_stdout

    if fail_on is not None and fail_on not in FAIL_LEVELS:
        raise typer.BadParameter(f"--fail-on must be one of {', '.join(FAIL_LEVELS)}")
    if fast_path not in ("auto", "on", "off"):
        raise typer.BadParameter("--fast-path must be auto, on or off")
    if fmt is not None and fmt not in ANALYZE_FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(ANALYZE_FORMATS)}")
    outputs = parse_outputs(output)
    if fmt is None and not any(path is None for _, path in outputs):
        fmt = "rich" if sys.stdout.isatty() else "text"
    if fmt is not None:
        outputs.insert(0, (fmt, None))
    check_one_stdout(outputs)
    settings, pack = settings_and_pack(select, ignore, fail_on, rules)
    skipped: list = []
    sources = expand_inputs(logs, selection_options(include, exclude, follow_symlinks), skipped)
    report_skipped(skipped, verbose)
    if not sources:
        raise Fatal("no log files found in " + " ".join(logs))
    options = Options(fast={"auto": None, "on": True, "off": False}[fast_path], select=tuple(settings.select),
                      ignore=tuple(settings.ignore))
    if follow:
        from vcrash.follow import follow as run_follow
        from vcrash.read import remote_url

        if any(remote_url(s.path) for s in sources):
            raise typer.BadParameter("--follow tails local files, not URLs")

        report = run_follow(sources, pack, until_first=until_first, redact=redact, options=options)
    else:
        report = run_analyze(sources, pack, options)
    report.skipped = [s.to_dict() for s in skipped]
    write_outputs(report, outputs, redact)
    for inp in report.inputs:
        if inp.damaged and not inp.error:
            _err(f"warning: {inp.warning}")
    bad = [i for i in report.inputs if i.error]
    for inp in bad:
        _err(inp.error)
    if bad:
        raise typer.Exit(2)
    raise typer.Exit(exit_code_for(report, settings.fail_on))


@app.command()
@one_line_errors
def explain(
    rule_id: str = typer.Argument(..., metavar="RULE"),
    fmt: str = typer.Option("rich", "--format", "-f", help="rich | text | markdown."),
    rules: List[str] = typer.Option([], "--rules", metavar="DIR"),
):
    """The runbook for one rule: what happened, why, how to fix it, what to collect."""
    from vcrash.analyze import derived_rules
    from vcrash.runbook import render_runbook

    pack = _load_pack(rules)
    rule = pack.get(rule_id) or next((r for r in derived_rules(pack) if r.id == rule_id), None)
    if rule is None:
        raise unknown_rule(rule_id, [r.id for r in [*pack.rules, *derived_rules(pack)]])
    if fmt == "rich" and not sys.stdout.isatty():
        fmt = "text"
    if fmt not in ("rich", "text", "markdown"):
        raise typer.BadParameter("--format must be rich, text or markdown")
    render_runbook(rule, fmt, sys.stdout)


@rules_app.command("list")
@one_line_errors
def rules_list(
    rules: List[str] = typer.Option([], "--rules", metavar="DIR"),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json."),
):
    """The rules of the pack: id, kind, severity, samples, reproducer."""
    from rich.console import Console
    from rich.table import Table

    from vcrash.harness import default_samples_dir, discover, parse_sample

    pack = _load_pack(rules)
    counts: dict[str, int] = {}
    folder = default_samples_dir()
    # A user rule folder keeps its samples in DIR/samples/<rule-id>/*.log.
    user = sorted({Path(r.path).parent / "samples" for r in pack.rules if not r.bundled})
    for where in ([folder] if folder is not None else []) + [u for u in user if u.is_dir()]:
        for path in discover(where):
            for rid in set(parse_sample(path).expect) or {path.parent.name}:
                counts[rid] = counts.get(rid, 0) + 1
    rows = [{"id": r.id, "kind": r.kind, "severity": r.severity, "priority": r.priority,
             "samples": counts.get(r.id, 0), "reproducer": r.reproducer, "title": r.title,
             "source": "bundled" if r.bundled else r.path} for r in sorted(pack.rules, key=lambda r: r.id)]
    if fmt == "json":
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    table = Table(box=None, header_style="bold")
    for col in ("id", "kind", "severity", "samples", "reproducer", "title"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(row["id"], row["kind"], row["severity"], str(row["samples"]), "yes" if row["reproducer"] else "",
                      row["title"])
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    Console(stderr=True).print(f"{len(rows)} rules (pack {pack.version})", style="dim")


@rules_app.command("show")
@one_line_errors
def rules_show(rule_id: str = typer.Argument(..., metavar="RULE"),
               rules: List[str] = typer.Option([], "--rules", metavar="DIR")):
    """The rule file as loaded (TOML source)."""
    pack = _load_pack(rules)
    rule = pack.get(rule_id)
    if rule is None:
        raise unknown_rule(rule_id, [r.id for r in pack.rules])
    sys.stdout.write(f"# {rule.path}\n")
    sys.stdout.write(Path(rule.path).read_text(encoding="utf-8"))


@rules_app.command("lint")
@one_line_errors
def rules_lint(rules: List[str] = typer.Option([], "--rules", metavar="DIR"),
               fmt: str = typer.Option("text", "--format", "-f", help="text | json.")):
    """Check ids, required fields and doc headings, regexes, samples, and symptom coverage."""
    from vcrash.lint import lint_pack

    pack = _load_pack(rules)
    problems = lint_pack(pack)
    if fmt == "json":
        json.dump([{"rule": r, "problem": p} for r, p in problems], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for rid, problem in problems:
            sys.stdout.write(f"{rid}: {problem}\n")
        sys.stderr.write(f"{len(pack.rules)} rules, {len(problems)} problem(s)\n")
    raise typer.Exit(1 if problems else 0)


@rules_app.command("test")
@one_line_errors
def rules_test(
    path: Optional[Path] = typer.Argument(None, help="A sample file or folder (default: the project's samples/)."),
    bless_: bool = typer.Option(False, "--bless", help="Rewrite the markers from the current result."),
    rules: List[str] = typer.Option([], "--rules", metavar="DIR"),
    fmt: str = typer.Option("text", "--format", "-f", help="text | json."),
):
    """Run every sample against the whole pack and report per rule what passed."""
    from vcrash.classify.match import Matcher
    from vcrash.harness import bless, default_samples_dir, discover, parse_sample, run_sample

    pack = _load_pack(rules)
    folder = path or default_samples_dir()
    if folder is None or not folder.exists():
        raise Fatal("no samples folder found; pass a PATH")
    matcher = Matcher(pack)
    results = [run_sample(parse_sample(p), pack, matcher) for p in discover(folder)]
    if bless_:
        for res in results:
            if not res.ok:
                bless(res)
    per_rule: dict[str, list] = {}
    for res in results:
        owner = res.sample.path.parent.name if res.sample.path.parent != folder else (res.sample.expect or ["none"])[0]
        per_rule.setdefault(owner, []).append(res)
    failed = [r for r in results if not r.ok]
    if fmt == "json":
        json.dump({"samples": len(results), "failed": len(failed),
                   "results": [{"sample": str(r.sample.path), "ok": r.ok, "expected": r.sample.expect,
                                "got": r.got, "problems": r.problems} for r in results]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for owner in sorted(per_rule):
            rs = per_rule[owner]
            bad = [r for r in rs if not r.ok]
            mark = "ok  " if not bad else "FAIL"
            sys.stdout.write(f"{mark} {owner}  {len(rs) - len(bad)}/{len(rs)}\n")
            for r in bad:
                for p in r.problems:
                    sys.stdout.write(f"       {r.sample.path}: {p}\n")
        sys.stdout.write(f"{len(results) - len(failed)}/{len(results)} samples passed"
                         f"{' (blessed the failures)' if bless_ and failed else ''}\n")
    raise typer.Exit(1 if failed and not bless_ else 0)


def _mount_optional() -> None:
    """Subcommands that live in their own modules (added only when present).

    Run as the `vcrash` program with another subcommand named (`vcrash analyze small.log`),
    they are not imported at all: scan (pandas) and repro (rich tables) cost more start-up time
    than a small log takes to analyze. Imported as a module (tests, CliRunner), all are mounted.
    """
    wanted = _invoked_command()
    if wanted in (None, "scan"):
        try:
            from vcrash.scan import scan_command

            app.command("scan")(scan_command)
        except ImportError:
            pass
    if wanted in (None, "repro"):
        try:
            from vcrash.repro.cli import repro_app

            app.add_typer(repro_app, name="repro", help="Run a live vLLM reproducer for a rule.")
        except ImportError:
            pass


def _invoked_command() -> str | None:
    """The subcommand named on the command line when this process is the vcrash program; None
    when imported by other code or when no subcommand is named (help, --version)."""
    if not _is_program():
        return None
    for arg in sys.argv[1:]:
        if not arg.startswith("-"):
            return arg
        if arg in ("--help", "-h"):
            return None
    return None


_mount_optional()


@app.callback(invoke_without_command=True)
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.")):
    if version:
        sys.stdout.write(f"vcrash {__version__}\n")
        raise typer.Exit(0)


def main() -> None:
    if signal.getsignal(signal.SIGINT) is _interrupted_at_start:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, main's own handler
    from vcrash.classify.rules import RuleError
    from vcrash.collector import pace_for_batch_run
    from vcrash.read import InputError

    pace_for_batch_run()
    try:
        rc = app(standalone_mode=False)  # click returns the exit code instead of raising here
        sys.exit(rc if isinstance(rc, int) else 0)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (Fatal, RuleError, InputError) as exc:
        _err(str(exc))
        sys.exit(2)
    except typer.Abort:
        _err("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        _err("interrupted")
        sys.exit(130)
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        sys.exit(0)
    except Exception as exc:  # usage errors and anything unexpected: one line, exit 2
        # typer vendors click in some versions and depends on it in others: recognise its usage
        # errors by shape rather than by import.
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            _err(exc.format_message())
            sys.exit(2)
        if type(exc).__name__ == "Exit" and isinstance(getattr(exc, "exit_code", None), int):
            sys.exit(exc.exit_code)
        _err(f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
             " (please report it with the log that caused it)")
        sys.exit(2)

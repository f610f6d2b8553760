"""User-facing failures: one line on stderr and exit code 2, never a traceback of vcrash's own."""

from __future__ import annotations

import functools
import sys

import typer


class Fatal(Exception):
    """A one-line error for the user; exit code 2."""


def report_error(message: str) -> None:
    sys.stderr.write(f"vcrash: {message}\n")


def one_line_errors(func):
    """Known failures become one stderr line and exit 2 (also under CliRunner)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from vcrash.classify.rules import RuleError
        from vcrash.read import InputError

        try:
            return func(*args, **kwargs)
        except (Fatal, RuleError, InputError) as exc:
            report_error(str(exc))
            raise typer.Exit(2) from None

    return wrapper


def did_you_mean(name: str, known) -> str:
    """" (did you mean 'x'?)" for a near miss among the known ids, else ""."""
    import difflib

    known = list(known)
    close = [k for k in known if k.startswith(name + "-")][:1] or difflib.get_close_matches(name, known, n=1,
                                                                                           cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_rule(rule_id: str, known) -> Fatal:
    return Fatal(f"unknown rule {rule_id!r}{did_you_mean(rule_id, known)} (see 'vcrash rules list')")

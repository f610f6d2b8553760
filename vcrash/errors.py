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

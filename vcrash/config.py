"""Project settings, the way ruff reads them: `[tool.vcrash]` in the nearest `pyproject.toml`, or
the top level of a `vcrash.toml`, found by walking up from the current directory (in one
directory `vcrash.toml` wins; a `pyproject.toml` without `[tool.vcrash]` is passed over). Each key
given on the command line replaces the file's value for that run.

Rule selectors (`select`, `ignore`) are rule ids or id prefixes cut at a dash: `cuda-oom` stands
for every `cuda-oom-…` rule. Where a rule matches both lists the longer (more specific) selector
decides, and on a tie `ignore` wins.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from vcrash.errors import Fatal, did_you_mean

SELECT_HELP = "Report only these rules: ids or id prefixes (cuda-oom), comma-separated or repeated."
IGNORE_HELP = "Never report these rules: ids or id prefixes, comma-separated or repeated."
KEYS = ("select", "ignore", "fail-on", "rules")
FAIL_LEVELS = ("error", "warning", "note", "never")


@dataclass
class Config:
    path: Path | None = None
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str | None = None
    rules: list[str] = field(default_factory=list)  # folders, resolved against the file's folder


def find_config(start: Path | None = None) -> tuple[Path, dict] | None:
    """The nearest settings file from `start` upward and its vcrash table."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / "vcrash.toml"
        if own.is_file():
            return own, _read(own)
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            tool = _read(pyproject).get("tool", {})
            if isinstance(tool, dict) and "vcrash" in tool:
                return pyproject, tool["vcrash"]
    return None


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise Fatal(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise Fatal(f"{path}: cannot read: {exc.strerror or exc}") from None


def load_config(start: Path | None = None) -> Config:
    found = find_config(start)
    if found is None:
        return Config()
    path, table = found
    if not isinstance(table, dict):
        raise Fatal(f"{path}: [tool.vcrash] must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise Fatal(f"{path}: unknown vcrash setting(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    fail_on = table.get("fail-on")
    if fail_on is not None and fail_on not in FAIL_LEVELS:
        raise Fatal(f"{path}: fail-on must be one of {', '.join(FAIL_LEVELS)}")
    rules = [str((path.parent / p)) for p in _strings(table.get("rules"), path, "rules")]
    return Config(path, split_selectors(_strings(table.get("select"), path, "select")),
                  split_selectors(_strings(table.get("ignore"), path, "ignore")), fail_on, rules)


def _strings(value: object, path: Path, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise Fatal(f"{path}: {key} must be a string or a list of strings")


def split_selectors(values: list[str]) -> list[str]:
    """`--select a,b --select c` -> [a, b, c]."""
    return [part.strip().rstrip("-") for v in values for part in v.split(",") if part.strip().rstrip("-")]


def _match_length(rid: str, selectors: list[str]) -> int:
    return max((len(s) for s in selectors if rid == s or rid.startswith(s + "-")), default=-1)


def rule_selected(rid: str, select: list[str], ignore: list[str]) -> bool:
    chosen = _match_length(rid, select) if select else 0
    return chosen >= 0 and chosen > _match_length(rid, ignore)


def check_selectors(rule_ids: list[str], select: list[str], ignore: list[str]) -> None:
    """A selector that names no rule is a typo that would pass silently."""
    for option, selectors in (("select", select), ("ignore", ignore)):
        for s in selectors:
            if not any(r == s or r.startswith(s + "-") for r in rule_ids):
                prefixes = {"-".join(r.split("-")[:n]) for r in rule_ids for n in range(1, r.count("-") + 2)}
                raise Fatal(f"{option} {s!r} matches no rule{did_you_mean(s, sorted(prefixes))} "
                            "(see 'vcrash rules list')")


@dataclass
class Settings:
    """What a run uses: the command line over the file over the defaults."""

    select: list[str]
    ignore: list[str]
    fail_on: str
    rules: list[str]
    config: Path | None


def resolve(select: list[str], ignore: list[str], fail_on: str | None, rules: list[str]) -> Settings:
    cfg = load_config()
    fail = fail_on if fail_on is not None else (cfg.fail_on or "error")
    return Settings(split_selectors(select) if select else cfg.select,
                    split_selectors(ignore) if ignore else cfg.ignore,
                    fail, list(rules) if rules else cfg.rules, cfg.path)

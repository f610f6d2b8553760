"""Stage 5, report: renderers over the one report object. Machine formats are never wrapped."""

from __future__ import annotations

import json
from typing import Callable, TextIO

from vcrash.redact import Redactor
from vcrash.report.model import Report

Renderer = Callable[[Report, TextIO, Redactor], None]


def parse_output_specs(specs: list[str], formats: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """`-o FMT[=PATH]` options -> [(format, path or None for stdout)]."""
    import typer

    outs = []
    for spec in specs:
        fmt, _, path = spec.partition("=")
        fmt = fmt.strip().lower()
        if fmt not in formats:
            raise typer.BadParameter(f"unknown format {fmt!r} in -o {spec!r} (one of: {', '.join(formats)})")
        outs.append((fmt, path or None))
    return outs


def check_one_stdout(outputs: list[tuple[str, str | None]]) -> None:
    """Two formats written to stdout one after the other make a stream no parser accepts."""
    from vcrash.errors import Fatal

    on_stdout = [fmt for fmt, path in outputs if path in (None, "-")]
    if len(on_stdout) > 1:
        raise Fatal(f"{' and '.join(on_stdout)} would {'both' if len(on_stdout) == 2 else 'all'} go to stdout: "
                    "give all but one a path "
                    "(-o FMT=PATH)")


def write_to(path: str | None, write: Callable[[TextIO], None]) -> None:
    """Machine output goes to stdout (no path, or "-") or to the file, never wrapped."""
    import sys

    from vcrash.errors import Fatal

    if path in (None, "-"):
        write(sys.stdout)
        sys.stdout.flush()
        return
    try:
        with open(path, "w", encoding="utf-8", newline="") as fh:
            write(fh)
    except OSError as exc:
        raise Fatal(f"cannot write {path}: {exc.strerror or exc}") from None


def render_json(report: Report, out: TextIO, redactor: Redactor) -> None:
    # Indented for a person at a terminal; compact for pipes and files, where the C encoder
    # writes a 100 K-traceback report in a second instead of half a minute.
    if getattr(out, "isatty", lambda: False)():
        out.write(json.dumps(report.to_dict(redactor), indent=2, ensure_ascii=False) + "\n")
        return
    # Key by key and list item by item: neither the text nor the dicts of a huge report are
    # ever held whole.
    data = report.to_dict(redactor, lazy=True)
    encode = json.JSONEncoder(ensure_ascii=False).encode  # one encoder, not one per item
    json_texts = getattr(report.tracebacks, "json_texts", None)
    stream_texts = getattr(report.streams, "json_texts", None)
    shown = redactor if redactor.enabled else None
    shared = None
    if json_texts is not None:
        from vcrash.report import forked

        count = len(report.tracebacks)
        if forked.wanted(count):
            # A huge list: a second process writes it from the back while this one writes the
            # streams, then the list from the front (the same text, byte for byte).
            shared = forked.SharedList(-(-count // BATCH), lambda batch: ", ".join(
                json_texts(encode, shown, batch * BATCH, (batch + 1) * BATCH)), out)
    try:
        out.write("{")
        for i, (key, value) in enumerate(data.items()):
            out.write(("," if i else "") + json.dumps(key) + ":")
            if key == "tracebacks" and json_texts is not None:
                # Spooled tracebacks are written from their records (the same text, no dict each).
                if shared is not None:
                    out.write("[")
                    shared.write_into(out)
                    out.write("]")
                else:
                    _write_list(out, _joined(json_texts(encode, shown)))
            elif key == "streams" and stream_texts is not None:
                _write_list(out, _joined(stream_texts()))
            elif not isinstance(value, (list, dict, str, int, float, bool, type(None))) or \
                    isinstance(value, list) and len(value) > 256:
                # Items encoded and written 512 at a time (one C encoder call per batch): one call
                # per item cost a second over 300 K of them.
                _write_list(out, (encode(batch)[1:-1] for batch in _batches(value)))
            else:
                out.write(encode(value))
        out.write("}\n")
    finally:
        if shared is not None:
            shared.close()


BATCH = 512


def _joined(texts):
    return (", ".join(batch) for batch in _batches(texts))


def _batches(items, size: int | None = None):
    size = size or BATCH  # looked up now: a test makes batches small
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _write_list(out: TextIO, parts) -> None:
    """A JSON list from the texts of its items, a batch at a time ("a, b" each)."""
    out.write("[")
    for i, part in enumerate(parts):
        out.write(("," if i else "") + part)
    out.write("]")


def render_jsonl(report: Report, out: TextIO, redactor: Redactor) -> None:
    """One diagnosis per line (healthy logs write nothing), for log shippers and jq."""
    data = report.to_dict(redactor, lazy=True)  # no dict per traceback: only diagnoses are written
    for diag in data["diagnoses"]:
        out.write(json.dumps({"schema": data["schema"], **diag}, ensure_ascii=False) + "\n")


def render_text(report: Report, out: TextIO, redactor: Redactor) -> None:
    from vcrash.report.terminal import render_terminal

    render_terminal(report, out, redactor, color=False)


def render_rich(report: Report, out: TextIO, redactor: Redactor) -> None:
    from vcrash.report.terminal import render_terminal

    render_terminal(report, out, redactor, color=True)


def _lazy(module: str, name: str) -> Renderer:
    """A renderer imported on first use (keeps `vcrash --help` fast)."""

    def render(report: Report, out: TextIO, redactor: Redactor) -> None:
        import importlib

        getattr(importlib.import_module(module), name)(report, out, redactor)

    render.__name__ = name
    return render


RENDERERS: dict[str, Renderer] = {
    "json": render_json,
    "jsonl": render_jsonl,
    "text": render_text,
    "rich": render_rich,
    "markdown": _lazy("vcrash.report.markdown", "render_markdown"),
    "sarif": _lazy("vcrash.report.sarif", "render_sarif"),
    "junit": _lazy("vcrash.report.junit", "render_junit"),
    "github": _lazy("vcrash.report.github", "render_github"),
    "gitlab": _lazy("vcrash.report.gitlab", "render_gitlab"),
    "html": _lazy("vcrash.report.html", "render_html"),
}

# The same CI formats over a `findings.Batch` (many logs: `vcrash scan`); module, function.
BATCH_RENDERERS: dict[str, tuple[str, str]] = {
    "markdown": ("vcrash.report.markdown", "render_markdown_batch"),
    "sarif": ("vcrash.report.sarif", "render_sarif_batch"),
    "junit": ("vcrash.report.junit", "render_junit_batch"),
    "github": ("vcrash.report.github", "render_github_batch"),
    "gitlab": ("vcrash.report.gitlab", "render_gitlab_batch"),
    "html": ("vcrash.report.html", "render_html_batch"),
}

"""Shared by test_html.py and test_browser.py: the HTML pages rendered from frozen inputs.

tests/data/html/logs/ are copies of two samples (samples/v1-execute-model-rpc-timeout/
constructed-0.12-tp2-hung.log, samples/cuda-oom-runtime-forward/v0.14-tp2-compose-both-ranks.log)
with the harness header removed, and tests/data/html/rules/ a frozen copy of the rules they need,
so a change to the bundled pack never moves these goldens.
"""

from __future__ import annotations

import io
from html.parser import HTMLParser
from pathlib import Path

from vcrash.analyze import analyze
from vcrash.classify.rules import load_pack
from vcrash.read import expand_inputs
from vcrash.redact import Redactor
from vcrash.report import RENDERERS

HTML_DATA = Path(__file__).parent / "data" / "html"
HTML_LOGS = HTML_DATA / "logs"
HTML_RULES = HTML_DATA / "rules"
VOID = {"meta", "br", "hr", "img", "input", "link", "source", "wbr", "col", "area", "base", "embed", "track"}


def html_pack():
    return load_pack([str(HTML_RULES)], include_bundled=False)


def analyze_html(paths: list[str], pack=None, redact: bool = True) -> str:
    report = analyze(expand_inputs(paths), pack or html_pack())
    buf = io.StringIO()
    RENDERERS["html"](report, buf, Redactor(enabled=redact))
    return buf.getvalue()


class _Tree(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root: list = ["#document", []]
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = [_label(tag, dict(attrs)), []]
        self.stack[-1][1].append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1][1].append([_label(tag, dict(attrs)), []])

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i][0].split("#")[0].split(".")[0].split("[")[0] == tag:
                del self.stack[i:]
                return
        raise AssertionError(f"</{tag}> closes nothing")


def _label(tag: str, attrs: dict) -> str:
    label = tag
    if attrs.get("id"):
        label += "#" + attrs["id"]
    label += "".join("." + c for c in (attrs.get("class") or "").split())
    if tag == "a":
        label += "[#]" if (attrs.get("href") or "").startswith("#") else "[external]"
    if tag == "details" and "open" in attrs:
        label += "[open]"
    return label


def outline(html: str) -> str:
    """Elements with their ids and classes, indented; identical neighbours folded into `×N`.
    Text, coordinates and styles are left out: this is the page's structure."""
    tree = _Tree()
    tree.feed(html)
    tree.close()
    assert len(tree.stack) == 1, f"unclosed elements: {[n[0] for n in tree.stack[1:]]}"
    lines: list[str] = []
    _emit(tree.root[1], 0, lines)
    return "\n".join(lines) + "\n"


def _emit(children: list, depth: int, lines: list[str]) -> None:
    i = 0
    while i < len(children):
        j = i + 1
        while j < len(children) and children[j] == children[i]:
            j += 1
        label = children[i][0] + (f" ×{j - i}" if j - i > 1 else "")
        lines.append("  " * depth + label)
        _emit(children[i][1], depth + 1, lines)
        i = j

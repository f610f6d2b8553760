"""The HTML report in a real browser: headless Chromium opens the pages at a desktop and a phone
size, with no console errors (a blocked fetch or a CSP violation counts), the root lane visible,
the page readable with JavaScript off; screenshots at 1280x800 and 390x844.

`.ci/run` installs Chromium (apt) and websocket-client (the `browser` extra), so CI runs these;
set VCRASH_SCREENSHOTS=DIR to keep the screenshots (docs/report-html.png comes from there).
"""

from __future__ import annotations

import os
import shutil
import struct

import pytest

from browser_support import Chromium, find_chromium
from html_support import HTML_LOGS, analyze_html
from test_html import scan_html

pytestmark = pytest.mark.browser
pytest.importorskip("websocket", reason="websocket-client is missing: pip install -e '.[browser]'")
CHROMIUM = find_chromium()
if CHROMIUM is None:
    pytest.skip("Chromium not found (apt-get install chromium, or set VCRASH_CHROMIUM)", allow_module_level=True)

SIZES = [(1280, 800), (390, 844)]
ROOT_LANE = """(() => {
  const lane = document.querySelector('svg.lanes .root-lane');
  const mark = document.querySelector('svg.lanes .mark-root');
  if (!lane || !mark) return null;
  const hit = (el) => {
    const r = el.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    const inside = x >= 0 && y >= 0 && x < innerWidth && y < innerHeight;
    const top = inside ? document.elementFromPoint(x, y) : null;
    return {inside, onTop: !!top && (el.contains(top) || top === el), w: r.width, h: r.height};
  };
  const before = {label: hit(lane.querySelector('.lane-name')), mark: hit(mark)};
  mark.scrollIntoView({block: 'center', inline: 'center'});
  return {before, after: {label: hit(lane.querySelector('.lane-name')), mark: hit(mark)},
          laneName: lane.querySelector('.lane-name').textContent,
          pageWidth: document.documentElement.scrollWidth, viewport: innerWidth};
})()"""


@pytest.fixture(scope="module")
def browser():
    b = Chromium(CHROMIUM)
    yield b
    b.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("html")
    cwd = os.getcwd()
    os.chdir(HTML_LOGS)
    try:
        (folder / "analyze.html").write_text(analyze_html(["tp2-hung.log"]), encoding="utf-8")
    finally:
        os.chdir(cwd)
    from formats_support import make_workspace

    ws = tmp_path_factory.mktemp("scan")
    make_workspace(ws, unreadable=False)
    os.chdir(ws)
    try:
        (folder / "scan.html").write_text(scan_html(["logs"]), encoding="utf-8")
    finally:
        os.chdir(cwd)
    return folder


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def keep(path) -> None:
    target = os.environ.get("VCRASH_SCREENSHOTS")
    if target:
        os.makedirs(target, exist_ok=True)
        shutil.copy(path, target)


def shoot(page, tmp_path, name: str, size) -> None:
    """A screenshot at `size`, kept where VCRASH_SCREENSHOTS says."""
    shot = tmp_path / f"{name}-{size[0]}x{size[1]}.png"
    page.screenshot(shot)
    keep(shot)
    assert png_size(shot) == size


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_analyze_page(browser, pages, size, tmp_path):
    page = browser.open((pages / "analyze.html").as_uri(), *size)
    shoot(page, tmp_path, "analyze", size)
    state = page.evaluate(ROOT_LANE)
    assert page.console_errors() == []
    assert state is not None, "no root lane or root mark in the page"
    assert state["laneName"] == "EngineCore_DP0"
    assert state["pageWidth"] <= state["viewport"], "the page scrolls sideways (only the picture may)"
    if size[0] >= 1000:  # a desktop: the root lane and the root itself are on the first screen
        assert state["before"]["label"]["inside"] and state["before"]["label"]["onTop"], state
        assert state["before"]["mark"]["inside"] and state["before"]["mark"]["onTop"], state
    assert state["after"]["mark"]["inside"] and state["after"]["mark"]["onTop"], state
    assert state["after"]["mark"]["w"] >= 10, "the root mark is too small to see"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_scan_page(browser, pages, size, tmp_path):
    page = browser.open((pages / "scan.html").as_uri(), *size)
    shoot(page, tmp_path, "scan", size)
    assert page.console_errors() == []
    bars = page.evaluate("[...document.querySelectorAll('svg.bars .bar')].map(b => b.getBoundingClientRect().width)")
    assert bars and all(w > 0 for w in bars)
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")


def test_readable_without_javascript(browser, pages):
    page = browser.open((pages / "analyze.html").as_uri(), 1280, 800, javascript=False)
    text = page.evaluate("document.body.innerText")
    assert "TimeoutError: RPC call to execute_model timed out." in text  # the open <details>
    assert "How to fix it" in text
    assert page.console_errors() == []


def test_console_errors_are_caught(browser, tmp_path):
    """Guard against a vacuous check: a page that tries to fetch under the same policy logs an error."""
    from vcrash.report.html import CSP

    bad = tmp_path / "bad.html"
    bad.write_text(f'<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="{CSP}">'
                   '<img src="https://example.invalid/x.png">', encoding="utf-8")
    page = browser.open(bad.as_uri(), 800, 600)
    assert page.console_errors(), "a blocked fetch went unnoticed"

"""`--format html` for analyze and scan: golden outlines of the page structure, a self-contained
page (nothing fetched, no script), escaping, redaction, the swim-lane picture's content (root,
linked symptoms, restarts, liveness and deadline, zoom, the line axis) and the scan summary."""

from __future__ import annotations

import io
import re
from collections import Counter

import pytest
from typer.testing import CliRunner

from formats_support import RULES, check_golden, make_workspace
from html_support import HTML_LOGS, HTML_RULES, analyze_html, outline
from vcrash.cli import app
from vcrash.classify.rules import load_pack
from vcrash.read import expand_inputs
from vcrash.report.findings import Batch
from vcrash.scan import run_scan, scan_renderer

SECRET = "hf_abcdefghijklmnopqrstuvwxyz012345"


@pytest.fixture()
def ws(tmp_path, monkeypatch):
    make_workspace(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture()
def here(monkeypatch):
    """Relative paths in the page (the goldens must not hold this machine's paths)."""
    monkeypatch.chdir(HTML_LOGS)


def scan_html(paths, redact: bool = True) -> str:
    skipped = []
    pack = load_pack([str(RULES)], include_bundled=False)
    results = run_scan(expand_inputs(paths, skipped=skipped), [str(RULES)], include_bundled=False, jobs=1,
                       redact=redact)
    batch = Batch(results, {r.id: r for r in pack.rules}, pack.version, skipped=[s.to_dict() for s in skipped])
    buf = io.StringIO()
    scan_renderer("html")(batch, buf)
    return buf.getvalue()


def classes(html: str) -> Counter:
    return Counter(c for attr in re.findall(r'class="([^"]*)"', body(html)) for c in attr.split())


def lane_svg(html: str) -> str:
    """The swim-lane picture alone (the legend under it has one swatch of each mark)."""
    return re.search(r'<svg class="lanes".*?</svg>', html, re.S).group(0)


def body(html: str) -> str:
    """The page without its stylesheet (which names every class)."""
    return html.split("<body>", 1)[-1]


# -- golden structure ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tp2-hung", "tp2-oom"])
def test_golden_outline_analyze(here, name):
    check_golden(f"html/analyze-{name}.outline", outline(analyze_html([f"{name}.log"])))


def test_golden_outline_scan(ws):
    check_golden("html/scan.outline", outline(scan_html(["logs", "logs/vanished.log"])))


def test_golden_outline_healthy(ws):
    html = analyze_html(["logs/healthy.log"], load_pack([str(RULES)], include_bundled=False))
    check_golden("html/analyze-healthy.outline", outline(html))


def test_outline_folds_repeats_and_rejects_broken_markup():
    assert outline("<ul><li>a</li><li>b</li></ul>") == "ul\n  li ×2\n"
    with pytest.raises(AssertionError):
        outline("<div><p>x</div></span>")


# -- self-contained and safe ----------------------------------------------------------------------


def assert_self_contained(html: str) -> None:
    assert html.startswith("<!DOCTYPE html>")
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    lowered = html.lower()
    for needle in ("<script", "<link", "<iframe", "<object", "<embed", "<img", "@import", "javascript:"):
        assert needle not in lowered, needle
    assert not re.search(r"url\((?!#)", lowered), "a url() other than a reference inside the page"
    assert not re.search(r"<[a-z][^>]*\s(src|srcset|on[a-z]+)=", lowered), "an attribute that fetches or runs code"
    # Links either stay in the page or are rule references (never fetched).
    for href in re.findall(r'href="([^"]*)"', html):
        assert href.startswith(("#", "https://", "http://")), href
    for tag in re.findall(r'<a href="http[^>]*>', html):
        assert 'rel="noopener noreferrer"' in tag


def test_analyze_page_is_self_contained(here):
    assert_self_contained(analyze_html(["tp2-hung.log", "tp2-oom.log"]))


def test_scan_page_is_self_contained(ws):
    assert_self_contained(scan_html(["logs", "logs/vanished.log"]))


def test_log_text_is_escaped(tmp_path):
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    log = tmp_path / "evil.log"
    log.write_text(
        "(EngineCore_DP0 pid=9) ERROR 10-14 09:13:05 [core.py:710] EngineCore encountered a fatal error.\n"
        "(EngineCore_DP0 pid=9) ERROR 10-14 09:13:05 [core.py:710] Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=9) ERROR 10-14 09:13:05 [core.py:710]   File "/x/vllm/v1/engine/core.py", line 1, in f\n'
        f"(EngineCore_DP0 pid=9) ERROR 10-14 09:13:05 [core.py:710]     raise RuntimeError('{evil}')\n"
        f"(EngineCore_DP0 pid=9) ERROR 10-14 09:13:05 [core.py:710] RuntimeError: {evil}\n")
    html = analyze_html([str(log)], load_pack([str(RULES)], include_bundled=False))
    assert "alert(1)" in html, "the message never reached the page: the test would prove nothing"
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert_self_contained(html)


def test_rule_references_link_only_web_addresses(tmp_path, here):
    rules = tmp_path / "rules"
    rules.mkdir()
    for src in HTML_RULES.iterdir():
        text = src.read_text(encoding="utf-8")
        if src.name == "v1-execute-model-rpc-timeout.toml":
            text = re.sub(r"references = \[", 'references = ["javascript:alert(3)", ', text, count=1)
        (rules / src.name).write_text(text, encoding="utf-8")
    html = analyze_html(["tp2-hung.log"], load_pack([str(rules)], include_bundled=False))
    assert "javascript:alert(3)" in html and 'href="javascript' not in html


def test_scan_page_redacts(ws):
    assert SECRET not in scan_html(["logs/unknown-crash.log"])
    assert SECRET in scan_html(["logs/unknown-crash.log"], redact=False)


# -- the swim lanes ---------------------------------------------------------------------------------


def test_timeout_page_shows_root_symptoms_liveness_and_deadline(here):
    html = analyze_html(["tp2-hung.log"])
    c = classes(lane_svg(html))
    assert c["lane"] == 4  # API server, engine core, two workers
    assert c["root-lane"] == 1
    root_lane = re.search(r'<g class="lane root-lane"[^>]*data-stream="([^"]*)"', html).group(1)
    assert root_lane.endswith(":EngineCore_DP0:201")
    assert c["mark-root"] == 1 and c["mark-symptom"] == 2
    assert c["link"] == 2  # each symptom linked to the root
    assert c["mark-stall"] >= 2 and c["mark-progress"] >= 1 and c["last-progress"] == 1
    assert c["deadline-band"] == 1
    assert "deadline 300s (default VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS)" in html
    # The deadline sits on the lane of the process the timeout gave up on.
    lanes = re.findall(r'data-stream="([^"]*)"><rect class="lane-bg[^"]*" x="0" y="([\d.]+)" width="\d+" '
                       r'height="([\d.]+)"', html)
    band_y = float(re.search(r'<rect class="deadline-band" x="[\d.]+" y="([\d.]+)"', html).group(1))
    band_lane = [sid for sid, top, h in lanes if float(top) <= band_y < float(top) + float(h)]
    assert len(band_lane) == 1 and band_lane[0].endswith(":Worker_TP1:261")
    for heading in ("Root traceback", "Symptoms it explains", "Liveness: hung", "How to fix it", "Version advice",
                    "Reproduce"):
        assert heading in html, heading
    assert "vcrash repro run v1-execute-model-rpc-timeout" in html
    assert '<details id="root-traceback" open>' in html
    assert "TimeoutError: RPC call to execute_model timed out." in html


def test_deadline_band_spans_the_timeout_before_the_root(here):
    html = analyze_html(["tp2-hung.log"])
    band = re.search(r'<rect class="deadline-band" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', html)
    root = re.search(r'<circle class="root-ring" cx="([\d.]+)"', html)
    x0, width, xr = float(band.group(1)), float(band.group(2)), float(root.group(1))
    assert abs(x0 + width - xr) < 1  # ends where the timeout fired
    # 300 s of the 391 s shown (plus a 3% margin each side) on a 730-unit plot.
    assert 300 / 391 * 730 / 1.06 - 5 < width < 300 / 391 * 730 / 1.06 + 5


def test_multi_process_crash_links_symptoms_across_lanes(here):
    html = analyze_html(["tp2-oom.log"])
    c = classes(lane_svg(html))
    assert c["mark-root"] == 1 and c["mark-symptom"] == 2 and c["link"] == 2
    assert c["deadline-band"] == 0 and "Liveness" not in html
    symptoms = re.findall(r'<li><code>([a-z0-9-]+)</code>', html.split('id="symptoms"')[1].split("</ul>")[0])
    assert symptoms == ["v1-worker-failed-cascade", "engine-dead"]


def test_restart_crosses_the_lanes(ws):
    log = ws / "restarted.log"
    # vLLM restarted after the crash (a supervisor, a k8s restart writing to the same file).
    log.write_text((ws / "logs/structured-output.log").read_text() + (ws / "logs/healthy.log").read_text())
    html = analyze_html([str(log)], load_pack([str(RULES)], include_bundled=False))
    assert classes(html)["restart"] == 1
    assert "server-start (restart)" in html


def test_long_log_zooms_to_the_crash_window(ws):
    early = "(APIServer pid=2738512) INFO 10-14 06:00:00 [api_server.py:1839] vLLM API server version 0.11.0\n"
    log = ws / "long.log"
    log.write_text(early + (ws / "logs/structured-output.log").read_text())
    html = analyze_html([str(log)], load_pack([str(RULES)], include_bundled=False))
    assert "Zoomed to the crash window." in html
    assert re.search(r"Left out: \d+ earlier marks? \(line 1, 10-14 06:00:00", html)
    assert '<tr id="ev-1" class="outside">' in html  # still listed in the table
    # The same log without the early line fits whole.
    short = analyze_html(["logs/structured-output.log"], load_pack([str(RULES)], include_bundled=False))
    assert "Zoomed" not in short and 'class="outside"' not in short


def test_log_without_timestamps_is_laid_out_by_line(tmp_path):
    log = tmp_path / "bare.log"
    log.write_text("Traceback (most recent call last):\n"
                   '  File "/srv/app.py", line 3, in <module>\n'
                   "    main()\n"
                   "RuntimeError: engine died\n")
    html = analyze_html([str(log)], load_pack([str(RULES)], include_bundled=False))
    assert ">log line</text>" in html
    assert "positions are log lines" in html
    assert classes(lane_svg(html))["mark-root"] == 1


def test_healthy_log_says_so(ws):
    html = analyze_html(["logs/healthy.log"], load_pack([str(RULES)], include_bundled=False))
    assert "no crash found" in html and "root-lane" not in body(html)


# -- scan --------------------------------------------------------------------------------------------


def test_scan_page_bars_rows_and_sections(ws):
    html = scan_html(["logs", "logs/vanished.log"])
    rows = re.findall(r'<g class="bar-row"><title>([^:]+): (\d+) findings in (\d+) logs?</title>', html)
    assert rows, "no bars"
    counts = [int(n) for _, n, _ in rows]
    assert counts == sorted(counts, reverse=True)
    assert dict((r, int(n)) for r, n, _ in rows)["structured-output-no-valid-param"] == 1
    logs_table = html.split('id="logs"')[1].split("</table>")[0]
    assert logs_table.count("<tr>") == 1 + 7  # the header and one row per log (7 with the unreadable one)
    for anchor in re.findall(r'<a href="#(log-\d+)">', logs_table):
        assert f'id="{anchor}"' in html
    assert "unreadable" in logs_table and "healthy" in logs_table
    assert "first seen" in html and "10-14 09:13:05" in html


# -- the CLI -----------------------------------------------------------------------------------------


def test_cli_analyze_and_scan_write_html(ws):
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", "logs/structured-output.log", "--rules", str(RULES), "--format", "html"])
    assert res.exit_code == 1, res.output
    assert res.stdout.startswith("<!DOCTYPE html>") and res.stdout.rstrip().endswith("</html>")
    out = ws / "report.html"
    res = runner.invoke(app, ["scan", "logs", "--rules", str(RULES), "-j", "1", "-o", f"html={out}",
                              "--format", "csv"])
    assert res.exit_code == 1, res.output
    assert res.stdout.startswith("path,") and out.read_text().startswith("<!DOCTYPE html>")

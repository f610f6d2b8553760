"""One engine: the bulk scan gives the same report as the per-line path, on every sample (read
from its first byte, without the start-up prefix that is normally read in full) and on generated
server logs of every traffic mix."""

from pathlib import Path

import pytest

import vcrash.analyze as pipeline
from vcrash.classify.rules import load_pack
from vcrash.read import Source
from vcrash.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()


def both_ways(path: Path) -> tuple[dict, dict]:
    source = [Source(str(path), str(path))]
    full = pipeline.analyze(source, PACK, pipeline.Options(fast=False)).to_dict(Redactor(True))
    fast = pipeline.analyze(source, PACK, pipeline.Options(fast=True)).to_dict(Redactor(True))
    for report in (full, fast):  # both count lines; only the fast path counts examined ones
        report.pop("inputs")
        report.pop("streams")
    return full, fast


def mended(path: Path) -> bool:
    """A paste that analyze mends line by line (hard-wrapped, double-spaced, padded wraps): the
    bulk scan is never asked to read it."""
    from vcrash.split.reflow import SNIFF_LINES, needs_mending
    return needs_mending(path.read_text(errors="replace").split("\n")[:SNIFF_LINES])


SAMPLES = sorted((ROOT / "samples").rglob("*.log"))
BULK_READ = [p for p in SAMPLES if not mended(p)]


def test_mended_pastes_are_few():
    assert len(SAMPLES) - len(BULK_READ) <= 3, [p.name for p in SAMPLES if mended(p)]


@pytest.mark.parametrize("path", BULK_READ, ids=lambda p: p.parent.name + "/" + p.name)
def test_sample_same_report_both_ways(path, monkeypatch):
    monkeypatch.setattr(pipeline, "FULL_PREFIX_LINES", 0)
    full, fast = both_ways(path)
    assert [k for k in full if full[k] != fast[k]] == []


@pytest.mark.parametrize("path", BULK_READ, ids=lambda p: p.parent.name + "/" + p.name)
def test_sample_same_report_with_the_start_up_census(path, monkeypatch):
    """With the start-up prefix (its needle-less lines only counted and timed), the report is the
    per-line one; within the prefix even the process streams and their line counts are."""
    monkeypatch.setattr(pipeline, "CENSUS_MIN_BYTES", 0)
    source = [Source(str(path), str(path))]
    full = pipeline.analyze(source, PACK, pipeline.Options(fast=False)).to_dict(Redactor(True))
    fast = pipeline.analyze(source, PACK, pipeline.Options(fast=True)).to_dict(Redactor(True))
    for report in (full, fast):
        for item in report["inputs"]:
            item.pop("examined_lines")
        if full["inputs"][0]["lines"] > pipeline.FULL_PREFIX_LINES:
            report.pop("streams")
    assert [k for k in full if full[k] != fast[k]] == []


@pytest.mark.parametrize("stamp", ["", "2025-10-09T08:53:{s:02d}.{n:09d}Z ", "2025-10-09T08:53:{s:02d}.{n:09d}Z stdout F "])
def test_the_census_splits_a_process_s_start_up_lines_once(tmp_path, monkeypatch, stamp):
    """The census lists a process from its tag: a container runtime's time before it (different
    on every line) must not make it split each start-up line again."""
    from vcrash.split import Splitter

    monkeypatch.setattr(pipeline, "CENSUS_MIN_BYTES", 0)
    calls = []
    split = Splitter.split
    monkeypatch.setattr(Splitter, "split", lambda self, *a: calls.append(a[0]) or split(self, *a))
    log = tmp_path / "server.log"
    log.write_text("".join(stamp.format(s=i % 60, n=i) + f"(EngineCore_DP0 pid=7) INFO 10-09 08:53:{i % 60:02d} "
                           f"[gpu_model_runner.py:{i}] step {i} done\n" for i in range(250)))
    report = pipeline.analyze([Source(str(log), str(log))], PACK)
    assert [st.lines for st in report.streams] == [250]
    assert len(calls) < 10, len(calls)  # the first line, and the last's time


def test_a_paste_is_read_in_full(tmp_path):
    """A small input's start-up prefix is no census: a root quoted in prose (no level, no needle:
    only the per-line path's message rules see it) is still found."""
    paste = tmp_path / "paste.log"
    paste.write_text("my server will not start, it says:\n"
                     "Value error, Total number of attention heads (28) must be divisible by tensor "
                     "parallel size (8)\n"
                     "(APIServer pid=7) INFO 10-09 08:53:20 [utils.py:233] non-default args: {'model': 'x'}\n")
    report = pipeline.analyze([Source(str(paste), str(paste))], PACK)
    assert report.diagnoses and report.diagnoses[0].rule.id == "tensor-parallel-size-not-divisor"


@pytest.mark.parametrize("mix", ["default", "warning-heavy", "request-log-heavy", "tp8", "crash-worded-prompts",
                                 "client-aborts"])
def test_generated_log_same_report_both_ways(mix, tmp_path, gen_log):
    log = tmp_path / f"{mix}.log"
    gen_log.main([str(log), "--size", "3M", "--crashes", "5", "--seed", "11", "--mix", mix])
    full, fast = both_ways(log)
    assert full["diagnoses"], "the generated log should hold crashes"
    assert [k for k in full if full[k] != fast[k]] == []


@pytest.mark.parametrize("mix", ["default", "warning-heavy", "request-log-heavy", "restarts", "tp8", "client-aborts"])
def test_the_bulk_scan_reads_few_lines_of_healthy_traffic(mix, tmp_path, gen_log):
    """A rule token that routine lines hold (a module's file name in every INFO line it logs)
    makes the bulk scan read them all: the tp8 mix's 'Registering N cuda graph addresses' lines
    once sent 7.6% of a healthy log through the per-line path, and a 1 GB log to 20x grep."""
    log = tmp_path / f"{mix}.log"
    gen_log.main([str(log), "--size", "10M", "--crashes", "0", "--seed", "3", "--mix", mix])
    (summary,) = pipeline.analyze([Source(str(log), str(log))], PACK).inputs
    assert summary.examined_lines < 0.02 * summary.lines, (summary.examined_lines, summary.lines)


def test_observer_memo_never_hides_a_fact(monkeypatch):
    """The observer skips payloads that open none of its gates, and remembers them; that verdict
    must hold for every line of every sample (a new gate in observe() needs its token in
    _may_hold_a_fact)."""
    from vcrash.classify import signals
    from vcrash.split import Splitter

    def facts(observer):
        return (observer.versions, observer.lifecycle, [s.text for s in observer.signals], observer.durations,
                observer.prompt_sizes, observer.ports, observer.stop_requested, observer.epoch)

    def observed(lines):
        observer = signals.LineObserver()
        for line in lines:
            observer.observe(line)
            observer.observe(line)  # a repeat reads the memo
        return facts(observer)

    checked = 0
    for path in sorted((ROOT / "samples").rglob("*.log")):
        splitter = Splitter(str(path))
        lines = [ln for i, text in enumerate(path.read_text(errors="replace").splitlines())
                 for ln in splitter.split(i + 1, 0, text)]
        gated = observed(lines)
        with monkeypatch.context() as m:
            m.setattr(signals, "_may_hold_a_fact", lambda text: True)
            assert observed(lines) == gated, path
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("scanner", ["find", "pairs"])
@pytest.mark.parametrize("mix", ["default", "crash-worded-prompts", "client-aborts"])
def test_generated_log_same_report_with_the_fallback_scanners(scanner, mix, tmp_path, monkeypatch, gen_log):
    """Where Hyperscan has no wheel (Linux on ARM) the walker finds the focus needles one by one
    and blanks the users' text itself: the same report, through stretches where a traceback is
    open in a known process."""
    if scanner == "pairs":
        pytest.importorskip("numpy")
    log = tmp_path / f"{mix}.log"
    gen_log.main([str(log), "--size", "3M", "--crashes", "5", "--seed", "11", "--mix", mix])
    monkeypatch.setenv("VCRASH_SCANNER", scanner)
    full, fast = both_ways(log)
    assert full["diagnoses"]
    assert [k for k in full if full[k] != fast[k]] == []


@pytest.mark.parametrize("line", [
    "[rank1]:[E528 08:52:46.164295950 ProcessGroupGloo.cpp:145] Gloo connectFullMesh failed with no error",
    "[F1005 08:52:46.164295950 Logging.cpp:9] unexpected state",
    "(raylet, ip=10.0.0.2) [2025-12-12 15:10:48,697 C 42791 42791] (raylet) provider.cc:153: Check failed: ok",
    "(RayWorkerWrapper pid=9) [2025-12-12 15:10:48,710 E 322780 345750] raylet_client.cc:199: Socket closed",
])
def test_a_native_error_line_without_error_words_is_read_by_the_bulk_scan(line, tmp_path, monkeypatch):
    # Its header gives it an error level (error evidence), so the bulk scan must not pass it over.
    fast = _among_quiet_lines(line, tmp_path, monkeypatch)
    assert [(d["rule"], d["line"]) for d in fast["diagnoses"]] == [("unclassified-crash", 51)]


def _among_quiet_lines(line: str, tmp_path, monkeypatch) -> dict:
    """The line between 50 metrics lines before and after, read from the first byte by the bulk
    scan: its report, once it is the per-line path's."""
    monkeypatch.setattr(pipeline, "FULL_PREFIX_LINES", 0)
    path = tmp_path / "one-line.log"
    quiet = "(APIServer pid=1) INFO 11-30 10:00:00 [loggers.py:1] Avg prompt throughput: 1.0 tokens/s\n"
    path.write_text(quiet * 50 + line + "\n" + quiet * 50)
    full, fast = both_ways(path)
    assert [k for k in full if full[k] != fast[k]] == []
    return fast


def _fatal_raw_lines() -> list[str]:
    words = [form for word in pipeline._FATAL_WHOLE_WORDS + pipeline._FATAL_PHRASES
             for form in pipeline._case_forms(word)]
    return ([f"worker 3: {form} (see dmesg)" for form in words]
            + ["*** SIGSEGV received at time=1733000000 on cpu 3 ***",
               "python3: csrc/ops.cu:41: void run(): Assertion `n > 0' failed.",
               "slurmstepd: error: *** STEP 42.0 ON gpu-07 CANCELLED AT 2025-10-09T08:53:20 DUE TO TIME LIMIT ***"]
            + [f"{code}: the device went away" for code in pipeline._STATUS_CODES])


@pytest.mark.parametrize("line", _fatal_raw_lines())
def test_a_raw_line_that_says_a_process_died_is_read_by_the_bulk_scan(line, tmp_path, monkeypatch):
    # Every spelling the error-line pattern takes is a needle: the bulk scan reads the same lines.
    fast = _among_quiet_lines(line, tmp_path, monkeypatch)
    assert [d["line"] for d in fast["diagnoses"]] == [51]


def test_an_untimed_line_after_skipped_traffic_takes_the_traffic_time(tmp_path, monkeypatch):
    """Start-up lines the census only counts, then traffic the bulk scan skips, then uvicorn's
    untimed "Shutting down": its time is the last skipped line's, not the start-up's."""
    monkeypatch.setattr(pipeline, "CENSUS_MIN_BYTES", 0)
    monkeypatch.setattr(pipeline, "FULL_PREFIX_LINES", 20)
    startup = "".join(f"(APIServer pid=1) INFO 10-09 08:00:0{i % 10} [utils.py:233] non-default args: {{'port': 8000}}\n"
                      for i in range(10))
    traffic = "".join(f"(APIServer pid=1) INFO 10-09 08:05:{i % 60:02d} [logger.py:49] Added request cmpl-{i}.\n"
                      for i in range(200))
    path = tmp_path / "server.log"
    path.write_text(startup + traffic + "(APIServer pid=1) INFO:     Shutting down\n")
    full, fast = both_ways(path)
    assert [k for k in full if full[k] != fast[k]] == []
    assert [(e["kind"], e["time"]) for e in fast["timeline"] if e["kind"] == "shutdown"] == [("shutdown", "10-09 08:05:19")]


@pytest.fixture(scope="module")
def server_traffic(tmp_path_factory, gen_log) -> tuple[str, str]:
    """Three healthy server runs of generated traffic (start-up, requests, metrics, shutdown):
    what a sample is embedded in, cut in two."""
    log = tmp_path_factory.mktemp("traffic") / "healthy.log"
    gen_log.main([str(log), "--size", "400K", "--crashes", "0", "--seed", "5"])
    lines = log.read_text().splitlines(keepends=True)
    return "".join(lines[:1300]), "".join(lines[1300:])


@pytest.mark.parametrize("path", BULK_READ, ids=lambda p: p.parent.name + "/" + p.name)
def test_sample_inside_server_traffic_same_report_both_ways(path, server_traffic, monkeypatch, tmp_path):
    """A sample as it lies in a server's own log: after a start-up the census only counts and
    traffic the bulk scan skips, before more of it. The per-line path's report, to the clock of
    every untimed line and the year of every MM-DD one."""
    monkeypatch.setattr(pipeline, "CENSUS_MIN_BYTES", 0)
    monkeypatch.setattr(pipeline, "FULL_PREFIX_LINES", 200)
    from vcrash.harness import parse_sample

    before, after = server_traffic
    body = parse_sample(path).body  # the log itself: the fixture's header lines are no server's
    embedded = tmp_path / "server.log"
    embedded.write_text(before + "".join(line + "\n" for line in body) + after)
    full, fast = both_ways(embedded)
    assert [k for k in full if full[k] != fast[k]] == []


def test_the_pruned_needles_kept_on_disk_are_the_ones_worked_out(tmp_path, monkeypatch):
    """The fast path's needles (the shortest of each containing chain, ~5 ms to work out) are
    kept in the cache folder by their token set; a damaged or foreign file is worked out again."""
    words = {b"out of memory", b"CUDA out of memory", b"memory", b"Traceback", b"Trace", b"NCCL"}
    # Fatal words: "Killed" is held by no other token (a line without a level needs it only),
    # "memory" is another token's and "Fatal" is inside a traceback head.
    fatal = {b"Killed", b"memory", b"Fatal"}
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    first = pipeline._pruned(set(words), set(fatal))
    assert first == ((b"Fatal", b"Killed", b"NCCL", b"Trace", b"memory"), frozenset({b"Killed"}))
    (saved,) = tmp_path.glob("needles-*.bin")
    assert pipeline._pruned(set(words), set(fatal)) == first
    saved.write_bytes(b"\x00garbage")
    assert pipeline._pruned(set(words), set(fatal)) == first
    import marshal
    digest = saved.stem.split("-")[1]
    saved.write_bytes(marshal.dumps((digest, (b"NCCL", b"Trace"), (), 0)))  # a needle lost
    assert pipeline._pruned(set(words), set(fatal)) == first
    monkeypatch.setenv("VCRASH_NO_CACHE", "1")
    assert pipeline._pruned(set(words), set(fatal)) == first


def test_newlines_counted_either_way_give_the_same_lines(tmp_path, monkeypatch):
    """Chunks of long lines count their newlines by finding them, chunks of short ones byte by
    byte (each chunk's lines decide for the next): the lines read and their numbers are the same."""
    import random

    from vcrash import read

    rng = random.Random(5)
    parts = []
    for block in range(40):
        width = 2 if block % 3 == 0 else 220
        for i in range(rng.randrange(200, 3000)):
            parts.append("x" * width if rng.random() > 0.01 else f"ValueError: block {block} line {i}")
    text = "\n".join(parts) + "\n"
    assert all(read._sparse_count(text.encode(), s, e) == text.encode().count(b"\n", s, e)
               for s, e in [(0, len(text)), (5, 70_000), (4_000, 4_100), (90, 10), (len(text) - 9, len(text) + 50)])

    def lines(sparse_line_bytes):
        monkeypatch.setattr(read, "SPARSE_LINE_BYTES", sparse_line_bytes)
        chunks = (text.encode()[i:i + (64 << 10)] for i in range(0, len(text), 64 << 10))
        return [(r.lineno, r.offset, r.text) for r in read.iter_lines(chunks, needles=(b"Error",), stats={})]

    counted, found = lines(10 ** 9), lines(64)
    assert counted == found and len(counted) > 100


def test_every_line_a_line_pattern_matches_holds_a_bulk_scan_needle():
    """The bulk scan looks for each line pattern's narrowest required strings, not the rule's
    token: every sample line that a line rule, or a message rule's line or message pattern,
    matches and that holds the rule's token (what the bulk scan once looked for) holds one of
    the bulk scan's needles. (Lines inside an open traceback are read whatever they hold.)"""
    from vcrash.classify.match import Matcher
    from vcrash.split import Splitter

    matcher = Matcher(PACK)
    needles = pipeline.needles_for(matcher)
    checked = 0
    for path in SAMPLES:
        splitter = Splitter(path.name)
        for lineno, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for line in splitter.split(lineno, 0, raw):
                hits = [r for r in matcher.match_line(line) if r.is_line_rule]
                hits += [r for r, _implied, _how in matcher.match_message_line(line)
                         if any(r is m or r is m.parent for m in matcher._message_rules if m.lines_any)]
                for rule in hits:
                    if any(tok in raw for tok in rule.prefilter):
                        checked += 1
                        assert any(n in raw.encode() for n in needles), (rule.id, raw)
    assert checked > 100

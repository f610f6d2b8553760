"""Hostile inputs never crash vcrash, never hang it, and keep its memory bounded.

Each input gets a best-effort report (exit 0/1) or a one-line error (exit 2) — never a vcrash
traceback. Most cases run through typer's CliRunner under an alarm; a few run `python -m vcrash`
in a real subprocess to check stderr and peak memory.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import signal
import stat
import subprocess
import sys
import textwrap
import traceback as pytraceback
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vcrash.cli import app

TIME_LIMIT_S = 30
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


class Hang(BaseException):
    """Not an OSError (TimeoutError is one, and vcrash rightly turns those into input errors)."""


@contextmanager
def deadline(seconds: int = TIME_LIMIT_S):
    """Fail instead of hanging (SIGALRM; the tests run in the main thread)."""
    def on_alarm(signum, frame):
        raise Hang(f"vcrash did not finish within {seconds}s (hang)")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def cli(*args: str, stdin: bytes | None = None):
    runner = CliRunner()
    with deadline():
        res = runner.invoke(app, list(args), input=stdin, catch_exceptions=True)
    if isinstance(res.exception, Hang):
        pytest.fail(str(res.exception))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        tb = "".join(pytraceback.format_exception(res.exception))
        pytest.fail(f"vcrash raised {type(res.exception).__name__}:\n{tb}")
    assert res.exit_code in (0, 1, 2), res.exit_code
    stderr = res.stderr
    assert "Traceback" not in stderr, stderr
    if res.exit_code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert lines and all(ln.startswith("vcrash: ") for ln in lines), stderr
    return res


def analyze_json(*paths: str, extra: tuple[str, ...] = ()) -> tuple[int, dict | None, str]:
    res = cli("analyze", *paths, "--format", "json", "--fail-on", "error", *extra)
    data = json.loads(res.stdout) if res.stdout.strip().startswith("{") else None
    if data is not None:
        assert data["accounting"]["balanced"], data["accounting"]
    return res.exit_code, data, res.stderr


def run_module(*args: str, timeout: int = 120, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcrash", *args], capture_output=True, timeout=timeout,
                          input=stdin, env={**os.environ, "PYTHONWARNINGS": "ignore"})


TB = (b"Traceback (most recent call last):\n"
      b'  File "/x/vllm/v1/engine/core.py", line 701, in run_engine_core\n'
      b"    engine_core.run_busy_loop()\n"
      b"ValueError: planted hostile\n")


def found(data: dict, message: str = "planted hostile") -> bool:
    return any(message in (e.get("message") or "") for tb in data["tracebacks"] for e in tb["exceptions"])


# -- bytes ------------------------------------------------------------------------------------
ODD_BYTES = [
    ("binary.log", os.urandom(1 << 18)),
    ("elf.log", b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 200),
    ("invalid-utf8.log", b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\n" + TB.replace(b"hostile", b"hostile \xf0\x28\x8c\xbc")),
    ("nul.log", b"\x00" * 100_000 + b"\n" + TB.replace(b"\n", b"\x00\n")),
    ("cr-only.log", b"INFO start\r" + TB.replace(b"\n", b"\r")),
    ("crlf.log", b"INFO start\r\n" + TB.replace(b"\n", b"\r\n")),
    ("tqdm.log", b"Loading: 10%\rLoading: 50%\rLoading: 100%\n" + TB),
    ("empty.log", b""),
    ("only-newlines.log", b"\n" * 100_000),
    ("utf16.log", "Traceback (most recent call last):\nValueError: x\n".encode("utf-16")),
    ("ansi-soup.log", b"\x1b[31m\x1b]0;title\x07\x1b[" * 5000 + b"\n" + TB),
    ("fake-gzip.log", b"\x1f\x8b" + os.urandom(5000)),
    ("fake-zstd.log", b"\x28\xb5\x2f\xfd" + os.urandom(5000)),
    ("fake-xz.log", b"\xfd7zXZ\x00" + os.urandom(5000)),
    ("fake-bz2.log", b"BZh9" + os.urandom(5000)),
    ("json-bomb.log", b"{" * 100_000 + b"\n" + b'{"message": ' * 3000 + b"\n" + TB),
    ("long-lines.log", (b"x" * 300_000 + b"\n") * 5 + TB),
]


@pytest.mark.parametrize("name,content", ODD_BYTES, ids=[n for n, _ in ODD_BYTES])
def test_odd_bytes(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    code, data, _ = analyze_json(str(path))
    assert code in (0, 1)
    assert data is not None
    if b"planted hostile" in content and name not in ("nul.log",):
        assert found(data), f"{name}: planted traceback lost"


def test_nul_bytes_do_not_hide_the_traceback(tmp_path):
    path = tmp_path / "nul.log"
    path.write_bytes(b"\x00" * 1000 + TB.replace(b"Traceback", b"\x00Traceback"))
    code, data, _ = analyze_json(str(path))
    assert found(data)


# -- compressed -------------------------------------------------------------------------------
def _compressors():
    import zstandard

    return {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
            "zst": lambda b: zstandard.ZstdCompressor().compress(b)}


def _incompressible_log(n: int = 60_000) -> bytes:
    lines = [b"INFO %d %s" % (i, os.urandom(12).hex().encode()) for i in range(n)]
    return b"\n".join(lines[: n // 4]) + b"\n" + TB + b"\n".join(lines[n // 4:]) + b"\n"


@pytest.mark.parametrize("ext", ["gz", "bz2", "xz", "zst"])
def test_truncated_compressed_keeps_what_was_read(tmp_path, ext):
    data = _incompressible_log()
    comp = _compressors()[ext](data)
    path = tmp_path / f"server.log.{ext}"
    path.write_bytes(comp[: len(comp) * 3 // 4])
    code, report, _ = analyze_json(str(path))
    assert code in (0, 1)
    assert report["inputs"][0]["lines"] > 1000, report["inputs"]
    assert found(report), "the traceback before the damage was lost"
    if ext != "zst":  # zstandard's stream reader ends a cut frame silently
        assert report["warnings"] and "truncated" in " ".join(report["warnings"])


@pytest.mark.parametrize("ext", ["gz", "bz2", "xz", "zst"])
def test_compressed_stdin_and_empty(tmp_path, ext):
    comp = _compressors()[ext]
    res = cli("analyze", "-", "--format", "json", stdin=comp(TB))
    assert found(json.loads(res.stdout))
    path = tmp_path / f"empty.log.{ext}"
    path.write_bytes(comp(b""))
    code, report, _ = analyze_json(str(path))
    assert code == 0 and report["tracebacks"] == []
    path.write_bytes(comp(b"")[:3])
    analyze_json(str(path))


# -- paths ------------------------------------------------------------------------------------
def test_dev_null_and_empty_stdin():
    code, data, _ = analyze_json("/dev/null")
    assert code == 0 and data["diagnoses"] == []
    res = cli("analyze", "-", "--format", "json", stdin=b"")
    assert res.exit_code == 0


def test_missing_file_is_one_line():
    res = cli("analyze", "/nonexistent/server.log", "--format", "json")
    assert res.exit_code == 2


def test_directory_named_like_a_file(tmp_path):
    d = tmp_path / "server.log"
    d.mkdir()
    res = cli("analyze", str(d), "--format", "json")
    assert res.exit_code == 2  # an empty directory: "no log files found"
    (d / "inner.log").write_bytes(TB)
    code, data, _ = analyze_json(str(d))
    assert code == 1 and found(data)


def test_hostile_directory_tree(tmp_path):
    """Symlink loops, dangling links, FIFOs without a writer, sockets, unreadable files."""
    root = tmp_path / "logs"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "loop").symlink_to(root)  # loop back to the top
    (root / "a" / "self").symlink_to(root / "a" / "self")  # self loop
    (root / "dangling.log").symlink_to(tmp_path / "nowhere.log")
    os.mkfifo(root / "fifo.log")
    os.mkfifo(root / "a" / "pipe")
    (root / "dir.log").mkdir()
    (root / "a" / "b" / "real.log").write_bytes(TB)
    (root / "ok.log").write_bytes(b"INFO fine\n")
    sock = None
    try:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(root / "sock.log"))
    except OSError:
        pass
    try:
        code, data, stderr = analyze_json(str(root))
    finally:
        if sock is not None:
            sock.close()
    assert code == 1, stderr
    assert found(data)
    paths = {Path(i["path"]).name for i in data["inputs"]}
    assert paths == {"real.log", "ok.log"}, paths


def test_glob_over_hostile_entries(tmp_path):
    os.mkfifo(tmp_path / "a.log")
    (tmp_path / "b.log").write_bytes(TB)
    code, data, _ = analyze_json(str(tmp_path / "*"))
    assert found(data)


@pytest.mark.skipif(IS_ROOT, reason="running as root: chmod 000 does not make a file unreadable")
def test_unreadable_file(tmp_path):
    path = tmp_path / "secret.log"
    path.write_bytes(TB)
    path.chmod(0)
    try:
        res = cli("analyze", str(path), "--format", "json")
        assert res.exit_code == 2
        d = tmp_path / "dir"
        d.mkdir()
        (d / "ok.log").write_bytes(TB)
        (d / "locked").mkdir()
        (d / "locked" / "x.log").write_bytes(TB)
        (d / "locked").chmod(0)
        code, data, _ = analyze_json(str(d))
        assert found(data)
    finally:
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
        if (tmp_path / "dir" / "locked").exists():
            (tmp_path / "dir" / "locked").chmod(stat.S_IRWXU)


def test_unreadable_alongside_readable(tmp_path):
    """One bad input among good ones: the report is written and the error is one line (exit 2)."""
    good = tmp_path / "good.log"
    good.write_bytes(TB)
    res = cli("analyze", str(good), str(tmp_path / "dangling.log"), "--format", "json")
    assert res.exit_code == 2
    (tmp_path / "link.log").symlink_to(tmp_path / "gone.log")
    res = cli("analyze", str(good), str(tmp_path / "link.log"), "--format", "json")
    assert res.exit_code == 2
    assert found(json.loads(res.stdout))


# -- tracebacks of extreme shapes ---------------------------------------------------------------
def _format(exc: BaseException) -> str:
    return "".join(pytraceback.format_exception(exc))


def recursion_text(frames: int = 3000) -> str:
    """Mutual recursion prints every frame (no `[Previous line repeated]` collapsing)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(frames + 500)

    def ping(k):
        if k <= 0:
            raise RecursionError("maximum recursion depth exceeded while calling a Python object")
        return pong(k - 1)

    def pong(k):
        return ping(k - 1)

    try:
        ping(frames)
    except RecursionError as e:
        return _format(e)
    finally:
        sys.setrecursionlimit(old)
    raise AssertionError("unreachable")


def chain_text(links: int = 400) -> str:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, links * 4 + 500))

    def link(i):
        if i == 0:
            raise ValueError("link 0")
        try:
            link(i - 1)
        except Exception as e:
            if i % 2:
                raise KeyError(f"link {i}") from e
            raise RuntimeError(f"link {i}")

    try:
        link(links - 1)
    except Exception as e:
        return _format(e)
    finally:
        sys.setrecursionlimit(old)
    raise AssertionError("unreachable")


def group_text(depth: int) -> str:
    def build(d):
        if d == 0:
            return ValueError("innermost leaf")
        return ExceptionGroup(f"level {d}", [build(d - 1), TypeError(f"t{d}")])

    try:
        raise build(depth)
    except ExceptionGroup as e:
        return _format(e)
    raise AssertionError("unreachable")


def synthetic_group_text(depth: int) -> str:
    """Deeper than CPython prints (max_group_depth=10), in the same margin format."""
    out = ["  + Exception Group Traceback (most recent call last):",
           '  |   File "/x/app.py", line 1, in main',
           f"  | ExceptionGroup: level {depth} (1 sub-exception)"]
    for d in range(1, depth + 1):
        ind = "  " * d
        out.append(f"{ind}+-+---------------- 1 ----------------")
        if d < depth:
            out.append(f"{ind}  | ExceptionGroup: level {depth - d} (1 sub-exception)")
        else:
            out.append(f"{ind}  | ValueError: innermost leaf")
            out.append(f"{ind}  +------------------------------------")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("prefix", ["", "(EngineCore_DP0 pid=7) ", "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:1] "])
def test_3000_frame_recursion(tmp_path, prefix):
    text = recursion_text(3000)
    assert text.count('  File "') >= 3000
    path = tmp_path / "rec.log"
    path.write_text("".join(prefix + ln + "\n" for ln in text.splitlines()), encoding="utf-8")
    code, data, _ = analyze_json(str(path))
    assert code in (0, 1)  # a logger.exception copy with no fatal context is not a crash by itself
    assert len(data["tracebacks"]) == 1
    exc = data["tracebacks"][0]["exceptions"][-1]
    assert exc["type"] == "RecursionError"
    assert len(exc["frames"]) >= 3000


def test_400_link_chain(tmp_path):
    text = chain_text(400)
    path = tmp_path / "chain.log"
    path.write_text(text, encoding="utf-8")
    code, data, _ = analyze_json(str(path))
    assert code == 1
    assert data["accounting"]["traceback_headers"] == text.count("Traceback (most recent call last):")
    assert len(data["tracebacks"]) == 1
    excs = data["tracebacks"][0]["exceptions"]
    assert len(excs) == 400
    assert excs[0]["message"] == "link 0" and excs[-1]["message"] == "'link 399'"
    assert {e["relation"] for e in excs[1:]} == {"cause", "context"}


@pytest.mark.parametrize("depth", [3, 10, 15])
def test_nested_exception_groups(tmp_path, depth):
    text = group_text(depth) + "INFO after the crash\n"
    path = tmp_path / "group.log"
    path.write_text(text, encoding="utf-8")
    code, data, _ = analyze_json(str(path))
    assert code == 1
    assert len(data["tracebacks"]) == 1
    tb = data["tracebacks"][0]
    assert not tb["corrupted"], tb.get("corrupted_reason")
    types = [e["type"] for e in tb["exceptions"]]
    assert types[0] == "ExceptionGroup"
    assert types.count("TypeError") == min(depth, 10)  # CPython prints max_group_depth=10 levels
    if depth < 10:
        assert "ValueError" in types


@pytest.mark.parametrize("depth", [40, 200])
def test_synthetic_group_deeper_than_cpython_prints(tmp_path, depth):
    path = tmp_path / "deep.log"
    path.write_text(synthetic_group_text(depth), encoding="utf-8")
    code, data, _ = analyze_json(str(path))
    assert code == 1
    assert data["tracebacks"]


def test_many_tracebacks_many_streams(tmp_path):
    lines = []
    for i in range(3000):
        lines.append(f"(Worker_{i} pid={1000 + i}) Traceback (most recent call last):")
    for i in range(3000):
        lines.append(f'(Worker_{i} pid={1000 + i})   File "x.py", line {i}, in f')
        lines.append(f"(Worker_{i} pid={1000 + i}) ValueError: worker {i}")
    path = tmp_path / "many.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, data, _ = analyze_json(str(path))
    assert data["accounting"]["traceback_headers"] == 3000
    acc = data["accounting"]
    # Streams silent for IDLE_LINES are flushed as cut off: damaged, never dropped.
    # (their late frames then open a second, headerless region): nothing is lost.
    assert acc["rebuilt"] + acc["corrupted"] >= 3000 and acc["balanced"], acc
    messages = {e["message"] for tb in data["tracebacks"] for e in tb["exceptions"]}
    assert all(f"worker {i}" in messages for i in range(3000))


# -- rules ------------------------------------------------------------------------------------
RULE = """\
id = "{id}"
title = "hostile"
kind = "root"
severity = "error"
[match]
{match}
[doc]
summary = "s"
why = "w"
resolution = ["r"]
"""


def test_catastrophic_rule_regex_is_skipped_and_reported_once(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "evil-line.toml").write_text(RULE.format(id="evil-line", match="lines_any = ['''(a+)+$''']"))
    (rules / "evil-msg.toml").write_text(
        RULE.format(id="evil-msg", match="exception_message = '''^(x+x+)+y$'''"))
    log = tmp_path / "evil.log"
    log.write_text(("a" * 30_000 + "!\n") * 20 + "Traceback (most recent call last):\n"
                   '  File "x.py", line 1, in f\n' + "ValueError: " + "x" * 20_000 + "\n")
    import time

    t = time.perf_counter()
    code, data, _ = analyze_json(str(log), extra=("--rules", str(rules)))
    elapsed = time.perf_counter() - t
    assert elapsed < 15, f"catastrophic rules took {elapsed:.1f}s"
    warnings = data["warnings"]
    assert sum("evil-line" in w for w in warnings) == 1, warnings
    assert sum("evil-msg" in w for w in warnings) == 1, warnings
    assert data["diagnoses"], "the crash was still diagnosed by the other rules"


@pytest.mark.parametrize("body,what", [
    ("id = \n", "invalid TOML"),
    ("\x00\xff garbage", "invalid TOML"),
    (b'id = "caf\xe9"\n', "not UTF-8"),  # Latin-1
    ("# \u00e9\n".encode("utf-16"), "not UTF-8"),
    (RULE.format(id="bad-regex", match="lines_any = ['''(unclosed''']"), "invalid regex"),
    (RULE.format(id="bad-type", match="lines_any = [1, 2]"), ""),
    (RULE.format(id="bad-key", match="nonsense = 1"), "unknown"),
    (RULE.format(id="no-match", match=""), ""),
    ('id = "x"\nkind = "root"\nseverity = "error"\nmatch = 3\n', ""),
    ('id = "x"\nkind = "root"\nseverity = "error"\n[match]\nexception_message = 5\n', ""),
    ('id = "x"\nkind = "bogus"\nseverity = "error"\n[match]\nexception_type = ["E"]\n', "kind"),
    ('id = "x"\nkind = "root"\nseverity = "error"\npriority = "high"\n[match]\nexception_type = ["E"]\n', ""),
    ('id = "x"\nkind = "root"\nseverity = "error"\nliveness = 3\n[match]\nexception_type = ["E"]\n', ""),
    ('id = "x"\nkind = "root"\nseverity = "error"\ndoc = "x"\n[match]\nexception_type = ["E"]\n', ""),
    ('id = "x"\nkind = "root"\nseverity = "error"\n[match]\nexception_type = ["E"]\n[liveness]\n'
     'enabled = true\ndefault_timeout_s = "soon"\n', ""),
])
def test_malformed_rule_file_is_one_line_naming_it(tmp_path, body, what):
    rules = tmp_path / "rules"
    rules.mkdir()
    bad = rules / "broken-rule.toml"
    bad.write_bytes(body.encode("utf-8", "surrogateescape") if isinstance(body, str) else body)
    log = tmp_path / "x.log"
    log.write_bytes(TB)
    res = cli("analyze", str(log), "--rules", str(rules), "--format", "json")
    if res.exit_code != 2:
        # A rule that loads must at least not break the run.
        assert res.exit_code in (0, 1)
        return
    line = res.stderr.strip()
    assert "\n" not in line
    assert "broken-rule.toml" in line, line
    assert what in line, line


def test_rules_dir_missing_or_hostile(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(TB)
    assert cli("analyze", str(log), "--rules", str(tmp_path / "nope")).exit_code == 2
    rules = tmp_path / "rules"
    rules.mkdir()
    os.mkfifo(rules / "fifo.toml")  # a FIFO named like a rule must not hang the loader
    (rules / "dir.toml").mkdir()
    res = cli("analyze", str(log), "--rules", str(rules), "--format", "json")
    assert res.exit_code in (1, 2)


# -- real subprocesses: stderr and memory -------------------------------------------------------
@pytest.mark.parametrize("args", [
    ("analyze", "/nonexistent.log"),
    ("analyze", "{tmp}/dir.log"),
    ("analyze", "{tmp}/x.log", "--rules", "{tmp}/badrules"),
    ("analyze", "{tmp}/x.log", "--format", "nonsense"),
    ("analyze", "{tmp}/x.log", "-o", "json={tmp}/no/such/dir/out.json"),
    ("explain", "no-such-rule"),
])
def test_subprocess_errors_are_one_line(tmp_path, args):
    (tmp_path / "dir.log").mkdir()
    (tmp_path / "x.log").write_bytes(TB)
    (tmp_path / "badrules").mkdir()
    (tmp_path / "badrules" / "bad.toml").write_text("id = [\n")
    argv = [a.format(tmp=tmp_path) for a in args]
    proc = run_module(*argv)
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, (proc.returncode, stderr)
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr


MEASURE = textwrap.dedent("""
    import resource, subprocess, sys
    proc = subprocess.run([sys.executable, "-m", "vcrash", *sys.argv[1:]], capture_output=True)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    sys.stdout.write(f"{proc.returncode} {peak_kb}\\n")
    sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
""")


@pytest.mark.parametrize("newline_at_end", [False, True])
@pytest.mark.parametrize("how", ["file", "fast-path-off", "gzip"])
def test_50mb_line_memory_is_bounded(tmp_path, newline_at_end, how):
    path = tmp_path / "huge.log"
    with open(path, "wb") as fh:
        fh.write(b"INFO before\n")
        block = b"A" * (1 << 20)
        for _ in range(50):
            fh.write(block)
        if newline_at_end:
            fh.write(b"\n" + TB)
    args = ["analyze", str(path), "--format", "json", "-o", f"json={tmp_path / 'out.json'}"]
    if how == "fast-path-off":
        args += ["--fast-path", "off"]
    if how == "gzip":
        gz = tmp_path / "huge.log.gz"
        with open(path, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
            while chunk := src.read(1 << 22):
                dst.write(chunk)
        args[1] = str(gz)
    proc = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True, timeout=180)
    code, peak_kb = map(int, proc.stdout.split())
    assert "Traceback" not in proc.stderr.decode(), proc.stderr
    assert code in (0, 1), proc.stderr
    assert peak_kb < 150 * 1024, f"peak RSS {peak_kb / 1024:.0f} MB"
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["inputs"][0]["bytes"] >= 50 << 20
    if newline_at_end:
        assert found(data)


def test_truncated_zstd_is_reported_and_multi_frame_zstd_is_read_whole(tmp_path):
    import zstandard

    body = b"".join(f"(APIServer pid=1) INFO 01-01 00:00:00 [a.py:1] line {i}\n".encode() for i in range(50000))
    comp = zstandard.ZstdCompressor()
    frames = comp.compress(body[: len(body) // 2]) + comp.compress(body[len(body) // 2:])
    whole, cut = tmp_path / "two.log.zst", tmp_path / "cut.log.zst"
    whole.write_bytes(frames)
    cut.write_bytes(frames[:-300])
    from vcrash.analyze import analyze
    from vcrash.classify.rules import load_pack
    from vcrash.read import expand_inputs

    pack = load_pack()
    ok = analyze(expand_inputs([str(whole)]), pack).inputs[0]
    assert ok.lines == 50000 and ok.warning is None
    damaged = analyze(expand_inputs([str(cut)]), pack).inputs[0]
    assert 0 < damaged.lines < 50000 and "truncated" in damaged.warning


def _long_window_zstd(body: bytes) -> bytes:
    """What `cat server.log | zstd --long=31` writes: a 2 GiB window in the frame header."""
    import io

    import zstandard

    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31, enable_ldm=True)
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(buf, closefd=False) as w:
        w.write(body)
    return buf.getvalue()


def test_zstd_long_window_is_read(tmp_path):
    body = b"".join(b"INFO line %d\n" % i for i in range(20000)) + TB
    path = tmp_path / "server.log.zst"
    path.write_bytes(_long_window_zstd(body))
    code, data, stderr = analyze_json(str(path))
    assert code == 1 and found(data), stderr
    assert data["inputs"][0]["lines"] == 20004 and not data["warnings"]


def test_zstd_window_above_the_limit_is_one_line_exit_2(tmp_path, monkeypatch):
    import vcrash.read

    monkeypatch.setattr(vcrash.read, "ZSTD_MAX_WINDOW", 1 << 27)
    path = tmp_path / "server.log.zst"
    path.write_bytes(_long_window_zstd(TB))
    res = cli("analyze", str(path), "--format", "json")
    assert res.exit_code == 2
    assert "2048 MiB window" in res.stderr and "zstd -d --long=31" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


# -- issue 13: what a walk reads, skips and says -------------------------------------------------
def scan_json(*args: str) -> tuple[int, dict, str]:
    res = cli("scan", *args, "--format", "json", "--jobs", "1")
    return res.exit_code, json.loads(res.stdout), res.stderr


def test_walk_decides_by_content_and_lists_what_it_skips(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    for name in ("server.log.1", "engine.log.2025-10-21", "vllm.out", "worker-0", "api.stderr"):
        (root / name).write_bytes(b"INFO start\n" + TB)
    (root / "core.bin").write_bytes(bytes(range(256)) * 8)
    (root / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(2000))
    (root / "old.log.gz").write_bytes(gzip.compress(TB))
    (root / ".lock").write_bytes(b"1\n")
    (root / "dangling.log").symlink_to(tmp_path / "gone.log")
    code, data, stderr = scan_json(str(root))
    read = sorted(Path(r["path"]).name for r in data["logs"])
    assert read == ["api.stderr", "engine.log.2025-10-21", "old.log.gz", "server.log.1", "vllm.out", "worker-0"]
    skipped = {Path(s["path"]).name: s["reason"] for s in data["skipped"]}
    assert skipped == {"core.bin": "binary content (not text or a known compression)",
                       "plot.png": "binary content (not text or a known compression)",
                       ".lock": "hidden file", "dangling.log": "dangling symlink"}
    assert data["summary"]["skipped"] == 4 and code == 1
    assert "skipped 4 entries" in stderr and "--verbose" in stderr
    res = cli("scan", str(root), "--format", "csv", "--verbose")
    assert f"vcrash: skipped {root / 'dangling.log'}: dangling symlink" in res.stderr
    assert f"vcrash: skipped {root / 'core.bin'}: binary content" in res.stderr
    # globs narrow by name or by path under the folder
    code, data, _ = scan_json(str(root), "--include", "*.log*", "--exclude", "*.gz")
    assert sorted(Path(r["path"]).name for r in data["logs"]) == ["engine.log.2025-10-21", "server.log.1"]
    reasons = {Path(s["path"]).name: s["reason"] for s in data["skipped"]}
    assert reasons["old.log.gz"] == "excluded by --exclude *.gz" and reasons["vllm.out"] == "not matched by --include"
    # analyze lists them in its report too
    code, report, _ = analyze_json(str(root))
    assert {Path(s["path"]).name for s in report["skipped"]} == set(skipped)


def test_walk_stays_in_the_tree_and_never_opens_special_files(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_bytes(TB.replace(b"planted hostile", b"outside secret"))
    root = tmp_path / "logs"
    (root / "sub").mkdir(parents=True)
    (root / "real.log").write_bytes(TB)
    (root / "sub" / "alias.log").symlink_to(root / "real.log")  # inside the tree: read (once)
    (root / "leak.log").symlink_to(outside / "secret.log")
    (root / "environ.log").symlink_to("/proc/self/environ")
    (root / "kmsg.log").symlink_to("/proc/kmsg")  # read as root, this blocks forever
    (root / "zero.log").symlink_to("/dev/zero")
    (root / "outdir").symlink_to(outside)
    os.mkfifo(root / "pipe.log")
    code, data, _ = scan_json(str(root))
    assert [Path(r["path"]).name for r in data["logs"]] == ["real.log"], data["logs"]
    reasons = {Path(s["path"]).name: s["reason"] for s in data["skipped"]}
    assert reasons["leak.log"].startswith("symlink out of the scanned tree")
    assert reasons["pipe.log"].startswith("FIFO") and reasons["outdir"].startswith("symlink to a folder")
    # procfs and devices stay unread even when symlinks may leave the tree
    code, data, _ = scan_json(str(root), "--follow-symlinks")
    assert sorted(Path(r["path"]).name for r in data["logs"]) == ["leak.log", "real.log"]
    reasons = {Path(s["path"]).name: s["reason"] for s in data["skipped"]}
    assert reasons["environ.log"] == reasons["kmsg.log"] == "procfs/sysfs file"
    assert reasons["zero.log"] == "character device"
    # a scan never opens a FIFO, even named; analyze still reads one given explicitly (`<(…)`)
    res = cli("scan", str(root / "pipe.log"), "--format", "json", "--verbose")
    assert res.exit_code == 2 and "FIFO" in res.stderr


def test_walked_file_replaced_by_a_fifo_is_not_opened(tmp_path):
    from vcrash.analyze import analyze
    from vcrash.classify.rules import load_pack
    from vcrash.read import expand_inputs

    path = tmp_path / "server.log"
    path.write_bytes(TB)
    sources = expand_inputs([str(tmp_path)])
    path.unlink()
    os.mkfifo(path)
    with deadline(10):
        report = analyze(sources, load_pack())
    assert "not read: FIFO" in report.inputs[0].error


def test_reads_are_bounded_by_the_size_at_open(tmp_path):
    from vcrash.read import Source, iter_chunks, open_binary

    path = tmp_path / "growing.log"
    path.write_bytes(b"a\n" * 1000)
    stream, _, size = open_binary(Source(str(path), "growing.log"))
    with open(path, "ab") as fh:
        fh.write(b"b\n" * 100_000)  # a server still writing its log
    assert sum(len(c) for c in iter_chunks(stream, "growing.log")) == size == 2000


def test_a_plain_file_is_read_in_whole_chunks_into_one_buffer(tmp_path):
    # The bytes peeked for the magic come first, then the rest of a full chunk (a 6-byte first
    # chunk hid a paste's shape from the sniffing that reads it).
    from vcrash.read import Source, iter_chunks, open_binary

    path = tmp_path / "big.log"
    data = bytes(range(256)) * 10_000
    path.write_bytes(data)
    stream, _, _ = open_binary(Source(str(path), "big.log"))
    chunks = [bytes(c) for c in iter_chunks(stream, "big.log", chunk_size=1 << 20)]
    assert [len(c) for c in chunks] == [1 << 20, 1 << 20, len(data) - (2 << 20)]
    assert b"".join(chunks) == data


@pytest.mark.parametrize("ext", ["gz", "bz2", "xz", "zst"])
def test_compressed_file_cut_inside_its_magic_is_damaged(tmp_path, ext):
    path = tmp_path / f"server.log.{ext}"
    path.write_bytes(_compressors()[ext](TB)[:1])  # gzip's magic is two bytes
    code, data, stderr = analyze_json(str(path))
    assert data["inputs"][0].get("damaged") is True and "magic" in data["warnings"][0], data["inputs"]
    assert "vcrash: warning:" in stderr


def test_ctrl_c_during_start_up_imports_is_one_line_130(tmp_path):
    # A stand-in for typer that delivers Ctrl-C while vcrash.cli is still importing, before
    # main()'s try: deterministic, where a real Ctrl-C would race the ~60 ms of imports.
    fake = tmp_path / "fake" / "typer"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(10)\n")
    log = tmp_path / "x.log"
    log.write_text("hello\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    proc = subprocess.run([sys.executable, "-m", "vcrash", "analyze", str(log)], capture_output=True, text=True,
                          timeout=60, env=env, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 130
    assert proc.stderr == "vcrash: interrupted\n"


def test_two_rule_files_with_one_id_in_a_folder_warn_and_fail_lint(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    for name in ("a-rule", "b-rule"):
        (rules / f"{name}.toml").write_text(RULE.format(id="same-id", match="lines_any = ['planted hostile']"))
    log = tmp_path / "x.log"
    log.write_bytes(TB)
    res = cli("analyze", str(log), "--rules", str(rules), "--format", "json")
    warning = [ln for ln in res.stderr.splitlines() if "same-id" in ln]
    assert len(warning) == 1 and "a-rule.toml" in warning[0] and "b-rule.toml" in warning[0], res.stderr
    lint = cli("rules", "lint", "--rules", str(rules))
    assert lint.exit_code == 1
    assert any(ln.startswith("same-id: defined twice in one folder") for ln in lint.stdout.splitlines()), lint.stdout


def _warnings_then(tmp_path, processes: int, after: list[str]) -> dict:
    lines = [f"(Worker_TP{i % 8} pid={1000 + i}) WARNING 12-01 02:00:{i % 60:02d} [shm_broadcast.py:466] No "
             "available shared memory broadcast block found in 60 seconds." for i in range(processes)]
    lines += [f"(APIServer pid=8) INFO 12-01 02:01:{i:02d} [api_server.py:1] GET /health 200" for i in range(50)]
    path = tmp_path / "warned.log"
    path.write_text("\n".join(lines + after) + "\n", encoding="utf-8")
    return analyze_json(str(path))[1]


def test_many_processes_hang_warnings_are_one_diagnosis_counted_whole(tmp_path):
    """Thousands of processes each logging a hang warning: one diagnosis with every occurrence
    (not an event each, nor a re-read of the rest of the log each)."""
    data = _warnings_then(tmp_path, 3000, [])
    shm = [d for d in data["diagnoses"] if d["rule"] == "shm-broadcast-no-available-block"]
    assert len(shm) == 1 and shm[0]["occurrences"] == 3000


@pytest.mark.parametrize("restart", [False, True])
def test_many_processes_hang_warnings_void_when_work_resumes_in_the_same_run(tmp_path, restart):
    metrics = ("(APIServer pid=8) INFO 12-01 02:02:00 [loggers.py:248] Engine 000: Avg prompt throughput: 310.5 "
               "tokens/s, Avg generation throughput: 40.2 tokens/s, Running: 12 reqs, Waiting: 3 reqs, GPU KV "
               "cache usage: 7.9%, Prefix cache hit rate: 2.0%")
    start = ["(APIServer pid=9) INFO 12-01 02:01:59 [api_server.py:1839] vLLM API server version 0.33.0"]
    crash = ["(EngineCore_DP0 pid=7) ERROR 12-01 02:01:58 [core.py:1] EngineCore failed to start."]
    data = _warnings_then(tmp_path, 3000, (crash + start if restart else []) + [metrics])
    shm = [d for d in data["diagnoses"] if d["rule"] == "shm-broadcast-no-available-block"]
    assert bool(shm) == restart, [d["rule"] for d in data["diagnoses"]]


def _timeouts_after_metrics(tmp_path, processes: int) -> dict:
    # A server's log (1 MB or more), its metrics lines past the first 300: the bulk scan skips
    # them, they are read back only in the windows before the timeouts.
    lines = [f"(APIServer pid=8) INFO 12-01 {i // 360:02d}:{i // 6 % 60:02d}:{i % 6 * 10:02d} [loggers.py:248] "
             f"Engine 000: Avg prompt throughput: {0.0 if i > 6500 else 900.0} tokens/s, Avg generation throughput: "
             "0.0 tokens/s, Running: 12 reqs, Waiting: 3 reqs, GPU KV cache usage: 7.9%, Prefix cache hit rate: 2.0%"
             for i in range(7000)]
    lines += [f"(Proxy_{i} pid={2000 + i}) ERROR 12-01 19:27:{i % 60:02d} [proxy.py:12] EngineCore timeout after 300 s"
              for i in range(processes)]
    path = tmp_path / f"timeouts-{processes}.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return analyze_json(str(path))[1]


def test_many_processes_timeouts_read_their_windows_once_with_the_same_verdict(tmp_path):
    one, many = _timeouts_after_metrics(tmp_path, 1), _timeouts_after_metrics(tmp_path, 400)
    (d1,), (dn,) = ([d for d in data["diagnoses"] if d["rule"] == "engine-core-timeout"] for data in (one, many))
    assert dn["occurrences"] == 400
    assert d1["liveness"]["verdict"] == dn["liveness"]["verdict"] == "hung"
    # The busy metrics lines ended 80 minutes before the timeouts, outside the window read
    # before them: the stalled ones inside it are the evidence.
    assert d1["liveness"]["last_progress"] is None and dn["liveness"]["last_progress"] is None
    assert d1["liveness"]["reason"] == dn["liveness"]["reason"] == "22 stall signal(s) and no progress signal before the timeout"


@pytest.mark.parametrize("ext", ["gz", "bz2", "xz", "zst"])
def test_a_decompression_bomb_stays_a_stream(tmp_path, ext):
    # 128 MiB of zeros in a few KB: every format is read a bounded step at a time (a zstd
    # decompress call once took the whole frame: 1 GB of memory for a 16 KB file).
    import tracemalloc

    from vcrash.read import Source, iter_chunks, open_binary

    path = tmp_path / f"bomb.log.{ext}"
    path.write_bytes(_compressors()[ext](b"\0" * (128 << 20)))
    tracemalloc.start()
    try:
        stream, _, _ = open_binary(Source(str(path), str(path)))
        total = sum(len(chunk) for chunk in iter_chunks(stream, str(path)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == 128 << 20
    assert peak < 40 << 20, f"{peak >> 20} MiB"


def _longest_text(keys) -> int:
    """The longest string inside memo keys (tuples looked into)."""
    longest = 0
    for key in keys:
        for part in key if isinstance(key, tuple) else (key,):
            if isinstance(part, str):
                longest = max(longest, len(part))
    return longest


def test_memos_keep_no_long_line():
    """Long distinct lines (ERROR records of 20 KB, a traceback with a 20 KB message) are parsed,
    matched and redacted each time rather than kept: 4,096 kept lines of 256 KB held a GB
    (300 MB of such lines took 620 MB)."""
    from vcrash.classify.match import Matcher
    from vcrash.classify.rules import load_pack
    from vcrash.classify.signals import LineObserver
    from vcrash.memo import MAX_KEYED_TEXT
    from vcrash.rebuild.model import ExceptionInfo, Traceback
    from vcrash.redact import Redactor
    from vcrash.split import Splitter

    splitter, matcher, observer, redactor = Splitter("x.log"), Matcher(load_pack()), LineObserver(), Redactor()
    for i in range(20):
        text = f"(APIServer pid=7) ERROR 12-06 10:00:00 [x.py:1] boom {i} " + "ab " * 7000
        (line,) = splitter.split(i + 1, 0, text)
        assert line.payload.startswith(f"boom {i} ") and line.stream.pid == 7
        observer.observe(line)
        matcher.match_line(line)
        redactor.text(line.payload)
        exc = ExceptionInfo("ValueError", f"bad {i} " + "x" * 20000)
        tb = Traceback(f"tb{i}", "x.log", line.stream.id, "api-server", i + 1, i + 1, "python", [exc])
        matcher.match_traceback(tb, "APIServer")
    assert _longest_text(splitter._memo) <= MAX_KEYED_TEXT
    assert _longest_text(matcher._line_cache) <= MAX_KEYED_TEXT
    assert _longest_text(matcher._eligible_cache) <= MAX_KEYED_TEXT
    assert _longest_text(observer._inert) <= MAX_KEYED_TEXT
    assert _longest_text(redactor._memo) <= MAX_KEYED_TEXT

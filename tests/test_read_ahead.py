"""A big input is read on a thread one or two chunks ahead of the scan (vcrash/read_ahead.py):
the same chunks in the same order, its errors where they happened, and no thread left behind."""

import gzip
import os
import threading
from pathlib import Path

import pytest

import vcrash.analyze as pipeline
from vcrash.classify.rules import load_pack
from vcrash.read import Source, TruncatedInput
from vcrash.read_ahead import ReadAhead
from vcrash.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "vcrash-read-ahead"]


def test_chunks_in_order():
    chunks = [os.urandom(100) for _ in range(50)]
    ahead = ReadAhead(iter(chunks))
    assert list(ahead) == chunks
    ahead.close()
    assert not _readers()


def test_an_error_comes_where_its_chunk_would_have():
    def chunks():
        yield b"a"
        yield b"b"
        raise TruncatedInput("x.gz: compressed stream damaged or truncated")

    ahead = ReadAhead(chunks())
    got = []
    with pytest.raises(TruncatedInput):
        for data in ahead:
            got.append(data)
    assert got == [b"a", b"b"]
    ahead.close()
    assert not _readers()


def test_closing_early_stops_the_reader():
    read = []

    def endless():
        while True:
            read.append(1)
            yield b"x" * 1000

    ahead = ReadAhead(endless(), depth=2)
    it = iter(ahead)
    next(it)
    ahead.close()
    assert not _readers()
    assert len(read) <= 5  # the thread stayed a few chunks ahead, then stopped


def _report(path: Path, monkeypatch, read_ahead: bool) -> dict:
    monkeypatch.setattr(pipeline, "READ_AHEAD_MIN", 0 if read_ahead else 1 << 62)
    report = pipeline.analyze([Source(str(path), str(path))], PACK).to_dict(Redactor(True))
    report.pop("inputs")
    return report


@pytest.mark.parametrize("name", [
    "cuda-oom-profile-run", "engine-core-timeout", "structured-output-no-valid-param", "nccl-watchdog-collective-timeout",
])
def test_read_ahead_gives_the_same_report(name, monkeypatch):
    paths = sorted((ROOT / "samples" / name).glob("*.log"))[:2]
    assert paths
    for path in paths:
        assert _report(path, monkeypatch, True) == _report(path, monkeypatch, False), path
        assert not _readers()


def test_truncated_gzip_read_ahead_keeps_what_was_read(tmp_path, monkeypatch):
    tb = (b"Traceback (most recent call last):\n  File \"/x/core.py\", line 1, in run\n"
          b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
    lines = [b"INFO %d %s" % (i, os.urandom(12).hex().encode()) for i in range(60_000)]
    data = b"\n".join(lines[:15_000]) + b"\n" + tb + b"\n".join(lines[15_000:]) + b"\n"
    comp = gzip.compress(data)
    path = tmp_path / "server.log.gz"
    path.write_bytes(comp[: len(comp) * 3 // 4])
    monkeypatch.setattr(pipeline, "READ_AHEAD_MIN", 0)
    report = pipeline.analyze([Source(str(path), str(path))], PACK).to_dict(Redactor(True))
    assert report["inputs"][0]["lines"] > 15_000
    assert any("illegal memory access" in (tb.get("message") or str(tb)) for tb in report["tracebacks"])
    assert "truncated" in " ".join(report["warnings"])
    assert not _readers()

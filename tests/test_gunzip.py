"""A gzip file is read by vcrash/gunzip.py: every member, damage reported, memory bounded, and
the windows read again after the bulk scan start from a resume point with the same report."""

import gzip
import io
import os
from pathlib import Path

import pytest

import vcrash.gunzip as gunzip
from vcrash.analyze import analyze
from vcrash.classify.rules import load_pack
from vcrash.gunzip import GzipReader, open_gzip_at
from vcrash.read import Source
from vcrash.redact import Redactor

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()
DATA = b"".join(b"INFO line %d %s\n" % (i, os.urandom(6).hex().encode()) for i in range(120_000))


def _read_all(reader: GzipReader, n: int = 1 << 20) -> bytes:
    out = []
    while True:
        data = reader.read(n)
        if not data:
            return b"".join(out)
        out.append(data)


def test_members_and_zero_padding():
    comp = gzip.compress(DATA[:700_000]) + b"\0" * 10 + gzip.compress(DATA[700_000:]) + b"\0\0"
    assert _read_all(GzipReader(io.BytesIO(comp))) == DATA


def test_truncated_and_trailing_garbage():
    comp = gzip.compress(DATA)
    with pytest.raises(EOFError):
        _read_all(GzipReader(io.BytesIO(comp[: len(comp) // 2])))
    with pytest.raises(OSError):
        _read_all(GzipReader(io.BytesIO(comp + b"not gzip")))
    reader = GzipReader(io.BytesIO(comp[: len(comp) // 2]))
    got = b""
    with pytest.raises(EOFError):
        while True:
            data = reader.read(1 << 16)
            if not data:
                break
            got += data
    assert len(got) > len(DATA) // 3 and DATA.startswith(got)  # what was before the cut came out


def test_a_bomb_stays_a_stream():
    reader = GzipReader(io.BytesIO(gzip.compress(b"\0" * (64 << 20))))
    biggest = total = 0
    while True:
        data = reader.read(1 << 20)
        if not data:
            break
        total += len(data)
        biggest = max(biggest, len(reader._pending))
    assert total == 64 << 20 and biggest <= gunzip.MAX_OUT


def test_resume_at_any_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(gunzip, "FIRST_INTERVAL", 50_000)
    path = tmp_path / "x.log.gz"
    path.write_bytes(gzip.compress(DATA[:1_000_000]) + gzip.compress(DATA[1_000_000:]))
    points: list = []
    assert _read_all(GzipReader(open(path, "rb"), points)) == DATA
    assert 2 <= len(points) <= gunzip.MAX_POINTS
    for offset in (0, 1, 49_999, 777_777, 999_999, 1_000_000, 1_000_001, len(DATA) - 5):
        reader, at = open_gzip_at(str(path), points, offset)
        assert at <= offset
        got = b""
        while len(got) < offset - at + 40:
            data = reader.read(1 << 18)
            if not data:
                break
            got += data
        reader.close()
        assert got[offset - at:offset - at + 40] == DATA[offset:offset + 40], offset


def test_points_stay_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(gunzip, "FIRST_INTERVAL", 1000)
    points: list = []
    _read_all(GzipReader(io.BytesIO(gzip.compress(DATA)), points), n=4096)
    assert len(points) <= gunzip.MAX_POINTS
    gaps = [b.out_offset - a.out_offset for a, b in zip(points, points[1:])]
    assert min(gaps) >= 1000


def _report(path: Path) -> dict:
    report = analyze([Source(str(path), str(path))], PACK).to_dict(Redactor(True))
    report.pop("inputs")
    return report


def test_generated_log_resumed_windows_give_the_same_report(tmp_path, monkeypatch, gen_log):
    # A server log long enough for the bulk scan, with timeouts whose windows are read again.
    log = tmp_path / "server.log"
    gen_log.main([str(log), "--size", "3M", "--crashes", "5", "--seed", "11"])
    gz = tmp_path / "server.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes(), compresslevel=1))
    monkeypatch.setattr(gunzip, "FIRST_INTERVAL", 1 << 62)
    expected = _report(gz)
    resumed = []
    real = open_gzip_at

    def counted(path, points, offset):
        reader, at = real(path, points, offset)
        resumed.append(at)
        return reader, at

    import vcrash.reread as reread
    monkeypatch.setattr(reread, "open_gzip_at", counted)
    monkeypatch.setattr(gunzip, "FIRST_INTERVAL", 64 << 10)
    assert _report(gz) == expected
    assert any(at > 0 for at in resumed)  # the windows did start from resume points

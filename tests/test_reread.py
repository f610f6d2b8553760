"""The windows read again after the bulk scan share one stream per input (vcrash/reread.py):
a compressed log is decompressed about once more, not once per window, with the same report
as a fresh stream for every window gives."""

import bz2
import gzip
import lzma
from pathlib import Path

import pytest

import vcrash.analyze as pipeline
from vcrash.classify.rules import load_pack
from vcrash.read import Source
from vcrash.redact import Redactor
from vcrash.reread import WindowReader

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack()


@pytest.fixture(scope="module")
def server_log(tmp_path_factory, gen_log) -> bytes:
    log = tmp_path_factory.mktemp("reread") / "server.log"
    gen_log.main([str(log), "--size", "3M", "--crashes", "5", "--seed", "11"])
    return log.read_bytes()


def _compress(kind: str, data: bytes) -> bytes:
    if kind == "zst":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    return {"gz": lambda d: gzip.compress(d, compresslevel=1), "bz2": bz2.compress, "xz": lzma.compress,
            "log": lambda d: d}[kind](data)


def _report(path: Path) -> dict:
    report = pipeline.analyze([Source(str(path), str(path))], PACK).to_dict(Redactor(True))
    report.pop("inputs")
    return report


@pytest.mark.parametrize("kind", ["log", "gz", "bz2", "xz", "zst"])
def test_one_stream_for_every_window(kind, server_log, tmp_path, monkeypatch):
    path = tmp_path / f"server.{kind}"
    path.write_bytes(_compress(kind, server_log))
    opened, windows = [], []
    real_at, real_close = WindowReader.at, WindowReader.close

    def fresh_at(self, start):  # the old way: a new stream for every window
        real_close(self)
        windows.append(start)
        return real_at(self, start)

    monkeypatch.setattr(WindowReader, "at", fresh_at)
    expected = _report(path)
    assert len(windows) >= 3, "the log has too few windows to test"

    def counted_close(self):
        opened.append(self.opened)
        real_close(self)

    monkeypatch.setattr(WindowReader, "at", real_at)
    monkeypatch.setattr(WindowReader, "close", counted_close)
    assert _report(path) == expected
    if kind in ("bz2", "xz", "zst"):
        # One stream for the timeouts' windows, one more when the recoveries' start before them.
        assert max(opened) <= 2, opened


def _needle_lines_by_hand(data: bytes, needles: tuple[bytes, ...], max_line: int) -> list[tuple]:
    """Every line of data holding a needle in its kept part (an over-long line is its first
    max_line bytes, marked as cut), with its number and offset."""
    from vcrash.read import decode

    out, offset = [], 0
    pieces = data.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()  # the newline that ends the last line
    for number, piece in enumerate(pieces, 1):
        kept = piece[:max_line]
        if any(n in kept for n in needles):
            out.append((number, offset, decode(kept) + (" …[line cut]" if len(piece) > max_line else "")))
        offset += len(piece) + 1
    return out


@pytest.mark.parametrize("seed", range(300))
def test_needle_lines_are_the_lines_holding_a_needle(seed, monkeypatch):
    """The window reads' line reader (read.needle_lines) against a reading by hand: random lines
    (some over-long, some with a needle past the part kept, some empty), random chunk sizes that
    cut lines and needles anywhere, with and without a last newline."""
    import random

    import vcrash.read as read

    rng = random.Random(seed)
    max_line = rng.choice([8, 16, 40])
    monkeypatch.setattr(read, "MAX_LINE_BYTES", max_line)
    needles = rng.choice([(b"tp:",), (b"tp:", b"xy"), (b"ab", b"b")])
    words = [b"tp:", b"xy", b"ab", b"b", b"a", b"t", b"p:", b"-" * rng.randint(1, 30), b" ", b"\xff", b"\x00"]
    lines = [b"".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(0, 40))]
    data = b"\n".join(lines) + (b"\n" if rng.random() < 0.7 else b"")
    cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 12))))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    got = [(r.lineno, r.offset, r.text) for r in read.needle_lines(iter(chunks), needles)]
    assert got == _needle_lines_by_hand(data, needles, max_line)

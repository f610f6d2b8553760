"""Compiled Hyperscan databases kept on disk between runs (vcrash/hsdb.py)."""

import pytest

hyperscan = pytest.importorskip("hyperscan")

from vcrash import hsdb  # noqa: E402

NEEDLES = [b"Traceback", b"out of memory", b"NCCL"]
TEXT = b"RuntimeError: CUDA out of memory\nNCCL WARN x\nTraceback (most recent call last):\n"


def hits(db) -> list[tuple[int, int]]:
    found = []
    db.scan(TEXT, match_event_handler=lambda i, _f, to, _fl, _c: found.append((i, to)), scratch=hyperscan.Scratch(db))
    return sorted(found)


def test_saved_database_is_read_back_and_scans_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    compiled = hsdb.block_database(hyperscan, NEEDLES, literal=True)
    saved = list(tmp_path.glob("hs-*.db"))
    assert len(saved) == 1
    stamp = saved[0].stat().st_mtime_ns
    loaded = hsdb.block_database(hyperscan, NEEDLES, literal=True)
    assert hits(loaded) == hits(compiled) == [(0, 54), (1, 32), (2, 37)]
    assert saved[0].stat().st_mtime_ns == stamp  # read, not written again


def test_other_needles_get_their_own_file(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    hsdb.block_database(hyperscan, NEEDLES, literal=True)
    hsdb.block_database(hyperscan, NEEDLES[:2], literal=True)
    assert len(list(tmp_path.glob("hs-*.db"))) == 2
    assert hits(hsdb.block_database(hyperscan, NEEDLES[:2], literal=True)) == [(0, 54), (1, 32)]


def test_damaged_file_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    hsdb.block_database(hyperscan, NEEDLES, literal=True)
    (saved,) = tmp_path.glob("hs-*.db")
    saved.write_bytes(saved.read_bytes()[:100])  # truncated
    assert hits(hsdb.block_database(hyperscan, NEEDLES, literal=True)) == [(0, 54), (1, 32), (2, 37)]
    assert len(saved.read_bytes()) > 100  # rewritten whole


def test_unwritable_folder_only_costs_the_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(blocker / "cache"))
    assert hits(hsdb.block_database(hyperscan, NEEDLES, literal=True)) == [(0, 54), (1, 32), (2, 37)]


def test_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VCRASH_NO_CACHE", "1")
    hsdb.block_database(hyperscan, NEEDLES, literal=True)
    assert not list(tmp_path.iterdir())


def test_folder_keeps_at_most_max_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(hsdb, "MAX_SAVED", 3)
    for n in range(6):
        hsdb.block_database(hyperscan, [b"needle%d" % n], literal=True)
    assert len(list(tmp_path.glob("hs-*.db"))) == 3


def test_every_process_names_the_same_databases(tmp_path):
    """The pack's needle sets are built in the same order whatever the string hash seed, so a
    second run loads what the first saved instead of adding files."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    log = tmp_path / "big.log"
    # Long error lines: the rules' literal gates build their databases for them.
    log.write_text("(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"
                   + "".join(f"(APIServer pid=1) ERROR 11-30 10:00:01 [serving.py:1] request {n} failed: "
                             + "x" * 250 + "\n" for n in range(3000)))
    folders = []
    for seed in ("1", "2", "3"):
        folder = tmp_path / f"cache{seed}"
        env = {**os.environ, "VCRASH_CACHE_DIR": str(folder), "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "vcrash", "analyze", str(log), "-f", "json"], env=env, check=False,
                       capture_output=True, cwd=Path(__file__).resolve().parents[1])
        folders.append(sorted(p.name for p in folder.glob("hs-*.db")))
    assert len(folders[0]) >= 3 and folders[0] == folders[1] == folders[2]

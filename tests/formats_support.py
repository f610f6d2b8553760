"""Shared fixtures for the output-format tests (test_formats.py, test_scan.py).

Goldens are rendered from the constructed logs in tests/data/scan/ against the frozen test rule
pack in tests/data/rules/ (bundled rules excluded), from a copy in a temporary folder so paths
are short and relative. `VCRASH_BLESS=1 pytest tests/test_formats.py tests/test_scan.py`
rewrites tests/golden/ from the current output; review the diff.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

DATA = Path(__file__).parent / "data"
FIXTURES = DATA / "scan"
RULES = DATA / "rules"
GOLDEN = Path(__file__).parent / "golden"
SCHEMA = DATA / "sarif-schema-2.1.0.json"
BLESS = os.environ.get("VCRASH_BLESS") == "1"


def make_workspace(root: Path, unreadable: bool = True) -> Path:
    """root/logs/: the fixture logs, a gzip copy of one (fixed mtime), and a dangling symlink."""
    logs = root / "logs"
    shutil.copytree(FIXTURES, logs)
    data = (FIXTURES / "unknown-crash.log").read_bytes()
    with open(logs / "unknown-crash-2.log.gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(data)
    if unreadable:
        os.symlink(str(root / "gone" / "missing.log"), logs / "vanished.log")
    return logs


def normalize(text: str, pack_version: str | None = None) -> str:
    from vcrash import __version__

    if pack_version:
        text = text.replace(pack_version, "<PACK>")
    return text.replace(f'"{__version__}"', '"<VERSION>"').replace(f"vcrash {__version__}", "vcrash <VERSION>")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if BLESS or not path.exists():
        if not BLESS and os.environ.get("CI"):
            raise AssertionError(f"golden {name} is missing (run with VCRASH_BLESS=1)")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from tests/golden/{name} (VCRASH_BLESS=1 to accept)"

"""vcrash's cache folder: what every run would otherwise rebuild (compiled Hyperscan databases,
the rule pack's parsed TOML), named by a digest of what it was made from, so a stale file is
never read. VCRASH_CACHE_DIR moves the folder, VCRASH_NO_CACHE=1 turns it off; any failure to
read or write it only costs the rebuild."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path | None:
    if os.environ.get("VCRASH_NO_CACHE", "") not in ("", "0"):
        return None
    explicit = os.environ.get("VCRASH_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vcrash"


def save(path: Path, data: bytes, keep: int) -> None:
    """Writes the file whole or not at all (whoever else writes it at the same time); files of
    its kind (its name up to the first '-') past `keep` go, least recently written first, so
    the folder never grows."""
    import tempfile

    kind = path.name.split("-", 1)[0]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = sorted(path.parent.glob(f"{kind}-*{path.suffix}"), key=lambda p: p.stat().st_mtime)
        for old in saved[:max(0, len(saved) - keep + 1)]:
            old.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{kind}-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass

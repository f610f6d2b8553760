"""The CLI's kept regex compiles (vcrash/re_cache.py): a pattern built from a kept opcode list
matches exactly as one compiled afresh, and a damaged cache file only costs the compile."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Patterns of every shape the compiler emits differently: groups by name and number, flags
# inline and passed, look-arounds, back-references, conditionals, possessive and lazy repeats,
# character classes (Unicode and ASCII), a bytes pattern, an alternation of many literals.
PROBE = r'''
import json, re, sys
if sys.argv[1] == "on":
    from vcrash.re_cache import install
    assert install()
patterns = [
    (r"(?P<name>[^()]+?) pid=(?P<pid>\d+)\) ?", 0),
    (r"(?i)traceback \(most recent call last\):", 0),
    (r"^\s*File \"(?P<file>[^\"]+)\", line (?P<line>\d+)(?:, in (?P<func>\S+))?", re.M),
    (r"(?<=\s)(\w+)(?=: )", 0),
    (r"(a)(b)?(?(2)c|d)", 0),
    (r"(\w+) \1", re.I),
    (r"x*+y|z+?w", 0),
    (r"[\u00c0-\u017f]+|\bcaf\u00e9\b", 0),
    (r"[\w.]+", re.A),
    (rb"\x1b\[[0-9;]*m", 0),
    ("|".join(f"literal{i}" for i in range(300)), 0),
    (r"(?x) ( \d{4}-\d\d-\d\d ) [T ] (\d\d:\d\d)  # a comment", 0),
]
texts = ["(EngineCore_DP0 pid=12) Traceback (most recent call last):", '  File "/a/b.py", line 3, in f',
         "RuntimeError: boom  ValueError: x", "abc abd ad", "Word word x", "xxxy zzw", "caf\u00e9 \u00c9l\u00e8ve",
         "a.b_c d", "literal299 literal7", "2025-01-02T10:11 and 2024-12-31 09:00", "\x1b[1;36mtag\x1b[0m"]
out = []
for pattern, flags in patterns:
    compiled = re.compile(pattern, flags)
    source = compiled.pattern if isinstance(compiled.pattern, str) else compiled.pattern.decode()
    row = [source, compiled.flags, compiled.groups, sorted(compiled.groupindex.items())]
    for text in texts:
        data = text.encode() if isinstance(pattern, bytes) else text
        first = compiled.search(data)
        row.append([[m.span() for m in compiled.finditer(data)], [str(g) for g in first.groups()] if first else None])
    out.append(row)
print(json.dumps(out))
'''


def _probe(cache: Path, mode: str):
    env = {"VCRASH_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_kept_compiles_match_as_fresh_ones(tmp_path):
    fresh = _probe(tmp_path, "off")
    assert not list(tmp_path.glob("re-*"))  # without install() nothing is kept
    first = _probe(tmp_path, "on")  # compiles and keeps
    kept_files = list(tmp_path.glob("re-*.marshal"))
    assert len(kept_files) == 1 and kept_files[0].stat().st_size > 1000
    second = _probe(tmp_path, "on")  # every pattern from the kept opcode lists
    assert first == fresh
    assert second == fresh


@pytest.mark.parametrize("junk", [b"", b"\x00garbage", b"\xe3" * 4096], ids=["empty", "garbage", "invalid-utf8"])
def test_a_damaged_cache_file_only_costs_the_compile(tmp_path, junk):
    fresh = _probe(tmp_path, "off")
    _probe(tmp_path, "on")
    for kept in tmp_path.glob("re-*.marshal"):
        kept.write_bytes(junk)
    assert _probe(tmp_path, "on") == fresh
    # ... and the next run keeps a whole file again.
    assert all(kept.stat().st_size > 1000 for kept in tmp_path.glob("re-*.marshal"))


def test_the_cli_entry_installs_it_and_a_library_import_does_not(tmp_path):
    env = {"VCRASH_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    lib = subprocess.run([sys.executable, "-c", "import vcrash.analyze, vcrash.cli"], env=env, timeout=60)
    assert lib.returncode == 0 and not list(tmp_path.glob("re-*"))
    log = tmp_path / "one.log"
    log.write_text("(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n")
    cli = subprocess.run([sys.executable, "-m", "vcrash", "analyze", str(log), "-f", "json"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["schema"].startswith("vcrash/report")
    assert list(tmp_path.glob("re-*.marshal"))


def test_an_entry_damaged_but_still_readable_is_compiled_again(tmp_path):
    """A file whose entries unmarshal but hold another pattern's opcodes (a flipped byte, a
    mix-up) must not give patterns that match otherwise: every entry's checksum fails."""
    import marshal

    fresh = _probe(tmp_path, "off")
    _probe(tmp_path, "on")
    (kept,) = tmp_path.glob("re-*.marshal")
    table = marshal.loads(kept.read_bytes())
    entries = list(table.items())
    swapped = {key: (value[0], entries[(i + 1) % len(entries)][1][1], *value[2:])
               for i, (key, value) in enumerate(entries)}
    kept.write_bytes(marshal.dumps(swapped))
    assert _probe(tmp_path, "on") == fresh

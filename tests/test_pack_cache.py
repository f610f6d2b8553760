"""The bundled rule files' parsed TOML kept in the cache folder (vcrash/classify/pack_cache.py):
a copy is only ever read for the very files it was made from."""

import tomllib

from vcrash.classify import pack_cache
from vcrash.classify.rules import bundled_rules_dir, load_pack


def _summary(pack):
    return pack.version, [(r.id, r.kind, r.title, r.priority, r.doc, r.raw, r.path,
                           getattr(r.exception_message, "pattern", None), r.prefilter,
                           [getattr(p, "pattern", None) for p in r.lines_any + r.frames_any],
                           [a.raw for a in r.alternatives]) for r in pack.rules]


def test_cached_pack_is_the_parsed_pack(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_NO_CACHE", "1")
    parsed = _summary(load_pack())
    monkeypatch.delenv("VCRASH_NO_CACHE")
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    first = _summary(load_pack())  # parses and saves
    assert len(list(tmp_path.glob("pack-*.marshal"))) == 1
    second = _summary(load_pack())  # from the saved copy
    assert parsed == first == second
    files = sorted(bundled_rules_dir().glob("*.toml"))
    blobs = [(p.name, p.read_bytes()) for p in files]
    tables = pack_cache.load(pack_cache.cache_path(blobs), [n for n, _ in blobs])
    assert tables == {p.name: tomllib.loads(p.read_text()) for p in files}


def test_a_changed_file_names_another_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    blobs = [("a.toml", b'id = "a"\n'), ("b.toml", b'id = "b"\n')]
    where = pack_cache.cache_path(blobs)
    pack_cache.save(where, {"a.toml": {"id": "a"}, "b.toml": {"id": "b"}})
    assert pack_cache.load(where, ["a.toml", "b.toml"]) == {"a.toml": {"id": "a"}, "b.toml": {"id": "b"}}
    assert pack_cache.cache_path([("a.toml", b'id = "a2"\n'), blobs[1]]) != where
    assert pack_cache.cache_path(blobs[:1]) != where
    assert pack_cache.load(where, ["a.toml", "c.toml"]) is None  # not made for these files


def test_unreadable_or_foreign_copy_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    where = pack_cache.cache_path([("a.toml", b"x")])
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_bytes(b"\x00garbage")
    assert pack_cache.load(where, ["a.toml"]) is None
    monkeypatch.setenv("VCRASH_NO_CACHE", "1")
    assert pack_cache.cache_path([("a.toml", b"x")]) is None


def test_folder_keeps_few_packs(tmp_path, monkeypatch):
    monkeypatch.setenv("VCRASH_CACHE_DIR", str(tmp_path))
    for n in range(pack_cache.MAX_SAVED + 3):
        blobs = [("a.toml", b"%d" % n)]
        pack_cache.save(pack_cache.cache_path(blobs), {"a.toml": {"n": n}})
    assert len(list(tmp_path.glob("pack-*.marshal"))) == pack_cache.MAX_SAVED

"""One version answer: the headline, `fixed_in` and the upgrade step come from one table per rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vcrash.classify.rules import RuleError, load_pack
from vcrash.classify.versions import Fix, version_advice
from vcrash.cli import app
from vcrash.lint import lint_pack

ROOT = Path(__file__).resolve().parents[1]
SO = "structured-output-no-valid-param"
FIXES = [Fix("0.11.1", "empty params", "0.8.0"), Fix("0.25.0", "json_object false", "0.8.0"),
         Fix("0.30.0", "advisory cases", "0.25.0")]


@pytest.mark.parametrize("version,target", [
    ("0.11.0", "0.25.0"),   # empty params and json_object=false; the advisory cases came later
    ("0.24.0", "0.25.0"),
    ("0.25.0", "0.30.0"),   # only the advisory's cases are left
    ("0.29.1", "0.30.0"),
])
def test_headline_names_the_release_that_fixes_this_logs_cases(version, target):
    assert version_advice("", FIXES, version) == f"this log's vLLM {version} is affected: upgrade to >= {target}"


def test_headline_for_fixed_and_unknown_versions():
    assert "already has every case known to affect it" in version_advice("", FIXES, "0.30.0")
    assert "already has every case" in version_advice("", FIXES, "0.7.0")  # before any case crashed
    assert version_advice("", FIXES, None).startswith("fixed in vLLM 0.30.0")
    assert version_advice("0.26.0", [], "0.25.0") == "this log's vLLM 0.25.0 is affected: upgrade to >= 0.26.0"


def test_bundled_rule_step_and_headline_agree():
    rule = load_pack([]).get(SO)
    assert rule.doc["fixed_in"] == "0.30.0" == rule.fixes[-1].version
    step = next(s for s in rule.doc["resolution"] if s.startswith("Upgrade vLLM"))
    for fix in rule.fixes:
        assert f"from {fix.version} {fix.case}" in step
    assert "0.26.0" not in step  # the grammar-compile fix belongs to another rule
    assert version_advice(rule.doc["fixed_in"], rule.fixes, "0.11.0").endswith(">= 0.25.0")


def test_readme_sample_says_what_analyze_says():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    claimed = re.search(r"│ (Version: [^│]*?)\s*│", readme).group(1)
    sample = ROOT / "samples" / SO / "constructed-0.11.0-docker.log"
    res = CliRunner().invoke(app, ["analyze", str(sample), "--format", "text"])
    assert claimed in res.stdout, claimed


RULE = """id = "{rid}"
title = "t"
kind = "root"
severity = "error"
[match]
prefilter = ["Boom"]
exception_message = '''Boom'''
[doc]
summary = "s"
why = "w"
resolution = [{steps}]
fixed_in = "{fixed_in}"
{fixes}
"""
STEP_FIXES = """[[doc.fixes]]
version = "0.11.1"
case = "a"
[[doc.fixes]]
version = "0.25.0"
case = "b"
"""


def _lint(tmp_path, **kw):
    rid = kw.pop("rid", "my-rule")
    (tmp_path / f"{rid}.toml").write_text(RULE.format(rid=rid, **kw))
    pack = load_pack([str(tmp_path)], include_bundled=False)
    return [p for r, p in lint_pack(pack, samples_dir=tmp_path) if r == rid]


def test_lint_catches_a_step_that_disagrees_with_fixed_in(tmp_path):
    problems = _lint(tmp_path, steps='"Upgrade vLLM. Target >= 0.26.0."', fixed_in="0.25.0", fixes="")
    assert any("upgrade target 0.26.0" in p for p in problems), problems


def test_lint_catches_fixed_in_that_disagrees_with_the_steps(tmp_path):
    problems = _lint(tmp_path, steps='"{upgrade}"', fixed_in="0.16.0", fixes=STEP_FIXES)
    assert any("fixed_in 0.16.0 disagrees" in p for p in problems), problems


def test_lint_wants_the_generated_upgrade_step(tmp_path):
    problems = _lint(tmp_path, steps='"Upgrade to 0.25.0 or later."', fixed_in="", fixes=STEP_FIXES)
    assert any("no '{upgrade}' resolution step" in p for p in problems), problems
    assert not any("upgrade target" in p for p in problems), problems  # 0.25.0 is a fix version


def test_agreeing_rule_is_clean(tmp_path):
    problems = _lint(tmp_path, steps='"{upgrade}", "Restart."', fixed_in="", fixes=STEP_FIXES)
    assert not any("version" in p or "upgrade" in p or "fixed_in" in p for p in problems), problems


@pytest.mark.parametrize("fixes,error", [
    ('[[doc.fixes]]\nversion = "soon"\ncase = "a"\n', "version must be a release"),
    ('[[doc.fixes]]\nversion = "0.2.0"\n', "case must say"),
    ('[[doc.fixes]]\nversion = "0.2.0"\ncase = "a"\nsince = "0.3.0"\n', "is not before the fix"),
    ('[[doc.fixes]]\nversion = "0.2.0"\ncase = "a"\nfixed = "x"\n', "unknown key(s) fixed"),
])
def test_bad_fix_tables_are_one_line_errors(tmp_path, fixes, error):
    (tmp_path / "bad.toml").write_text(RULE.format(rid="bad", steps='"x"', fixed_in="", fixes=fixes))
    with pytest.raises(RuleError, match=re.escape(error)):
        load_pack([str(tmp_path)], include_bundled=False)


def test_upgrade_placeholder_without_fixes_is_an_error(tmp_path):
    (tmp_path / "bad.toml").write_text(RULE.format(rid="bad", steps='"{upgrade}"', fixed_in="", fixes=""))
    with pytest.raises(RuleError, match="no \\[\\[doc.fixes\\]\\]"):
        load_pack([str(tmp_path)], include_bundled=False)


def test_bundled_pack_has_one_version_answer():
    problems = [(r, p) for r, p in lint_pack(load_pack([])) if "upgrade" in p or "fixed_in" in p]
    assert problems == []

"""Writing a rule: default explains, lint of user folders, sample counts, did-you-mean."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vcrash.classify.rules import load_pack
from vcrash.cli import app

RULE = """id = "{rid}"
title = "t"
kind = "{kind}"
severity = "error"
{extra}
[match]
prefilter = [{tokens}]
exception_message = '''tenant quota exceeded'''
[doc]
summary = "s"
why = "w"
resolution = ["r"]
{doc_extra}
"""


def write_rule(folder, rid="my-rule", kind="root", extra="", tokens='"quota exceeded"', doc_extra=""):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{rid}.toml").write_text(RULE.format(rid=rid, kind=kind, extra=extra, tokens=tokens,
                                                    doc_extra=doc_extra))


def run(*args):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_roots_explain_every_symptom_unless_narrowed(tmp_path):
    write_rule(tmp_path, "default-root")
    write_rule(tmp_path, "narrow-root", extra='explains = ["engine-dead"]')
    write_rule(tmp_path, "my-symptom", kind="symptom")
    pack = load_pack([str(tmp_path)])
    symptoms = sorted(r.id for r in pack.rules if r.kind == "symptom")
    assert "my-symptom" in symptoms
    assert pack.get("default-root").explains == symptoms and pack.get("default-root").explains_default
    assert pack.get("narrow-root").explains == ["engine-dead"]
    assert pack.get("my-symptom").explains == []  # symptoms get no default
    assert pack.get("structured-output-no-valid-param").explains == [  # a bundled root that narrows
        "engine-dead", "engine-core-died-at-exit-shutdown-noise", "worker-proc-died-unexpectedly"]


def _problems(folder):
    res = run("rules", "lint", "--rules", str(folder), "--format", "json")
    return [(p["rule"], p["problem"]) for p in json.loads(res.stdout)], res.exit_code


def test_lint_user_folder_wants_a_sample(tmp_path):
    write_rule(tmp_path)
    problems, code = _problems(tmp_path)
    assert code == 1
    assert any(r == "my-rule" and p.startswith("no positive sample") for r, p in problems), problems
    sample = tmp_path / "samples" / "my-rule" / "a.log"
    sample.parent.mkdir(parents=True)
    sample.write_text("#=EXPECT=# my-rule\n#=ROOT=# ValueError: tenant quota exceeded\n")
    problems, _ = _problems(tmp_path)
    assert not any(p.startswith("no positive sample") for r, p in problems if r == "my-rule"), problems
    rows = json.loads(run("rules", "list", "--rules", str(tmp_path), "--format", "json").stdout)
    assert next(r for r in rows if r["id"] == "my-rule")["samples"] == 1


def test_lint_flags_unknown_keys_with_a_suggestion(tmp_path):
    write_rule(tmp_path, extra='prority = 3', doc_extra='referenses = ["x"]')
    problems, _ = _problems(tmp_path)
    texts = [p for r, p in problems if r == "my-rule"]
    assert "unknown top-level key 'prority' (did you mean 'priority'?)" in texts, texts
    assert "unknown [doc] key 'referenses' (did you mean 'references'?)" in texts, texts


def test_lint_flags_a_prefilter_token_the_rule_cannot_see(tmp_path):
    write_rule(tmp_path, tokens='"quota exceeded", "OutOfMemory"')
    problems, _ = _problems(tmp_path)
    dead = [p for r, p in problems if r == "my-rule" and "prefilter token" in p]
    assert len(dead) == 1 and "'OutOfMemory'" in dead[0], problems


@pytest.mark.parametrize("args,suggestion", [
    (["explain", "cuda-oom-runtime"], "did you mean 'cuda-oom-runtime-forward'?"),
    (["rules", "show", "engine-ded"], "did you mean 'engine-dead'?"),
    (["analyze", "-", "--select", "cuda-om"], "did you mean 'cuda-oom'?"),
])
def test_unknown_rule_ids_get_a_suggestion(args, suggestion):
    res = CliRunner().invoke(app, args, input="")
    assert res.exit_code == 2
    assert suggestion in res.output, res.output


@pytest.mark.parametrize("limit, wanted, other", [
    ('process = ["EngineCore*"]', ("EngineCore_DP0", None), ("APIServer", None)),
    ('context = "scheduler step"', ("EngineCore_DP0", "in the scheduler step"), ("EngineCore_DP0", "while loading")),
], ids=["process", "context"])
def test_a_limited_rule_matches_only_where_it_applies_whichever_copy_comes_first(tmp_path, limit, wanted, other):
    """Rule candidates and answers are kept per traceback content across processes: the process
    check must still apply to each copy, and the logged context before a traceback is content."""
    from vcrash.classify.match import Matcher
    from vcrash.rebuild.model import ExceptionInfo, Frame, Traceback

    write_rule(tmp_path, "quota-limited")
    rule_file = tmp_path / "quota-limited.toml"
    rule_file.write_text(rule_file.read_text().replace("[match]\n", f"[match]\n{limit}\n"))
    pack = load_pack([str(tmp_path)])

    def tb(stream, context):
        exc = ExceptionInfo("RuntimeError", "tenant quota exceeded", frames=[Frame("/app/x.py", 3, "f")])
        return Traceback(id="tb1", input="i", stream_id=f"i:{stream}:1", role="other", start_line=1,
                         end_line=4, exceptions=[exc], context=context, context_kind="log" if context else None)

    for order in ((wanted, other), (other, wanted)):
        matcher = Matcher(pack)
        got = {copy: [rule.id for rule, _exc, _strength in matcher.match_traceback(tb(*copy), copy[0])]
               for copy in order}
        assert "quota-limited" in got[wanted], order
        assert "quota-limited" not in got[other], order


ALSO = '''
[[match.also]]
prefilter = ["charge_tenant"]
exception_type = ["TimeoutError"]
frames_any = [\'\'\'billing\\.py:charge_tenant$\'\'\']
'''


def test_an_also_block_is_another_signature_reported_as_its_rule(tmp_path):
    write_rule(tmp_path, "tenant-quota", doc_extra="", extra="")
    path = tmp_path / "tenant-quota.toml"
    path.write_text(path.read_text().replace("[doc]", ALSO + "[doc]"))
    log = tmp_path / "x.log"
    log.write_text('Traceback (most recent call last):\n  File "/srv/billing.py", line 9, in charge_tenant\n'
                   "    raise TimeoutError\nTimeoutError\n")
    res = run("analyze", str(log), "--rules", str(tmp_path), "-f", "json")
    assert [d["rule"] for d in json.loads(res.stdout)["diagnoses"]] == ["tenant-quota"]
    pack = load_pack([str(tmp_path)])
    assert [r.id for r in pack.rules].count("tenant-quota") == 1  # listed once, its signatures inside it
    assert len(pack.get("tenant-quota").alternatives) == 1
    # The same exception through another function is not this failure.
    log.write_text(log.read_text().replace("charge_tenant", "refund"))
    res = run("analyze", str(log), "--rules", str(tmp_path), "-f", "json")
    assert "tenant-quota" not in [d["rule"] for d in json.loads(res.stdout)["diagnoses"]]


@pytest.mark.parametrize("before, block, message", [
    ("[doc]", "[[match.also]]\nprefilter = [\"x\"]\nexception_typo = [\"E\"]\n", "unknown key(s): exception_typo"),
    ("[doc]", "[[match.also]]\nprefilter = [\"x\"]\n", "needs at least one of exception_type"),
    ("prefilter", 'phase_of = "cuda-oom-runtime-forward"\nphases = ["warm-up"]\n', "unknown phase 'warm-up'"),
    ("prefilter", 'phases = ["graph capture"]\n', "phase_of and phases go together"),
])
def test_a_broken_match_block_is_one_line_naming_the_file(tmp_path, before, block, message):
    write_rule(tmp_path, "tenant-quota")
    path = tmp_path / "tenant-quota.toml"
    path.write_text(path.read_text().replace(before, block + before, 1))
    res = run("analyze", str(path), "--rules", str(tmp_path))
    assert res.exit_code == 2 and message in res.output and "tenant-quota.toml" in res.output
    assert "Traceback" not in res.output


def test_lint_wants_a_prefilter_in_every_also_block(tmp_path):
    write_rule(tmp_path, "tenant-quota")
    path = tmp_path / "tenant-quota.toml"
    path.write_text(path.read_text().replace("[doc]", "[[match.also]]\nexception_type = [\"TimeoutError\"]\n[doc]"))
    problems, _code = _problems(tmp_path)
    assert ("tenant-quota", "[[match.also]] prefilter is empty (it drives the fast scanner)") in problems


def test_a_custom_rule_places_a_phaseless_finding_by_the_start_up_phase(tmp_path):
    # A runbook author's own phase rule: the phaseless OOM line during graph capture is theirs.
    write_rule(tmp_path, "capture-oom-ours")
    path = tmp_path / "capture-oom-ours.toml"
    path.write_text(path.read_text().replace(
        "[match]\n", '[match]\nphase_of = "cuda-oom-runtime-forward"\nphases = ["graph capture"]\n', 1))
    pack = load_pack(extra_dirs=[str(tmp_path)])
    assert pack.get("capture-oom-ours").phases == ["graph capture"]
    log = tmp_path / "server.log"
    log.write_text("INFO 04-27 16:28:40 [model_runner.py:1450] Capturing cudagraphs for decoding.\n"
                   "ERROR 04-27 16:28:52 [engine.py:448] CUDA out of memory. Tried to allocate 800.00 MiB.\n")
    report = json.loads(run("analyze", str(log), "--rules", str(tmp_path), "-f", "json").stdout)
    top = report["diagnoses"][0]
    assert top["rule"] == "capture-oom-ours" and any("graph capture" in n for n in top["notes"])


def test_lint_flags_a_phase_of_unknown_rule(tmp_path):
    write_rule(tmp_path, "tenant-quota")
    path = tmp_path / "tenant-quota.toml"
    path.write_text(path.read_text().replace(
        "[match]\n", '[match]\nphase_of = "cuda-oom-runtime-forwrd"\nphases = ["graph capture"]\n', 1))
    problems, _code = _problems(tmp_path)
    assert any(rid == "tenant-quota" and "phase_of names unknown rule" in text for rid, text in problems)

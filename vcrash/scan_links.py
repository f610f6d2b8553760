"""`scan` analyzes each log on its own; this ties the logs of one server run back together.

A log whose symptoms (the API server's EngineDeadError) are explained by a root in another log
of the same folder and the same server run — linked as `analyze` links its inputs
(`RunLinks`: API ports, time windows, pids) — is `explained`, not a crash of its own: its
symptoms move under that root's `explains`, as `analyze api.log engine.log` puts them. Only
logs in one folder are compared: a scan of many CI jobs' artifacts would otherwise tie
unrelated servers that ran at the same time.
"""

from __future__ import annotations

import os

from vcrash.classify.diagnose import RunLinks, closest_root
from vcrash.classify.rules import Rule
from vcrash.report.findings import LogResult, log_status


def run_facts(runs: RunLinks, diagnoses: list) -> dict:
    """The picklable part of one log's RunLinks (input index 0) and its findings' runs and times."""
    return {"windows": {epoch: list(w) for (_i, epoch), w in runs.windows.items()},
            "pids": sorted(runs.pids.get(0, ())),
            "ports": {epoch: sorted(p) for (_i, epoch), p in runs.ports.items()},
            "findings": [[d.epoch, runs.when(d), d.promoted_from] for d in diagnoses]}


def explain_across_logs(results: list[LogResult], rules: dict[str, Rule]) -> None:
    """Move symptoms under roots of other logs in the same folder and run (in place)."""
    folders: dict[str, list[int]] = {}
    for i, r in enumerate(results):
        if r.runs is not None:
            folders.setdefault(os.path.dirname(r.path), []).append(i)
    for members in folders.values():
        if len(members) > 1:
            _link_folder(results, members, rules)


def _link_folder(results: list[LogResult], members: list[int], rules: dict[str, Rule]) -> None:
    links = RunLinks()
    roots = []  # (log index, finding, epoch, seconds)
    for i in members:
        facts = results[i].runs
        links.pids[i] = set(facts["pids"])
        for epoch, w in facts["windows"].items():
            links.windows[(i, epoch)] = (w[0], w[1])
        for epoch, ports in facts["ports"].items():
            links.ports[(i, epoch)] = set(ports)
        for f, (epoch, t, promoted) in zip(results[i].findings, facts["findings"]):
            if f["kind"] != "symptom" and promoted is None:
                roots.append((i, f, epoch, t))
    if not roots:
        return
    for i in members:
        res = results[i]
        moved = []
        for j, (f, (epoch, t, promoted)) in enumerate(zip(res.findings, res.runs["findings"])):
            symptom = promoted or (f["rule"] if f["kind"] == "symptom" else None)
            if symptom is None or any(ri == i and re == epoch for ri, _f, re, _t in roots):
                continue  # not a symptom, or its own log has a root in that run
            candidates = [((ri, rf), rt) for ri, rf, re, rt in roots
                          if ri != i and symptom in getattr(rules.get(rf["rule"]), "explains", ())
                          and links.linked((i, epoch), (ri, re))]
            best = closest_root(t, candidates)
            if best is None:
                continue
            ri, root = best
            # The symptom and the cascade it headed in its own log (a promoted one's EngineDeadError).
            cascade = [{"rule": symptom, "line": f["line"], "stream": f["stream"], "occurrences": f["occurrences"],
                        "input": res.path, "evidence": f["evidence"]}, *f.get("explains", [])]
            for s in cascade:
                root["explains"].append(dict(s, evidence=_clip(s["evidence"], 160)))
                if s["input"] == res.path:
                    _add_explained_by(res, results[ri].path, root, s["rule"], s["line"])
            moved.append(j)
        if moved:
            _drop(res, moved)


def _add_explained_by(res: LogResult, root_path: str, root: dict, symptom: str, line: int) -> None:
    for by in res.explained_by:
        if (by["input"], by["rule"], by["line"]) == (root_path, root["rule"], root["line"]):
            by["symptoms"].append({"rule": symptom, "line": line})
            return
    res.explained_by.append({"input": root_path, "rule": root["rule"], "line": root["line"],
                             "symptoms": [{"rule": symptom, "line": line}]})


def _drop(res: LogResult, moved: list[int]) -> None:
    """The log keeps only its own findings, re-ranked; its status says what is left."""
    primary_moved = 0 in moved
    res.findings = [f for j, f in enumerate(res.findings) if j not in moved]
    res.runs["findings"] = [x for j, x in enumerate(res.runs["findings"]) if j not in moved]
    for rank, f in enumerate(res.findings, 1):
        f["rank"] = rank
    if primary_moved:
        res.traceback = None  # it was the moved finding's
    res.status = log_status(res.findings, res.error, res.warning is not None, bool(res.explained_by))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"

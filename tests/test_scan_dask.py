"""`vcrash scan --engine dask`: the same rows and outputs as the local engine (LocalCluster on the
whole samples/ tree; a scheduler and two workers as separate processes), a worker killed mid-scan,
an unreachable scheduler, and the default install not importing Dask."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")  # .ci/run installs vcrash[dask]

from typer.testing import CliRunner  # noqa: E402

from cluster_support import ROOT, ProcessCluster, child_env, free_port  # noqa: E402
from vcrash.classify.rules import load_pack  # noqa: E402
from vcrash.cli import app  # noqa: E402
from vcrash.read import expand_inputs  # noqa: E402
from vcrash.scan import run_scan  # noqa: E402
from vcrash.scan_dask import DaskEngine  # noqa: E402

SAMPLES = ROOT / "samples"
SCAN_DATA = ROOT / "tests/data/scan"
FORMATS = {"json": "json", "csv": "csv", "jsonl": "jsonl", "sarif": "sarif.json", "junit": "xml",
           "github": "txt", "gitlab": "gitlab.json", "markdown": "md", "table": "table.txt",
           "html": "html"}
runner = CliRunner()


def outputs_of(tmp: Path, name: str, *args: str) -> tuple[int, dict[str, str]]:
    """Run `vcrash scan` with every format written to a file; (exit code, format -> text)."""
    folder = tmp / name
    folder.mkdir()
    specs = [a for fmt, ext in FORMATS.items() for a in ("-o", f"{fmt}={folder}/out.{ext}")]
    result = runner.invoke(app, ["scan", *args, *specs])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, {fmt: (folder / f"out.{ext}").read_text(encoding="utf-8") for fmt, ext in FORMATS.items()}


@pytest.mark.slow
def test_local_cluster_matches_local_engine_on_all_samples(tmp_path):
    local_code, local = outputs_of(tmp_path, "local", str(SAMPLES), "--jobs", "2")
    dask_code, dask = outputs_of(tmp_path, "dask", str(SAMPLES), "--engine", "dask", "--jobs", "2")
    assert dask_code == local_code == 1
    doc = json.loads(dask["json"])
    assert doc["summary"]["logs"] == len(list(SAMPLES.rglob("*.log"))) > 100
    for fmt in FORMATS:
        assert dask[fmt] == local[fmt], f"--engine dask differs from the local engine in {fmt}"


@pytest.fixture(scope="module")
def cluster():
    c = ProcessCluster(workers=2)
    yield c
    c.close()


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcrash", "scan", *args], cwd=ROOT, env=child_env(env),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture()
def logs(tmp_path):
    """The scan fixtures plus an unreadable entry (a folder named like a log is not, a file
    without read permission is when not root: use a dangling symlink named explicitly)."""
    folder = tmp_path / "logs"
    shutil.copytree(SCAN_DATA, folder)
    os.symlink(str(tmp_path / "gone.log"), folder / "vanished.log")
    return folder


def test_separate_scheduler_and_workers_match_local(cluster, logs):
    args = [str(logs), str(logs / "vanished.log"), "-f", "json"]
    local = cli(*args)
    remote = cli(*args, "--engine", "dask", "--scheduler", cluster.address)
    from_env = cli(*args, "--engine", "dask", env={"DASK_SCHEDULER_ADDRESS": cluster.address})
    assert local.returncode == remote.returncode == from_env.returncode == 2  # the vanished log
    assert remote.stdout == local.stdout == from_env.stdout
    doc = json.loads(remote.stdout)
    assert doc["summary"]["logs"] == 6 and doc["summary"]["unreadable"] == 1
    vanished = next(r for r in doc["logs"] if r["path"].endswith("vanished.log"))
    assert vanished["status"] == "unreadable" and "vanished.log" in vanished["error"]
    assert "Traceback" not in remote.stderr


def test_cluster_runs_on_both_workers(cluster, logs):
    """Tasks are spread: each separate worker process analyzes some of the logs."""
    from distributed import Client

    with DaskEngine(cluster.address) as engine:
        pack = load_pack([])
        results = engine.scan(expand_inputs([str(logs)]), pack)
        assert len(results) == 5
    with Client(cluster.address, timeout=10) as client:
        # each worker keeps the analysis state it built for a run: both built one
        built = client.run(lambda: len(__import__("vcrash.scan_dask", fromlist=["_STATES"])._STATES))
    assert sorted(built.values()) == [1, 1]


def test_unreachable_scheduler_is_one_line_and_exit_2():
    port = free_port()  # nothing listens there
    started = time.monotonic()
    r = cli(str(SCAN_DATA), "--engine", "dask", "--scheduler", f"tcp://127.0.0.1:{port}",
            env={"VCRASH_DASK_CONNECT_TIMEOUT": "1"})
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("vcrash: cannot reach the Dask scheduler at tcp://127.0.0.1")
    assert time.monotonic() - started < 30


def test_bad_scheduler_address_and_options():
    r = cli(str(SCAN_DATA), "--engine", "dask", "--scheduler", "nonsense:::1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "invalid address" in r.stderr
    r = runner.invoke(app, ["scan", str(SCAN_DATA), "--scheduler", "tcp://127.0.0.1:1"])
    assert r.exit_code == 2 and "--scheduler needs --engine dask" in r.output
    r = runner.invoke(app, ["scan", str(SCAN_DATA), "--engine", "spark"])
    assert r.exit_code == 2 and "--engine must be one of local, dask" in r.output


@pytest.mark.slow
def test_worker_killed_mid_scan_loses_nothing_and_counts_nothing_twice(tmp_path):
    # Enough logs that the scan is still running when a worker dies: the samples tree 4 times.
    for i in range(4):
        shutil.copytree(SAMPLES, tmp_path / f"copy{i}")
    sources = expand_inputs([str(tmp_path)])
    pack = load_pack([])
    expected = run_scan(sources, jobs=1)
    killed: dict = {}

    with DaskEngine(None, workers=2) as engine:
        client = engine.client
        pids = client.run(os.getpid)

        def kill_a_busy_worker():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not killed:
                busy = {w: keys for w, keys in client.processing().items() if keys}
                done = sum(1 for ts in client.run_on_scheduler(_states) if ts == "memory")
                if busy and done >= 20:
                    victim = sorted(busy)[0]
                    killed.update(worker=victim, running=len(busy[victim]), done_before=done)
                    os.kill(pids[victim], signal.SIGKILL)  # a process of the LocalCluster this test started
                    return
                time.sleep(0.02)

        killer = threading.Thread(target=kill_a_busy_worker)
        killer.start()
        results = engine.scan(sources, pack)
        killer.join()
    assert killed, "the scan ended before a worker could be killed"
    assert killed["done_before"] < len(sources)
    assert [r.path for r in results] == [s.display for s in sources]  # each log once, in order
    assert [r.row() for r in results] == [r.row() for r in expected]
    assert [r.findings for r in results] == [r.findings for r in expected]


def _states(dask_scheduler=None):
    return [ts.state for key, ts in dask_scheduler.tasks.items() if str(key).startswith("vcrash-scan-")]


def test_default_scan_does_not_import_dask_or_fsspec():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom vcrash.cli import app\n"
            f"r = CliRunner().invoke(app, ['scan', {str(SCAN_DATA)!r}, '-f', 'json', '--jobs', '1'])\n"
            "print(r.exit_code, [m for m in ('dask', 'distributed', 'fsspec') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split(None, 1) == ["1", "[]\n"]

"""URL inputs through fsspec: s3:// against a moto server on 127.0.0.1 (local and Dask engines,
listing on the workers), http:// from a server the test starts, file://, an unreadable object as a
row, a missing protocol package, and credentials never printed or written into a report."""

from __future__ import annotations

import gzip
import http.server
import json
import subprocess
import sys
import threading

import pytest

pytest.importorskip("fsspec")  # .ci/run installs vcrash[dask,s3]

from cluster_support import AWS_ENV, ROOT, ProcessCluster, child_env  # noqa: E402
from vcrash.remote import public, scrub  # noqa: E402

SCAN_DATA = ROOT / "tests/data/scan"
SECRET = AWS_ENV["AWS_SECRET_ACCESS_KEY"]


def test_public_names_drop_userinfo_and_query():
    assert public("https://bob:hunter22@host/a/x.log?X-Amz-Signature=abc") == "https://host/a/x.log?…"
    assert public("s3://bucket/x.log") == "s3://bucket/x.log"
    assert public("see https://u:p@h/x and s3://b/k") == "see https://h/x and s3://b/k"


def test_scrub_removes_credential_values(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "abcdef-secret-42")
    monkeypatch.setenv("HOME_DIRNAME", "abcdef-not-secret")
    assert scrub("denied for abcdef-secret-42 at abcdef-not-secret") == "denied for <redacted> at abcdef-not-secret"


# --------------------------------------------------------------------------- s3 (moto)


@pytest.fixture(scope="module")
def s3():
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = dict(AWS_ENV, AWS_ENDPOINT_URL=f"http://{host}:{port}")
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=SECRET)
    client.create_bucket(Bucket="fleet")
    for i, path in enumerate(sorted(SCAN_DATA.iterdir())):
        body = path.read_bytes()
        key = f"ci/run{i % 2}/{path.name}"
        if i == 0:
            body, key = gzip.compress(body), key + ".gz"  # compression from content, as for files
        client.put_object(Bucket="fleet", Key=key, Body=body)
    client.put_object(Bucket="fleet", Key="ci/run1/core.bin", Body=bytes(range(256)) * 8)  # not a log
    client.put_object(Bucket="fleet", Key="ci/run0/.hidden.log", Body=b"x\n")
    cut = gzip.compress((SCAN_DATA / "structured-output.log").read_bytes())
    client.put_object(Bucket="fleet", Key="ci/top-cut.log.gz", Body=cut[: len(cut) // 2])  # an upload cut short
    yield env
    server.stop()


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vcrash", "scan", *args], cwd=ROOT, env=child_env(env),
                          capture_output=True, text=True, timeout=120)


def test_s3_prefix_local_engine(s3, tmp_path):
    sarif = tmp_path / "out.sarif"
    r = cli("s3://fleet/ci/", "-f", "json", "-o", f"sarif={sarif}", "--verbose", env=s3)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    paths = [row["path"] for row in doc["logs"]]
    assert paths == sorted(paths) and all(p.startswith("s3://fleet/ci/") for p in paths)
    assert len(paths) == 6  # five logs and the cut one; not the binary, not the hidden file
    rows = {p.rsplit("/", 1)[-1]: row for p, row in zip(paths, doc["logs"])}
    assert rows["healthy.log.gz"]["status"] == "healthy" and rows["healthy.log.gz"]["lines"] > 0
    assert rows["structured-output.log"]["rule"] == "structured-output-no-valid-param"
    # a cut upload reads like the same cut file on disk: damage reported, never "healthy"
    cut_file = tmp_path / "top-cut.log.gz"
    cut = gzip.compress((SCAN_DATA / "structured-output.log").read_bytes())
    cut_file.write_bytes(cut[: len(cut) // 2])
    on_disk = json.loads(cli(str(cut_file), "-f", "json").stdout)["logs"][0]
    remote_cut = rows["top-cut.log.gz"]
    assert remote_cut["warning"] and remote_cut["status"] == on_disk["status"] != "healthy"
    assert remote_cut["warning"].replace("s3://fleet/ci/", "") == on_disk["warning"].replace(str(tmp_path) + "/", "")
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert skipped["s3://fleet/ci/run1/core.bin"].startswith("binary content")
    assert skipped["s3://fleet/ci/run0/.hidden.log"] == "hidden file"
    for text in (r.stdout, r.stderr, sarif.read_text()):
        assert SECRET not in text and s3["AWS_ACCESS_KEY_ID"] not in text


def test_s3_glob_and_single_object(s3):
    r = cli("s3://fleet/ci/**/*.log", "-f", "csv", env=s3)
    names = [line.split(",")[0] for line in r.stdout.splitlines()[1:]]
    assert names == ["s3://fleet/ci/run0/slow-step.log", "s3://fleet/ci/run0/unknown-crash.log",
                     "s3://fleet/ci/run1/shutdown-noise.log", "s3://fleet/ci/run1/structured-output.log"]
    r = cli("s3://fleet/ci/run1/structured-output.log", "-f", "csv", env=s3)
    assert r.returncode == 1 and "structured-output-no-valid-param" in r.stdout
    r = cli("s3://fleet/nothing-here/", "-f", "csv", env=s3)
    assert r.returncode == 2 and r.stderr == "vcrash: no such object or prefix: s3://fleet/nothing-here/\n"


def test_s3_missing_bucket_is_one_line_without_the_secret(s3):
    r = cli("s3://no-such-bucket/logs/", "-f", "json", env=s3)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == "vcrash: no such object or prefix: s3://no-such-bucket/logs/\n"


@pytest.mark.slow
def test_s3_prefix_dask_engine_lists_on_workers_and_matches_local(s3, tmp_path):
    cluster = ProcessCluster(workers=2, env=s3)  # the workers read the bucket with their own environment
    try:
        local = cli("s3://fleet/ci/", "-f", "json", "-v", env=s3)
        remote = cli("s3://fleet/ci/", "-f", "json", "-v", "--engine", "dask", "--scheduler", cluster.address, env=s3)
        assert remote.returncode == local.returncode == 1
        assert remote.stdout == local.stdout
        assert SECRET not in remote.stdout + remote.stderr
        from distributed import Client

        with Client(cluster.address, timeout=10) as client:
            # the two sub-prefixes were listed by workers: their listing tasks ran there
            listed = client.run_on_scheduler(
                lambda dask_scheduler=None: sum(1 for e in dask_scheduler.transition_log
                                                if str(e[0]).startswith("run_list_job") and e[2] == "memory"))
        assert listed >= 2
    finally:
        cluster.close()


# --------------------------------------------------------------------------- http, file://


class _Handler(http.server.BaseHTTPRequestHandler):
    """ok.log is served; denied.log answers HEAD but refuses GET (an object listed, then unreadable)."""

    body = (SCAN_DATA / "structured-output.log").read_bytes()

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self):
        if self.path.startswith("/denied.log"):
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def http_base():
    pytest.importorskip("aiohttp")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_http_objects_and_an_unreadable_one_as_a_row(http_base, tmp_path):
    secret_url = http_base.replace("http://", "http://bob:pass-Word-9911@") + "/ok.log?sig=Zm9vYmFyc2VjcmV0"
    out = tmp_path / "report.json"
    r = cli(secret_url, f"{http_base}/denied.log", "-f", "csv", "-o", f"json={out}")
    assert r.returncode == 2  # an unreadable log, as for a local file
    doc = json.loads(out.read_text())
    ok, denied = doc["logs"]
    assert ok["path"] == f"{http_base}/ok.log?…" and ok["rule"] == "structured-output-no-valid-param"
    assert denied["status"] == "unreadable" and denied["error"].startswith(f"cannot read {http_base}/denied.log")
    assert denied["error"].count("\n") == 0
    everything = r.stdout + r.stderr + out.read_text()
    assert "pass-Word-9911" not in everything and "Zm9vYmFyc2VjcmV0" not in everything and "bob" not in everything
    assert "Traceback" not in r.stderr


def test_file_url_is_a_local_path(tmp_path):
    r = cli(f"file://{SCAN_DATA}", "-f", "json")
    plain = cli(str(SCAN_DATA), "-f", "json")
    assert r.returncode == plain.returncode == 1 and r.stdout == plain.stdout


def test_missing_protocol_package_is_one_line():
    try:
        import gcsfs  # noqa: F401
        pytest.skip("gcsfs is installed")
    except ImportError:
        pass
    r = cli("gs://some-bucket/logs/", "-f", "csv")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "vcrash[gcs]" in r.stderr

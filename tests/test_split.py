"""Each prefix grammar of the split stage, alone and stacked."""

import re
from pathlib import Path

import pytest

import vcrash.split as split_module
from vcrash.memo import Memo
from vcrash.split import UNTAGGED, Splitter
from vcrash.split.headers import parse_header
from vcrash.split.tags import Tag, role_of, strip_tags
from vcrash.split.wrappers import strip_ansi, strip_outer


def one(text):
    (line,) = Splitter("in.log").split(1, 0, text)
    return line


@pytest.mark.parametrize("raw", [
    "\x1b[1;36m(EngineCore_DP0 pid=5)\x1b[0;0m hello",
    "[1;36m(EngineCore_DP0 pid=5)[0;0m hello",
    "^[[1;36m(EngineCore_DP0 pid=5)^[[0;0m hello",
    "#033[1;36m(EngineCore_DP0 pid=5)#033[0;0m hello",
    "\\033[0;36m(EngineCore_DP0 pid=5)\\033[0;0m hello",
])
def test_ansi_real_and_broken_forms(raw):
    assert strip_ansi(raw) == "(EngineCore_DP0 pid=5) hello"


@pytest.mark.parametrize("raw,facts", [
    ("2025-10-24T17:12:08.363544040Z hello", {"timestamp": "2025-10-24T17:12:08.363544040Z"}),
    ("2025-10-24T17:12:08.36+08:00 CST hello", {"timestamp": "2025-10-24T17:12:08.36+08:00"}),
    ("2025-10-24T17:12:08.363Z stdout F hello", {"timestamp": "2025-10-24T17:12:08.363Z"}),
    ("vllm-1  | hello", {"service": "vllm"}),
    ("Oct 24 17:12:08 gpu-node-3 vllm[2211]: hello", {"timestamp": "Oct 24 17:12:08", "host": "gpu-node-3"}),
    ("[pod/vllm-7d9f/vllm] hello", {"pod": "vllm-7d9f"}),
    ("│ hello │", {}),
    # A sidecar's label with an id, the time, the pid and the stream.
    ("[VllmSidecar kooEr8Cc]: 2024-11-13T03:15:08.672Z 1 stdout: hello",
     {"service": "VllmSidecar kooEr8Cc", "timestamp": "2024-11-13T03:15:08.672Z"}),
])
def test_outer_wrappers(raw, facts):
    text, got = strip_outer(raw)
    assert text == "hello"
    for key, value in facts.items():
        assert got[key] == value


def test_service_label_before_a_rank_prefix_tag_or_header_only():
    """A deployment's "[vllm]: " label goes when what vLLM printed follows it; other bracketed
    starts (a rank prefix itself, c10's and Gloo's lines, prose) stay as they are."""
    line = one("[vllm]: [rank0]: RuntimeError: NCCL error: unhandled system error")
    assert (line.stream.name, line.rank, line.payload) == ("rank0", 0, "RuntimeError: NCCL error: unhandled system error")
    line = one("[engine]: (EngineCore_DP0 pid=7) ERROR 11-30 10:00:00 [core.py:1] boom")
    assert (line.stream.name, line.payload, line.kind) == ("EngineCore_DP0", "boom", "vllm")
    assert one("[vllm] INFO 11-30 10:00:00 [api_server.py:1] up").payload == "up"
    for text in ["[rank0]: [rank0]: x", "[Gloo] Rank 0 is connected to 1 peer ranks", "[note]: see below",
                 "[W1127 10:00:00.000000000 ProcessGroupNCCL.cpp:1] Warning: x", "[1]: [rank0]: x"]:
        assert strip_outer(text)[0] == text, text


def test_wrappers_stack_compose_around_docker_timestamp():
    line = one("vllm-1  | 2025-10-24T17:12:08Z (APIServer pid=9) INFO 10-24 17:12:08 [api_server.py:1] up")
    assert (line.stream.name, line.stream.pid, line.payload, line.kind) == ("APIServer", 9, "up", "vllm")


@pytest.mark.parametrize("tag,name,role", [
    ("(APIServer pid=1) ", "APIServer", "api-server"),
    ("(ApiServer_3 pid=1) ", "ApiServer_3", "api-server"),
    ("(EngineCore pid=1) ", "EngineCore", "engine-core"),
    ("(EngineCore_0 pid=1) ", "EngineCore_0", "engine-core"),
    ("(EngineCore_DP1 pid=1) ", "EngineCore_DP1", "engine-core"),
    ("(VllmWorker rank=2 pid=1) ", "VllmWorker rank=2", "worker"),
    ("(VllmWorker TP0 pid=1) ", "VllmWorker TP0", "worker"),
    ("(VllmWorkerProcess pid=1) ", "VllmWorkerProcess", "worker"),
    ("(Worker_TP1 pid=1) ", "Worker_TP1", "worker"),
    ("(Worker_PP1_TP0 pid=1) ", "Worker_PP1_TP0", "worker"),
    ("(Worker_DP0_TP1_EP1 pid=1) ", "Worker_DP0_TP1_EP1", "worker"),
    ("(MainProcess pid=1) ", "MainProcess", "main"),
    ("(Worker pid=1) (Worker_TP0 pid=1) ", "Worker_TP0", "worker"),  # 0.17's doubled tag
    ("(RayWorkerWrapper pid=1, ip=10.0.0.2) ", "RayWorkerWrapper", "worker"),
    ("(DPEngineCoreActor pid=1) ", "DPEngineCoreActor", "engine-core"),
])
def test_process_tags_of_every_version(tag, name, role):
    line = one(tag + "INFO 10-10 10:43:10 [x.py:1] msg")
    assert line.stream.name == name and line.stream.role == role and line.payload == "msg"


def test_ray_pid_only_raylet_and_repeat_suffix():
    line = one("(pid=44) ERROR 10-10 10:43:10 [w.py:1] boom [repeated 7x across cluster]")
    assert line.stream.pid == 44 and line.repeated == 7 and line.payload == "boom"
    line = one("(raylet, ip=10.0.0.3) A worker died or was killed while executing a task")
    assert line.stream.name == "raylet" and line.stream.role == "ray"


def test_torch_rank_and_c10_header():
    line = one("[rank0]:[W1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] Warning: destroy_process_group()")
    assert line.kind == "c10" and line.level == "WARNING" and line.time == "12-18 20:27:21"
    assert line.stream.name == "rank0" and line.payload.startswith("Warning:")


@pytest.mark.parametrize("stamp,time", [("E528", "05-28 08:52:46"), ("E1005", "10-05 08:52:46")])
def test_c10_writes_its_month_unpadded(stamp, time):
    # month * 100 + day: January to September have three digits.
    line = one(f"[rank1]:[{stamp} 08:52:46.164295950 ProcessGroupGloo.cpp:145] Gloo connectFullMesh failed")
    assert (line.kind, line.level, line.time, line.payload) == ("c10", "ERROR", time, "Gloo connectFullMesh failed")


@pytest.mark.parametrize("text,name", [
    ("EngineCore_DP0 pid=982672) ERROR 11-05 10:00:00 [core.py:710] Traceback (most recent call last):", "EngineCore_DP0"),
    ("RayWorkerWrapper pid=9, ip=10.0.0.2) hello", "RayWorkerWrapper"),
])
def test_a_tag_that_lost_its_opening_parenthesis(text, name):
    # An excerpt cut one character into the line's tag.
    line = one(text)
    assert line.stream.name == name and not line.payload.startswith(name)


@pytest.mark.parametrize("text", ["The worker pid=5) died", "see pid=5) here", "Worker Proc pid=5) x"])
def test_prose_with_a_pid_is_no_cut_tag(text):
    assert one(text).stream.pid is None


@pytest.mark.parametrize("text,name,payload", [
    ("****(EngineCore_DP0 pid=1804) RuntimeError: x", "EngineCore_DP0", "RuntimeError: x"),
    ("*** SIGSEGV received at time=1 on cpu 5 ***", UNTAGGED, "*** SIGSEGV received at time=1 on cpu 5 ***"),
])
def test_markdown_emphasis_before_a_tag_is_taken_off(text, name, payload):
    line = one(text)
    assert (line.stream.name, line.payload) == (name, payload)


@pytest.mark.parametrize("row,payload", [
    ("╭──────── Traceback (most recent call last) ────────╮", "Traceback (most recent call last):"),
    ("│ /x/lighteval/main.py:88 in evaluate                │", '  File "/x/lighteval/main.py", line 88, in evaluate'),
    ("│ ❱  87 │   pipeline.evaluate()                        │", "    pipeline.evaluate()"),
    ("│    86 │   │   x = 1                                  │", "    x = 1"),
    ("│    85 │                                              │", ""),
    ("╰────────────────────────────────────────────────────╯", ""),
    ("│ a plain boxed row                                   │", "a plain boxed row"),
])
def test_rich_traceback_panel_rows_read_as_cpython_prints_them(row, payload):
    assert one(row).payload == payload


def test_c10_header_without_a_date():
    # torch before 2.2: "[E ProcessGroupNCCL.cpp:916] …"
    line = one("[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception")
    assert (line.kind, line.level, line.time, line.src) == ("c10", "ERROR", None, "ProcessGroupNCCL.cpp:916")


def test_a_c10_like_date_that_is_no_date_is_not_a_header():
    assert one("[E1300 08:52:46.1 x.cpp:1] y").kind != "c10"


def test_ray_cpp_header():
    line = one("(raylet, ip=10.0.0.2) [2025-12-12 15:10:48,697 C 42791 42791] (raylet) provider.cc:153:  "
               "An unexpected system state has occurred. Check failed: ok")
    assert (line.kind, line.level, line.time, line.src) == ("c10", "CRITICAL", "2025-12-12 15:10:48,697", "provider.cc:153")
    assert line.payload.startswith(" An unexpected system state")


def test_nccl_line_joins_the_worker_stream_by_pid():
    sp = Splitter("in.log")
    sp.split(1, 0, "(Worker_TP1 pid=44) INFO 10-10 10:43:10 [x.py:1] init")
    (line,) = sp.split(2, 0, "gpu-node:44:99 [1] NCCL WARN Call to connect returned Connection refused")
    assert line.stream.name == "Worker_TP1" and line.kind == "nccl" and line.level == "WARNING"


@pytest.mark.parametrize("text,kind,level,src", [
    ("INFO 10-10 10:43:10 api_server.py:528] v", "vllm", "INFO", "api_server.py:528"),  # <= 0.7
    ("ERROR 08-05 01:53:58 [core.py:502] v", "vllm", "ERROR", "core.py:502"),  # >= 0.8
    ("DEBUG 08-05 01:53:58 [v1/engine/async_llm.py:480] v", "vllm", "DEBUG", "v1/engine/async_llm.py:480"),
    ("MYPREFIX INFO 10-10 10:43:10 [x.py:1] v", "vllm", "INFO", "x.py:1"),  # VLLM_LOGGING_PREFIX
    ("INFO:     Started server process [7225]", "uvicorn", "INFO", None),
    ("2025-01-01 10:00:00,123 - vllm.engine - ERROR - v", "pylog", "ERROR", "vllm.engine"),
    ("ERROR [multiproc_executor.py:870] v", "vllm", "ERROR", "multiproc_executor.py:870"),  # no date and time
])
def test_headers(text, kind, level, src):
    h = parse_header(text)
    assert (h.kind, h.level, h.src) == (kind, level, src)
    assert text[h.end:] in ("v", "Started server process [7225]")


def test_logging_prefix_before_the_tag_on_031():
    line = one("MYPREFIX(APIServer pid=1) INFO 11-30 10:00:00 [api_server.py:1] hello")
    assert line.stream.name == "APIServer" and line.payload == "hello"


def test_json_logging_record_with_exc_info():
    import json

    rec = {"asctime": "2025-01-01 10:00:00", "levelname": "ERROR", "name": "vllm", "processName": "EngineCore",
           "process": 9, "message": "EngineCore encountered a fatal error.",
           "exc_info": 'Traceback (most recent call last):\n  File "a.py", line 1, in f\nValueError: x'}
    lines = Splitter("in.log").split(1, 0, json.dumps(rec))
    assert [l.payload for l in lines][-1] == "ValueError: x"
    assert lines[0].stream.name == "EngineCore" and lines[0].level == "ERROR"


def test_docker_json_file_driver_line():
    line = one('{"log":"(APIServer pid=3) INFO 01-01 00:00:00 [a.py:1] up\\n","stream":"stdout","time":"2025-01-01T00:00:00Z"}')
    assert line.stream.name == "APIServer" and line.payload == "up"


def test_unknown_shapes_fall_through_untagged():
    for text in ["", "\x00\x01binary\xff", "(not a tag) hello", "}{", "[rank]: x", "{" * 5000]:
        line = one(text)
        assert line.stream.name == "-" and line.kind == "raw"


def test_tqdm_redraws_keep_the_last_frame():
    line = one("Loading:  10%|#  | 1/10\rLoading:  50%|#####  | 5/10\rLoading: 100%|##########| 10/10\r")
    assert line.payload.startswith("Loading: 100%")


def test_role_fallbacks():
    assert role_of(None) == "main"
    assert role_of("SomethingElse") == "other"
    tag = Tag()
    assert strip_tags("(EngineCore_DP0 pid=12) x", tag) == "x" and tag.pid == 12


def test_colour_reset_after_a_carriage_return_keeps_the_line():
    line = one("\x1b[31m(APIServer pid=1) Traceback (most recent call last):\r\x1b[0m")
    assert line.stream.name == "APIServer" and line.payload == "Traceback (most recent call last):"


def test_shipper_multiline_record_is_split_into_its_lines(tmp_path):
    """fluent-bit/Vector multiline parsers ship a whole traceback as one docker-style record."""
    import json

    from typer.testing import CliRunner

    from vcrash.cli import app

    tb = ("Traceback (most recent call last):\n"
          '  File "/app/serve.py", line 10, in main\n    run()\n'
          '  File "/app/serve.py", line 5, in run\n    1/0\n'
          "ZeroDivisionError: division by zero\n")
    recs = [{"log": "(EngineCore_DP0 pid=9) INFO 10-21 09:15:40 [core.py:1] ready\n", "stream": "stdout",
             "time": "2025-10-21T09:15:40.000Z"},
            {"log": "(EngineCore_DP0 pid=9) ERROR 10-21 09:15:47 [core.py:710] fatal error.\n" + tb,
             "stream": "stderr", "time": "2025-10-21T09:15:47.000Z"}]
    splitter = Splitter("in.log")
    lines = splitter.split(2, 0, json.dumps(recs[1]))
    assert [ln.payload for ln in lines][1:] == tb.rstrip("\n").split("\n")
    assert {ln.stream.name for ln in lines} == {"EngineCore_DP0"}  # continuation keeps the record's process
    assert all(ln.time for ln in lines) and all(ln.lineno == 2 for ln in lines)
    assert list(splitter.streams) == [("EngineCore_DP0", 9, None)]
    path = tmp_path / "shipped.log"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = CliRunner().invoke(app, ["analyze", str(path), "--format", "json"])
    assert res.exit_code == 1, res.output
    report = json.loads(res.stdout)
    assert report["diagnoses"][0]["exception"]["type"] == "ZeroDivisionError"
    assert report["diagnoses"][0]["stream"].endswith(":EngineCore_DP0:9")


def test_strip_ansi_shortcut_equals_the_full_pattern():
    """The cheap path for plain SGR colour codes gives what the full pattern gives, on mixes of
    real codes, spelled-out escapes, bare codes and brackets that only look like them."""
    import random

    from vcrash.split.wrappers import _ANSI, _ANSI_QUICK

    pieces = ["\x1b[1;36m", "\x1b[0;0m", "\x1b[0m", "\x1b[2K", "\x1b[?25l", "\x1b]0;title\x07", "\x1b",
              "^[[0m", "^[[m", "\\033[m", "\\x1b[31m", "#033[1m", "\\e[K", "[1;36m", "[0m", "\ufffd[0m",
              "[", "m", "1", ";", "(APIServer pid=1)", " INFO ", "[core.py:12]", "\\", "^", "x"]
    rng = random.Random(7)
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        assert strip_ansi(text) == (text if _ANSI_QUICK.search(text) is None else _ANSI.sub("", text)), repr(text)


ROOT = Path(__file__).resolve().parents[1]


def _general_plain(text: str) -> tuple:
    """What _plain makes of a line without its shortcuts (vLLM's usual line in one match, a
    tag or a torch rank prefix before raw text)."""
    shortcuts = split_module._TAGGED, split_module._RANKED
    try:
        split_module._TAGGED = split_module._RANKED = re.compile(r"(?!)")
        return _plain_fields(text)
    finally:
        split_module._TAGGED, split_module._RANKED = shortcuts


def _plain_fields(text: str) -> tuple:
    line = Splitter("x")._plain(1, 0, text, text, {})
    return (line.stream.name, line.stream.pid, line.stream.ip, line.payload, line.kind, line.level, line.time,
            line.src, line.rank, line.repeated)


LOOK_ALIKES = [
    "(EngineCore_DP0 pid=7) ERROR 11-30 10:00:00 [core.py:710] EngineCore hit an exception",
    "(EngineCore_DP0 pid=7)  ERROR 11-30 10:00:00 [core.py:710] two spaces",
    "(EngineCore_DP0 pid=7) ERROR 11-30 10:00:00.123 [core.py:710] fraction",
    "(EngineCore_DP0 pid=7) WARNING 11-30 10:00:00 core.py:710] no bracket INFO 11-30 10:00:00 [a.py:1] x",
    "(EngineCore_DP0 pid=7) ERROR 11-30 10:00:00 [core.py:710] INFO 11-30 10:00:01 [b.py:2] two headers",
    "(EngineCore_DP0 pid=7) CRITICAL 11-30 10:00:00 [core.py:710] DEBUG 11-30 10:00:01 [b.py:2] later word",
    "(RayWorkerWrapper pid=9, ip=10.0.0.1) INFO 11-30 10:00:00 [w.py:1] ray [repeated 3x across cluster]",
    "(Worker pid=3) INFO 11-30 10:00:00 [w.py:1] x [repeated 3x across cluster]",
    "( pid=3) INFO 11-30 10:00:00 [w.py:1] nameless",
    "(a b pid=1 pid=2) INFO 11-30 10:00:00 [w.py:1] odd name",
    "(APIServer pid=1) (EngineCore pid=2) INFO 11-30 10:00:00 [w.py:1] doubled tag",
    "(Worker_TP1 pid=5) [rank1]: INFO 11-30 10:00:00 [w.py:1] rank after tag",
    "(Worker_TP1 pid=5) INFO 11-30 10:00:00 [w.py:1]",
    "(Worker_TP1 pid=5) INFO 1-30 10:00:00 [w.py:1] short date",
    "(Worker_TP1 pid=5) INFO 11-30 10:00:00 [w.py:x] bad line number",
    "(日本 pid=5) INFO 11-30 10:00:00 [w.py:1] unicode name ü",
    "(EngineCore_DP0 pid=7) Traceback (most recent call last):",
    '(EngineCore_DP0 pid=7)   File "/x/vllm/core.py", line 1, in f',
    "(EngineCore_DP0 pid=7)(Worker pid=8) glued tags",
    "(EngineCore_DP0 pid=7) [rank3]: ValueError: x",
    "(EngineCore_DP0 pid=7) [rank3] not a rank prefix",
    "(EngineCore_DP0 pid=7, ip=10.0.0.1) raw with an ip",
    "(EngineCore_DP0 pid=7) raw [repeated 2x across cluster]",
    "(EngineCore_DP0 pid=7) INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK",
    "(EngineCore_DP0 pid=7) my-prefix ERROR 11-30 10:00:00 [core.py:1] prefixed header",
    "(EngineCore_DP0 pid=7) [W1130 10:00:00.000 ProcessGroupNCCL.cpp:1] c10 warning",
    "(EngineCore_DP0 pid=7) host:12:34 [0] NCCL INFO nccl line",
    "(EngineCore_DP0 pid=7) 2025-01-02 03:04:05,123 - x - INFO - python logging",
    "(EngineCore_DP0 pid=7) (pid=8) nameless inner tag",
    "(EngineCore_DP0 pid=7)",
    "(EngineCore_DP0 pid=7) ",
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/x/vllm/worker.py", line 1, in f',
    "[rank03]: leading zero",
    "[rank3]:no space",
    "[rank3]: [rank4]: doubled rank",
    "[rank3]: (Worker pid=8) tag after rank",
    "[rank3]: INFO 11-30 10:00:00 [w.py:1] vLLM header after rank",
    "[rank3]: (Worker pid=8) INFO 11-30 10:00:00 [w.py:1] tag and header after rank",
    "[rank3]: host:12:34 [0] NCCL INFO nccl after rank",
    "[rank3]: x [repeated 2x across cluster]",
    "[rank3]:",
    "[rank]: no number",
]


def test_the_usual_line_in_one_match_splits_as_tags_then_header():
    lines = [line for path in sorted((ROOT / "samples").rglob("*.log"))
             for line in path.read_text(errors="replace").splitlines()]
    lines += LOOK_ALIKES
    took = raw_took = 0
    for text in lines:
        tag = split_module._TAGGED.match(text)
        headed = tag is not None and split_module.VLLM_HEADER.match(text, tag.end()) is not None
        took += headed
        raw_took += not headed and (tag or split_module._RANKED.match(text)) is not None
        assert _plain_fields(text) == _general_plain(text), text
    assert took > 100 and raw_took > 100  # the shortcuts are what most sample lines take


def test_outer_wrappers_picked_by_first_character_strip_as_trying_every_one():
    import random

    pieces = ["2025-01-02T03:04:05Z ", "[2025-01-02 03:04:05] ", "stdout F ", "stderr P ", "Jan  2 03:04:05 host vllm[7]: ",
              "1 stdout: ", "[Side car]: ",
              "[pod/vllm-0/server] ", "vllm-1  | ", "api_1 | ", "│ ", " │", "> ", "```", "`", "#=ROOT=# ", "INFO ",
              "(EngineCore pid=1) ", "[rank0]: ", "x", "|", "٣", "日", " ", "Traceback (most recent call last):", "s"]
    rng = random.Random(11)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) for _ in range(20000)]
    texts += [line for path in sorted((ROOT / "samples").rglob("*.log"))
              for line in path.read_text(errors="replace").splitlines()]
    from vcrash.split.wrappers import OUTER_WRAPPERS

    for text in texts:
        assert strip_outer(text) == strip_outer(text, lambda _first: OUTER_WRAPPERS), repr(text)


def test_bracketed_process_tag_is_the_same_stream_as_the_parenthesized_one():
    a, b = Splitter("x"), Splitter("x")
    got = a.split(1, 0, "[EngineCore_DP0][pid=1242] ERROR 01-22 12:05:33.129 [core.py:938] boom")[0]
    want = b.split(1, 0, "(EngineCore_DP0 pid=1242) ERROR 01-22 12:05:33 [core.py:938] boom")[0]
    assert (got.stream.name, got.stream.pid, got.stream.role) == ("EngineCore_DP0", 1242, "engine-core")
    assert (got.payload, got.level, got.src) == (want.payload, want.level, want.src)
    raw = a.split(2, 0, "[EngineCore_DP0][pid=1242]   File \"/x/core.py\", line 1, in f")[0]
    assert raw.stream is got.stream and raw.payload == '  File "/x/core.py", line 1, in f'


@pytest.mark.parametrize("raw,payload", [
    ("2024-03-20 19:18:27 | ERROR | stderr |   File \"/x.py\", line 3, in f", '  File "/x.py", line 3, in f'),
    ("2024-03-20 19:18:27 | INFO | model_worker | Loading the model", "Loading the model"),
    ("[2026-01-22 20:05:33] [/bin/sh]: [APIServer][pid=1] INFO 01-22 12:05:33.001 [a.py:1] up", "up"),
    ("[2026-01-22 20:05:33] [/bin/sh]: ", ""),
    ("  | [2025-03-10T15:07:20Z]     self.run()", "    self.run()"),
    ("  |", ""),
    # An exception group's margin is not a CI gutter.
    ("  | ValueError: leaf", "  | ValueError: leaf"),
    ("  | ", "  | "),
])
def test_paste_wrappers_leave_the_payload(raw, payload):
    assert Splitter("x").split(1, 0, raw)[0].payload == payload


def test_csv_export_lines_are_unwrapped():
    """CloudWatch's CSV export: epoch milliseconds, then the line as a CSV field (quoted with
    doubled quotes when it holds a quote or comma), '#033' for ESC, '#015' for CR."""
    from vcrash.split.wrappers import strip_outer

    line = '1756144012376,"#033[1;36m(EngineCore_0 pid=75)#033[0;0m ERROR 08-25 10:46:52 [core.py:700]   File ""/x/core.py"", line 492, in __init__#015"'
    text, facts = strip_outer(line)
    assert text == '#033[1;36m(EngineCore_0 pid=75)#033[0;0m ERROR 08-25 10:46:52 [core.py:700]   File "/x/core.py", line 492, in __init__'
    assert facts["timestamp"] == "2025-08-25T17:46:52.376Z"
    assert strip_outer("1756143995336,INFO 08-25 10:46:35 [api.py:1] up#015")[0] == "INFO 08-25 10:46:35 [api.py:1] up"
    sp = Splitter("x")
    (parsed,) = sp.split(1, 0, line)
    assert parsed.stream.name == "EngineCore_0" and parsed.payload.strip().startswith('File "/x/core.py"')
    for other in ("12345,foo", "9756144012376,x", "1756144012376 x"):  # not an epoch-ms column
        assert strip_outer(other)[0] == other


def test_joined_lines_split_at_their_tags_without_the_joining_space():
    from vcrash.split.tags import split_at_inner_tags

    pieces = split_at_inner_tags("(A pid=1) INFO x. (A pid=1) ERROR y > (B pid=2) z")
    assert pieces == ["(A pid=1) INFO x.", "(A pid=1) ERROR y", "> (B pid=2) z"]


def _split_fields(splitter, text):
    return [(ln.stream.id, ln.stream.name, ln.stream.pid, ln.stream.role, ln.payload, ln.kind, ln.level, ln.time,
             ln.src, ln.rank, ln.repeated, ln.raw) for ln in splitter.split(1, 0, text)]


def _record_look_alikes():
    """Lines at and around the edges of split._PLAIN_RECORD: the record's shape with each piece
    kept, or one of them changed into what another step of _split acts on."""
    import random

    pieces = [  # (forms the shape takes, look-alikes another step acts on)
        (["", "2025-10-09T08:57:16.059475183Z ", "2025-10-09T08:57:16Z ", "2025-10-09T08:57:16.05Z stdout F ",
          "2025-10-09T08:57:16Z stderr P "],
         ["2025-10-09 08:57:16 ", "stdout F ", "2025-10-09T08:57:16Z stdout X ", "2025-10-09T08:57:16Z stdout  F ",
          "2025-10-09T08:57:16Z 12 stdout: ", "2025-10-09T08:57:16Z vllm-1  | "]),
        (["", "\x1b[1;36m"], ["[1;36m", "^[[1;36m", "\x1b[2K"]),
        (["(APIServer pid=1070)", "(EngineCore_DP0 pid=7)", "(Worker_TP1 pid=12)"],
         ["(a b pid=3)", "(APIServer pid=x)", "( pid=3)", "(日本 pid=5)", "[rank0]:"]),
        (["", "\x1b[0;0m", "\x1b[0m"], ["[0;0m", "\x1b[0;0"]),
        ([" "], ["", "  ", "\t"]),
        (["INFO", "WARNING", "DEBUG", "ERROR", "CRITICAL"], ["TRACE", "INFO:", "WARN", "info"]),
        ([" 10-09 08:57:16 "], [" 10-09 08:57:16.123 ", " 1-09 08:57:16 ", " 10-09 08:57 "]),
        (["[loggers.py:127]", "[_x.py:1]", "[a.b.py:12]"],
         ["[1m.py:3]", "[2J.py:1]", "[w.py:x]", "[]", "loggers.py:127]"]),
        ([" "], ["", "  "]),
        (["Engine 000: Avg prompt throughput: 7346.0 tokens/s, Running: 20 reqs, GPU KV cache usage: 34.3%",
          "Request chatcmpl-1f2e3d aborted.", "x", "trailing space ", "ERROR in words", "raise nothing here",
          "throughput: 1.0 tokens/s; prompt: 2", 'a "quoted" word', "Traceback (most recent call last):",
          "EngineCore failed (see above)", "config: model='/m', tp=2", "ValueError: x (y)",
          "words then INFO 11-30 10:00:01 later", "WARNING 11-30 10:00:01 [b.py:2] starts with a level"],
         ["INFO 11-30 10:00:00 [b.py:2] inner",
          'File "/usr/lib/python3.12/site-packages/vllm/a.py", line 1, in f '
          'File "/usr/lib/python3.12/site-packages/vllm/b.py", line 2, in g',
          "raise ValueError: x", "Received request r1: prompt: 'hi', params: x", "tab\there",
          "x [repeated 3x across cluster]", "cluster]", "a\\b", "{json}", "^C", "back [1;31m code", "ü non-ascii",
          "pid=5 again", "ends in CR\r", "x^M", "Traceback (most recent call last): x", "^^^^",
          "(EngineCore pid=2) tag",
          "x (Worker pid=3) inner tag",
          "Traceback: x", "+ exception group", ""]),
    ]
    # A tag before text with no vLLM header of its own (a traceback's raw lines).
    raw_pieces = [
        (["", "2025-10-09T08:57:16.059475183Z ", "2025-10-09T08:57:16Z stdout F "],
         ["2025-10-09 08:57:16 ", "stdout F ", "2025-10-09T08:57:16Z stdout X ", "2025-10-09T08:57:16+02:00 ",
          "2025-10-09T08:57:16Z UTC "]),
        *pieces[1:5],
        (["Traceback (most recent call last):", '  File "/x/vllm/a.py", line 3, in f', "    return f(x)",
          "ValueError: bad (x)", "", "RuntimeError: CUDA error: out of memory", "x = 1", "During handling of the",
          "Fatal Python error: Aborted", "E   assert x"],
         ['INFO:     127.0.0.1:1 - "GET / HTTP/1.1" 200 OK', "2025-01-02 03:04:05,123 - x - INFO - python logging",
          "INFO bare level", "ERROR - name - x", "WARN: y",
          "INFO 11-30 10:00:00 [a.py:1] header", "ERROR 11-30 10:00:00 a.py:1] no bracket", "DEBUG [a.py:1] untimed",
          "E1130 10:00:00.000000 123 file.cc:12] glog", "host:12:34 [0] NCCL INFO x", "(Worker pid=2) tagged again",
          "(no tag) parens first", "(raylet) worker died", "(RayWorkerWrapper) x", "[rank0]: ranked",
          "    x = a[0]", "^^^^^", "WARNING 2025-01-02 03:04:05 iso",
          "I1130 10:00:00.000000 1 f.cc:1] info", "a (Worker pid=3) inner", "tab\tx", "ü", "x\\y",
          'Traceback (most recent call last): File "/a.py", line 1, in f File "/b.py", line 2, in g ValueError: x'
          + " " * 80]),
    ]
    # torch's rank prefix before a rank's raw lines.
    ranked_pieces = [(["[rank0]: ", "[rank13]:", "[rank1]:  "],
                      ["[rank]: ", "[rank1] ", "[rank1]: [rank2]: ", "[Rank1]: "]),
                     raw_pieces[-1]]
    rng = random.Random(7)
    out = []
    for shape in (pieces, raw_pieces, ranked_pieces):
        for _ in range(6000):
            changed = rng.randrange(len(shape) + 2)  # past the last piece: none changed
            out.append("".join(rng.choice(bad if i == changed else good) for i, (good, bad) in enumerate(shape)))
    return out


def test_whole_plain_records_split_as_every_step_would():
    texts = [line for path in sorted((ROOT / "samples").rglob("*.log"))
             for line in path.read_text(errors="replace").splitlines()]
    texts += LOOK_ALIKES + _record_look_alikes()
    took = took_raw = took_ranked = 0
    for text in texts:
        took += split_module._PLAIN_RECORD.fullmatch(text) is not None
        took_raw += split_module._PLAIN_RAW.fullmatch(text) is not None
        took_ranked += split_module._PLAIN_RANKED.fullmatch(text) is not None
        fast = _split_fields(Splitter("in.log"), text)
        saved = split_module._PLAIN_RECORD, split_module._PLAIN_RAW, split_module._PLAIN_RANKED
        split_module._PLAIN_RECORD = split_module._PLAIN_RAW = split_module._PLAIN_RANKED = re.compile(r"(?!)")
        try:
            slow = _split_fields(Splitter("in.log"), text)
        finally:
            split_module._PLAIN_RECORD, split_module._PLAIN_RAW, split_module._PLAIN_RANKED = saved
        assert fast == slow, repr(text)
    assert took > 2000 and took_raw > 2000 and took_ranked > 1000  # what most tagged sample lines take


def _line_fields(line):
    st = line.stream
    return (st.name, st.pid, st.ip, st.lines, line.payload, line.kind, line.level, line.time, line.src, line.rank,
            line.repeated, line.raw)


def test_a_stamped_line_kept_by_what_follows_its_stamp_splits_as_it_would_unkept():
    """`docker logs -t` lines: the parse kept for the text after the stamp, with each line's own
    time, is what splitting that very line without any memo gives."""
    import random

    from vcrash.split.user_text import masked

    pieces = ["2025-01-02T03:04:05Z ", "stdout F ", "INFO 10-21 09:15:49 [core.py:715] ", "(EngineCore pid=1) ",
              "[rank0]: ", "```", "`", "\\", "[]", "](", "\r", "^M", "\x1b[31m", "[0m", "pid=3 ", "UTC ", "POST ",
              "Traceback (most recent call last):", "ValueError: x", "  File \"a.py\", line 1, in f",
              "{\"log\": \"x\"}", "x", " ", "2025-01-02T03:04:05Z"]
    rng = random.Random(5)
    rests = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 5))) for _ in range(4000)]
    rests += [line for path in sorted((ROOT / "samples").rglob("*.log"))
              for line in path.read_text(errors="replace").splitlines()[:400]]
    stamps = ["2026-12-04T10:00:00.123456789Z ", "2026-12-04T10:00:01.5Z ", "2026-12-04T10:00:02Z UTC ",
              "2026-12-04 10:00:03+00:00 "]
    kept, unkept = Splitter("x.log"), Splitter("x.log")
    hits = 0
    for rest in rests:
        for stamp in stamps:
            text = stamp + rest
            before = len(kept._memo)
            got = [_line_fields(line) for line in kept.split(1, 0, text)]
            hits += len(kept._memo) == before and (split_module._STAMPED, rest) in kept._memo
            want = [_line_fields(line) for line in unkept._split(1, 0, masked(text))]
            assert got == want, repr(text)
    assert hits > 3000  # most lines came from the kept parse


def test_shippers_json_records_hold_the_process_lines():
    """journald's JSON export ("MESSAGE", microseconds since the epoch) and Cloud Logging's
    ("textPayload", "timestamp") carry the process's own lines, as docker's "log" does."""
    import json

    line = "(EngineCore_DP0 pid=7) ERROR 11-30 12:56:34 [core.py:710] ValueError: boom"
    journald = json.dumps({"__REALTIME_TIMESTAMP": "1764842400117508", "_PID": "311", "MESSAGE": line})
    cloud = json.dumps({"textPayload": "Traceback (most recent call last):", "timestamp": "2026-12-04T10:00:00.5Z"})
    docker_in_journald = json.dumps({"__REALTIME_TIMESTAMP": "1764842400000000",
                                     "MESSAGE": json.dumps({"log": "\x1b[1;36m" + line + "\n", "time": "t"})})
    sp = Splitter("x.log")
    (a,) = sp.split(1, 0, journald)
    assert (a.stream.name, a.stream.pid, a.level, a.payload) == ("EngineCore_DP0", 7, "ERROR", "ValueError: boom")
    (b,) = sp.split(2, 0, cloud)
    assert (b.payload, b.time) == ("Traceback (most recent call last):", "2026-12-04T10:00:00.5Z")
    (c,) = sp.split(3, 0, journald.replace("ERROR 11-30 12:56:34 [core.py:710] ", ""))
    assert (c.payload, c.time) == ("ValueError: boom", "2025-12-04T10:00:00.117508Z")
    (d,) = sp.split(4, 0, docker_in_journald)  # its spelled-out colour code is JSON's escape, not text
    assert (d.stream.pid, d.payload) == (7, "ValueError: boom")


def test_a_json_logging_record_takes_its_time_from_time():
    # A JSONL formatter that names its time "time" (Dynamo's vLLM workers): the record's lines carry it.
    import json

    record = json.dumps({"time": "2025-09-02T15:53:31.943377Z", "level": "ERROR", "target": "log",
                         "message": "Traceback (most recent call last):\nValueError: boom"})
    lines = Splitter("x.log").split(1, 0, record)
    assert [(ln.payload, ln.level, ln.time) for ln in lines] == [
        ("Traceback (most recent call last):", "ERROR", "2025-09-02T15:53:31.943377Z"),
        ("ValueError: boom", "ERROR", "2025-09-02T15:53:31.943377Z")]


class _NoHits(dict):
    """A memo that never hands a parse back (the reference: every line parsed afresh)."""

    size = 1 << 30

    def get(self, key, default=None):
        return default

    def put(self, key, value):
        return value


def test_a_record_line_kept_by_its_text_splits_as_it_would_unkept():
    """The lines of shippers' JSON records, kept by their text with each record's time put back:
    what splitting each record with no memo at all gives."""
    import json
    import random

    pieces = ["(EngineCore pid=1) ", "(Worker_TP1 pid=9) ", "INFO 10-21 09:15:49 [core.py:715] ", "[rank0]: ",
              "\x1b[1;36m", "\\", "\r", "^C", "2025-01-02T03:04:05Z ", "Traceback (most recent call last):",
              "ValueError: x", '  File "a.py", line 1, in f', "x", " ", "{}", "pid=3 "]
    rng = random.Random(7)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 4))) for _ in range(1500)]
    texts += [line for path in sorted((ROOT / "samples").rglob("*.log"))
              for line in path.read_text(errors="replace").splitlines()[:200]]
    kept, unkept = Splitter("x.log"), Splitter("x.log")
    unkept._memo = _NoHits()
    for i, text in enumerate(texts):
        for record in ({"log": text + "\n", "stream": "stderr", "time": f"2026-12-04T10:00:{i % 60:02d}.{i}Z"},
                       {"log": text + "\n"},
                       {"MESSAGE": text, "__REALTIME_TIMESTAMP": str(1764842400000000 + i)},
                       {"log": f"{text}\n{texts[i - 1]}\n", "time": f"t{i}"}):
            line = json.dumps(record)
            got = [_line_fields(ln) for ln in kept.split(1, 0, line)]
            want = [_line_fields(ln) for ln in unkept.split(1, 0, line)]
            assert got == want, repr(line)
    assert sum(1 for key in kept._memo if isinstance(key, tuple) and key[0] is split_module._RECORD_LINE) > 100


def test_a_tagged_line_kept_by_what_follows_its_tag_splits_as_it_would_unkept():
    """A line behind a process tag or rank prefix (and a container's time, or not), kept by the
    text after it: what parsing it afresh gives, for every pid and rank (a round robin over many
    processes)."""
    import random

    pieces = ["INFO 10-21 09:15:49 [core.py:715] ", "WARNING 10-21 09:15:49 [core.py:7] ", "[rank0]: ",
              "(Worker pid=4) ", "\x1b[0m", "\x1b[1;36m", "\\", "\r", "^C", "Traceback (most recent call last):",
              "ValueError: x", '  File "a.py", line 1, in f', "    x()", " ", "pid=3 ", "`", "ERROR ", "DEBUG 10-21 "]
    tags = ["(EngineCore_DP0 pid={n}) ", "(Worker_TP{n} pid={n})", "\x1b[1;36m(APIServer pid={n})\x1b[0m ",
            "[rank{n}]: ", "[rank{n}]:", "(bad name pid={n}) ", "(RayWorkerWrapper pid={n}, ip=10.0.0.{n}) ",
            "2026-12-06T10:00:{s:02d}.{n}Z (EngineCore_DP0 pid={n}) ", "2026-12-06T10:00:{s:02d}Z [rank{n}]: ",
            "2026-12-06T10:00:{s:02d}.5Z stderr F \x1b[1;36m(Worker_TP{n} pid={n})\x1b[0;0m ",
            "2026-12-06T10:00:{s:02d}.{n}Z stdout P (EngineCore_DP0 pid={n}) ", "2026-12-06T10:00:00Z stdout F [rank{n}]:"]
    rng = random.Random(11)
    rests = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 4))) for _ in range(800)]
    rests += [line for path in sorted((ROOT / "samples").rglob("*.log"))
              for line in path.read_text(errors="replace").splitlines()[:150]]
    kept, unkept = Splitter("x.log"), Splitter("x.log")
    kept._memo = Memo(1 << 20)  # nothing forgotten: the counts below see every kept parse
    unkept._memo = _NoHits()
    for i, rest in enumerate(rests):
        for n in (i % 7, 1000 + i, 5):
            line = rng.choice(tags).format(n=n, s=n % 60) + rest
            got = [_line_fields(ln) for ln in kept.split(1, 0, line)]
            want = [_line_fields(ln) for ln in unkept.split(1, 0, line)]
            assert got == want, repr(line)
    assert sum(1 for key in kept._memo if isinstance(key, tuple) and key[0] is split_module._AFTER_TAG) > 100
    assert sum(1 for key in kept._memo if isinstance(key, tuple) and len(key) == 6
               and key[0] is split_module._STAMPED) > 50

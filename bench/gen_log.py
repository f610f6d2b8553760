"""Generate a large, realistic vLLM server log with planted crashes (for benchmarks).

    python bench/gen_log.py OUT.log --size 1G [--crashes 12] [--seed 1]

The log is a sequence of server runs ("segments"). Each run starts up (banner, version, config,
weight-loading tqdm, compile/capture timings), serves traffic (uvicorn access lines, metrics
lines, request logs, a few warnings and 500s, worker lines), sometimes logs a handled request
traceback, and ends in a crash of one of several kinds whose tracebacks are interleaved with
other processes' lines; then the server restarts. Prefix styles rotate per run:

  v011    0.11-style: `ESC[1;36m(APIServer pid=N)ESC[0;0m ` wrapper tag on every line of a process
          (log records, uvicorn lines and raw stderr tracebacks alike)
  v031    0.31-style: the tag is part of the vLLM log format; uvicorn lines and raw tracebacks
          are untagged
  docker  `docker logs -t` timestamps in front of 0.11-style lines

Every planted traceback is recorded in a sidecar `OUT.log.planted.json`:
  {"lines": N, "bytes": B, "planted": [{"line": L, "kind": ..., "type": ..., "stream": ...,
   "segment": S, "expect_rule": ... | null, "copy_of": L0 | null}, ...]}
`line` is the 1-based line of the region's first line (`Traceback (most recent call last):`,
`Fatal Python error: …` or `terminate called …`). `copy_of` marks the raw multiprocessing copy
of a logged traceback (vcrash collapses it into the first one's `duplicates`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

STYLES = ("v011", "v031", "docker")
VERSION = {"v011": "0.11.0", "v031": "0.31.0", "docker": "0.11.0"}
CRASH_KINDS = ("structured-output", "execute-model-timeout", "worker-oom", "segfault", "cuda-abort")

PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/chat/completions", "/v1/chat/completions",
         "/v1/models", "/health", "/metrics")
WORDS = ("the", "model", "server", "please", "summarize", "following", "text", "about", "error", "handling",
         "in", "distributed", "systems", "write", "a", "poem", "on", "cats", "explain", "how", "to", "debug",
         "python", "code", "translate", "into", "french", "list", "three", "reasons", "why", "sky", "blue")
# What users paste into prompts when their own jobs fail: the words the bulk scan looks for.
CRASH_WORDS = ("why", "did", "my", "job", "fail", "with", "Traceback (most recent call last):", "CUDA out of memory",
               "RuntimeError:", "NCCL error", "timed out", "timeout", "Killed", "signal 9", "took", "version",
               "Error", "fatal", "OOM", "Loading", "Compiling", "Exception", "segfault", "Fatal Python error",
               "KeyboardInterrupt", "/dev/shm", "the", "after", "upgrade", "please", "help")
SITE = "/usr/local/lib/python3.12/site-packages"


def parse_size(text: str) -> int:
    text = text.strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            text, mult = text[:-1], m
            break
    return int(float(text) * mult)


class Clock:
    def __init__(self, start: float):
        self.t = start

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def vllm(self) -> str:
        return time.strftime("%m-%d %H:%M:%S", time.gmtime(self.t))

    def iso(self) -> str:
        frac = int((self.t % 1) * 1e9)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.t)) + f".{frac:09d}Z"

    def c10(self) -> str:
        frac = int((self.t % 1) * 1e9)
        return time.strftime("%m%d %H:%M:%S", time.gmtime(self.t)) + f".{frac:09d}"


class Writer:
    """Formats lines in one prefix style and counts them."""

    def __init__(self, out, rng: random.Random):
        self.out = out
        self.rng = rng
        self.lines = 0
        self.bytes = 0
        self.style = "v011"
        self.clock = Clock(1760000000.0)
        self._buf: list[str] = []
        self._buf_bytes = 0

    # -- low level -------------------------------------------------------------------------
    def _put(self, text: str) -> int:
        """Write one physical line; returns its 1-based number."""
        if self.style == "docker":
            text = self.clock.iso() + " " + text
        line = text + "\n"
        self._buf.append(line)
        self._buf_bytes += len(line)
        self.lines += 1
        if self._buf_bytes > 1 << 20:
            self.flush()
        return self.lines

    def flush(self) -> None:
        data = "".join(self._buf).encode("utf-8")
        self.out.write(data)
        self.bytes += len(data)
        self._buf = []
        self._buf_bytes = 0

    def tag(self, proc) -> str:
        name, pid = proc
        if self.style == "v031":
            return f"({name} pid={pid}) "
        return f"\x1b[1;36m({name} pid={pid})\x1b[0;0m "

    def _wrap(self, proc, text: str, kind: str) -> str:
        # kind: log (vLLM record), uvicorn, raw (stderr / multiprocessing / tqdm)
        if proc is None:
            return text
        if self.style == "v031" and kind != "log":
            return text  # 0.31+: only vLLM records carry the tag
        return self.tag(proc) + text

    # -- line kinds ------------------------------------------------------------------------
    def log(self, proc, level: str, src: str, msg: str) -> int:
        return self._put(self._wrap(proc, f"{level} {self.clock.vllm()} [{src}] {msg}", "log"))

    def record(self, proc, level: str, src: str, lines: list[str]) -> list[int]:
        """A multi-line logger record: every line carries the header, CRLF-joined (NewLineFormatter)."""
        head = f"{level} {self.clock.vllm()} [{src}] "
        nums = []
        for i, text in enumerate(lines):
            cr = "\r" if i < len(lines) - 1 else ""
            nums.append(self._put(self._wrap(proc, head + text + cr, "log")))
        return nums

    def uvicorn(self, proc, level: str, msg: str) -> int:
        return self._put(self._wrap(proc, f"{level + ':':<9} {msg}" if len(level) < 8 else f"{level}: {msg}",
                                    "uvicorn"))

    def raw(self, proc, text: str) -> int:
        return self._put(self._wrap(proc, text, "raw"))

    def c10(self, rank: int, sev: str, src: str, msg: str) -> int:
        return self._put(f"[rank{rank}]:[{sev}{self.clock.c10()} {src}] {msg}")


# -- traceback bodies ---------------------------------------------------------------------------

def frames_engine_core(version: str) -> list[str]:
    return [
        f'  File "{SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core',
        "    engine_core.run_busy_loop()",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 728, in run_busy_loop',
        "    self._process_engine_step()",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 754, in _process_engine_step',
        "    outputs, model_executed = self.step_fn()",
        "                              ^^^^^^^^^^^^^^",
    ]


def tb_structured_output() -> list[str]:
    return ["Traceback (most recent call last):"] + frames_engine_core("") + [
        f'  File "{SITE}/vllm/v1/engine/core.py", line 284, in step',
        "    scheduler_output = self.scheduler.schedule()",
        f'  File "{SITE}/vllm/v1/core/sched/scheduler.py", line 522, in schedule',
        "    self.structured_output_manager.grammar_bitmask(",
        f'  File "{SITE}/vllm/v1/structured_output/__init__.py", line 231, in grammar_bitmask',
        "    raise ValueError(\"No valid structured output parameter found\")",
        "ValueError: No valid structured output parameter found",
    ]


def tb_execute_model_timeout() -> list[str]:
    return ["Traceback (most recent call last):"] + frames_engine_core("") + [
        f'  File "{SITE}/vllm/v1/engine/core.py", line 290, in step',
        "    model_output = self.execute_model_with_error_logging(",
        f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 243, in collective_rpc',
        "    result = get_response(w, dequeue_timeout, self.shutdown_event)",
        f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 226, in get_response',
        "    raise TimeoutError(f\"RPC call to {method} timed out.\") from e",
        "TimeoutError: RPC call to execute_model timed out.",
    ]


def tb_worker_oom() -> list[str]:
    return [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 666, in worker_busy_loop',
        "    output = func(*args, **kwargs)",
        f'  File "{SITE}/vllm/v1/worker/gpu_worker.py", line 447, in execute_model',
        "    output = self.model_runner.execute_model(scheduler_output, intermediate_tensors)",
        f'  File "{SITE}/torch/nn/modules/module.py", line 1773, in _wrapped_call_impl',
        "    return self._call_impl(*args, **kwargs)",
        f'  File "{SITE}/vllm/model_executor/layers/logits_processor.py", line 61, in forward',
        "    logits = logits.float()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 1 has a total capacity of "
        "79.19 GiB of which 1.02 GiB is free.",
    ]


def tb_engine_worker_failed() -> list[str]:
    return ["Traceback (most recent call last):"] + frames_engine_core("") + [
        f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 262, in collective_rpc',
        "    raise RuntimeError(",
        "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 3.91 GiB.', please check the "
        "stack trace above for the root cause",
    ]


def tb_executor_failed() -> list[str]:
    return ["Traceback (most recent call last):"] + frames_engine_core("") + [
        f'  File "{SITE}/vllm/v1/engine/core.py", line 305, in step',
        "    raise RuntimeError(\"Executor failed.\")",
        "RuntimeError: Executor failed.",
    ]


def tb_engine_dead() -> list[str]:
    return [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/engine/async_llm.py", line 439, in output_handler',
        "    outputs = await engine_core.get_output_async()",
        "              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/vllm/v1/engine/core_client.py", line 846, in get_output_async',
        "    raise self._format_exception(outputs) from None",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
        "root cause.",
    ]


def tb_stream_generator() -> list[str]:
    return [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/entrypoints/openai/serving_chat.py", line 574, in chat_completion_stream_generator',
        "    async for res in result_generator:",
        f'  File "{SITE}/vllm/v1/engine/async_llm.py", line 387, in generate',
        "    out = q.get_nowait() or await q.get()",
        f'  File "{SITE}/vllm/v1/engine/output_processor.py", line 59, in get',
        "    raise output",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
        "root cause.",
    ]


def tb_handled_bad_request(n: int) -> list[str]:
    return [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/entrypoints/openai/serving_chat.py", line 232, in create_chat_completion',
        "    ) = await self._preprocess_chat(",
        f'  File "{SITE}/vllm/entrypoints/openai/serving_engine.py", line 1121, in _preprocess_chat',
        "    prompt_inputs = await self._tokenize_prompt_input_async(",
        f'  File "{SITE}/vllm/entrypoints/openai/serving_engine.py", line 957, in _validate_input',
        "    raise ValueError(",
        f"ValueError: This model's maximum context length is 32768 tokens. However, your request has {32769 + n} "
        "input tokens. Please reduce the length of the input messages.",
    ]


def raw_process_copy(name: str, body: list[str]) -> list[str]:
    return [f"Process {name}:", "Traceback (most recent call last):",
            '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
            "    self.run()",
            '  File "/usr/lib/python3.12/multiprocessing/process.py", line 108, in run',
            "    self._target(*self._args, **self._kwargs)"] + body[1:]


def faulthandler_dump() -> list[str]:
    return [
        "Fatal Python error: Segmentation fault",
        "",
        "Thread 0x00007f3b2effd640 (most recent call first):",
        f'  File "{SITE}/torch/_inductor/compile_worker/subproc_pool.py", line 55 in _recv_msg',
        '  File "/usr/lib/python3.12/threading.py", line 1010 in run',
        "",
        "Current thread 0x00007f3c9a6b8740 (most recent call first):",
        f'  File "{SITE}/vllm/model_executor/layers/fused_moe/fused_moe.py", line 1242 in fused_experts_impl',
        f'  File "{SITE}/vllm/model_executor/layers/fused_moe/layer.py", line 1570 in forward_impl',
        f'  File "{SITE}/vllm/v1/worker/gpu_model_runner.py", line 2075 in execute_model',
        f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 666 in worker_busy_loop',
        "",
        "Extension modules: numpy.core._multiarray_umath, torch._C, torch._C._fft, zmq.backend.cython.context "
        "(total: 57)",
    ]


def cuda_abort() -> list[str]:
    return [
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect.",
        "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent "
        "call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f2c1b6b8e28 in "
        f"{SITE}/torch/lib/libc10.so)",
        "frame #1: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x2e8 "
        f"(0x7f2c1b7641d8 in {SITE}/torch/lib/libc10_cuda.so)",
        f"frame #2: <unknown function> + 0x1b34a (0x7f2c1b74b34a in {SITE}/torch/lib/libc10_cuda.so)",
        "frame #3: <unknown function> + 0x94ac3 (0x7f2c9d894ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
    ]


# -- the log ------------------------------------------------------------------------------------

# Traffic mixes (`--mix`): what share of requests log a WARNING or a "Received request" line,
# how often the server restarts, and how many TP workers write per-rank lines.
MIXES = {
    "default": dict(warn_share=0.0, request_log_share=None, restart_every=0, tp=0, rank_lines=0.0),
    "warning-heavy": dict(warn_share=0.05, request_log_share=None, restart_every=0, tp=0, rank_lines=0.0),
    "request-log-heavy": dict(warn_share=0.0, request_log_share=0.2, restart_every=0, tp=0, rank_lines=0.0),
    "restarts": dict(warn_share=0.0, request_log_share=None, restart_every=50 << 20, tp=0, rank_lines=0.0),
    "tp8": dict(warn_share=0.0, request_log_share=None, restart_every=0, tp=8, rank_lines=0.5),
    # A third of the clients go away before their answer: vLLM logs `Request <id> aborted.`.
    "client-aborts": dict(warn_share=0.0, request_log_share=None, restart_every=0, tp=0, rank_lines=0.0,
                          abort_share=0.33),
    # 20% of requests logged, their prompts full of crash words (users asking about their errors).
    "crash-worded-prompts": dict(warn_share=0.0, request_log_share=0.2, restart_every=0, tp=0, rank_lines=0.0,
                                 prompt_words="crash"),
}


class Generator:
    def __init__(self, out, target_bytes: int, crashes: int, seed: int, log_requests_every: int = 2,
                 warn_share: float = 0.0, request_log_share: float | None = None, restart_every: int = 0,
                 tp: int = 0, rank_lines: float = 0.0, metrics_every: float = 10.0, prompt_words: str = "plain",
                 abort_share: float = 0.0):
        self.abort_share = abort_share  # per request: the client disconnects, the request is aborted
        self.metrics_every = metrics_every  # seconds between metrics lines
        self.prompt_words = CRASH_WORDS if prompt_words == "crash" else WORDS  # what logged prompts say
        self.warn_share = warn_share  # per request: a per-request WARNING line
        self.request_log_share = request_log_share  # per request: "Received request" (None: every other run, half)
        self.restart_every = restart_every  # bytes between healthy restarts (0: only after crashes)
        self.tp = tp  # TP workers in every run (0: 2 for the crash kinds that need them)
        self.rank_lines = rank_lines  # per worker and second: a per-rank line
        self.rng = random.Random(seed)
        self.w = Writer(out, self.rng)
        self.target = target_bytes
        self.crashes = crashes
        self.planted: list[dict] = []
        self.segment = 0
        self.log_requests_every = log_requests_every
        self._req = 0
        self._pid = 1000
        self._access_pool = self._make_access_pool()

    def _make_access_pool(self) -> list[str]:
        pool = []
        for i in range(512):
            ip = f"10.{self.rng.randint(0, 9)}.{self.rng.randint(0, 255)}.{self.rng.randint(1, 254)}"
            port = self.rng.randint(30000, 65000)
            path = self.rng.choice(PATHS)
            method = "GET" if path in ("/v1/models", "/health", "/metrics") else "POST"
            pool.append(f'{ip}:{port} - "{method} {path} HTTP/1.1" 200 OK')
        return pool

    def pid(self) -> int:
        self._pid += self.rng.randint(3, 400)
        return self._pid

    def plant(self, line: int, kind: str, exc_type: str, stream: str, expect_rule=None, copy_of=None) -> None:
        self.planted.append({"line": line, "kind": kind, "type": exc_type, "stream": stream,
                             "segment": self.segment, "expect_rule": expect_rule, "copy_of": copy_of})

    # -- one server run ------------------------------------------------------------------
    def run(self) -> None:
        per_segment = self.target // max(self.crashes, 1)
        kinds = list(CRASH_KINDS)
        crashed = 0
        while self.w.bytes + self.w._buf_bytes < self.target:
            style = STYLES[self.segment % len(STYLES)]
            kind = kinds[crashed % len(kinds)] if crashed < self.crashes else None
            end_at = min(self.target, self.w.bytes + self.w._buf_bytes + per_segment)
            if kind is None:
                end_at = self.target  # the last run stays healthy up to the end
            if self.restart_every and end_at - self.w.bytes > self.restart_every:
                # A healthy restart before the crash is due (a redeploy, an autoscaler).
                end_at, kind = self.w.bytes + self.w._buf_bytes + self.restart_every, None
            else:
                crashed += kind is not None
            self.segment_run(style, kind, end_at)
            self.segment += 1
        self.w.flush()

    def segment_run(self, style: str, crash: str | None, end_at: int) -> None:
        w = self.w
        w.style = style
        version = VERSION[style]
        tp = 2 if crash in ("worker-oom", "segfault", "cuda-abort", "execute-model-timeout") else 1
        tp = max(tp, self.tp)
        api = ("APIServer", self.pid())
        eng_name = "EngineCore_DP0" if style != "v031" else "EngineCore"
        eng = (eng_name, self.pid())
        workers = [(f"Worker_TP{i}", self.pid()) for i in range(tp)] if tp > 1 else []
        self.startup(api, eng, workers, version)
        log_requests = self.segment % self.log_requests_every == 0
        handled_at = end_at - (end_at - w.bytes) // 2 if self.segment % 2 == 1 else None
        metrics_due = w.clock.t + self.metrics_every
        shm_due = w.clock.t + 10
        margin = min(200_000, (end_at - w.bytes - w._buf_bytes) // 10)
        while w.bytes + w._buf_bytes < end_at - margin:
            # one second of traffic
            n = self.rng.randint(15, 45)
            for _ in range(n):
                self.request(api, log_requests)
                w.clock.advance(1.0 / n)
            for worker in workers:
                if self.rank_lines and self.rng.random() < self.rank_lines:
                    w.log(worker, "INFO", "custom_all_reduce.py:203",
                          f"Registering {self.rng.randint(100, 9000)} cuda graph addresses")
            while w.clock.t >= metrics_due:
                metrics_due += self.metrics_every
                self.metrics(api)
            if w.clock.t >= shm_due:
                shm_due += 10  # its own cadence: vLLM logs it at most once a minute per worker
                if workers and self.rng.random() < 0.2:
                    w.log(workers[0], "INFO", "shm_broadcast.py:466",
                          "No available shared memory broadcast block found in 60 seconds. This typically happens "
                          "when some processes are hanging or doing some time-consuming work (e.g. compilation)")
            if self.rng.random() < 0.01:
                w.log(api, "WARNING", "protocol.py:81",
                      "The following fields were present in the request but ignored: {'top_k_custom'}")
            if self.rng.random() < 0.004:
                w.uvicorn(api, "INFO", f'{self.rng.choice(self._access_pool).split(" - ")[0]} - '
                                       '"POST /v1/chat/completions HTTP/1.1" 400 Bad Request')
            if handled_at is not None and w.bytes + w._buf_bytes >= handled_at:
                handled_at = None
                self.handled_traceback(api)
        if crash is not None:
            getattr(self, "crash_" + crash.replace("-", "_"))(api, eng, workers)
        self.shutdown(api, workers)

    def startup(self, api, eng, workers, version: str) -> None:
        w = self.w
        w.log(api, "INFO", "api_server.py:1839", f"vLLM API server version {version}")
        w.log(api, "INFO", "utils.py:233", "non-default args: {'model': '/models/Qwen2.5-7B-Instruct', "
                                           f"'tensor_parallel_size': {max(len(workers), 1)}, 'port': 8000}}")
        w.log(api, "INFO", "model.py:547", "Resolved architecture: Qwen2ForCausalLM")
        w.log(eng, "INFO", "core.py:644", "Waiting for init message from front-end.")
        w.log(eng, "INFO", "core.py:77", f"Initializing a V1 LLM engine (v{version}) with config: "
                                         "model='/models/Qwen2.5-7B-Instruct', speculative_config=None, "
                                         "tokenizer='/models/Qwen2.5-7B-Instruct', skip_tokenizer_init=False, "
                                         "tokenizer_mode=auto, revision=None, dtype=torch.bfloat16, "
                                         "max_seq_len=32768, download_dir=None, load_format=auto, "
                                         f"tensor_parallel_size={max(len(workers), 1)}, seed=0")
        for proc in workers or [eng]:
            w.log(proc, "INFO", "gpu_model_runner.py:2602", "Starting to load model /models/Qwen2.5-7B-Instruct...")
        for proc in (workers or [eng])[:1]:
            bar = "".join(f"\rLoading safetensors checkpoint shards: {p:3d}% Completed | {i}/4 [00:0{i}<00:0{4 - i},"
                          f"  1.10it/s]" for i, p in ((0, 0), (1, 25), (2, 50), (3, 75), (4, 100)))
            w.raw(proc, bar)
            w.raw(proc, "")
        for proc in workers or [eng]:
            w.log(proc, "INFO", "default_loader.py:267", "Loading weights took 3.21 seconds")
            w.log(proc, "INFO", "gpu_model_runner.py:2653", "Model loading took 7.1441 GiB and 3.6 seconds")
        w.log(eng, "INFO", "backends.py:548", "Using cache directory: /root/.cache/vllm/torch_compile_cache/a1b2")
        w.log(eng, "INFO", "backends.py:559", "Dynamo bytecode transform time: 5.61 s")
        w.log(eng, "INFO", "monitor.py:34", "torch.compile takes 12.02 s in total")
        w.log(eng, "INFO", "gpu_worker.py:298", "Available KV cache memory: 58.81 GiB")
        w.log(eng, "INFO", "kv_cache_utils.py:1087", "GPU KV cache size: 1,101,264 tokens")
        for proc in (workers or [eng])[:1]:
            w.raw(proc, "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 "
                        "[00:03<00:00, 18.40it/s]")
        w.log(eng, "INFO", "gpu_model_runner.py:3480", "Graph capturing finished in 5 secs, took 0.49 GiB")
        w.log(eng, "INFO", "core.py:210", "init engine (profile, create kv cache, warmup model) took 24.31 seconds")
        w.log(api, "INFO", "api_server.py:1634", "Supported_tasks: ['generate']")
        w.log(api, "INFO", "api_server.py:1912", "Starting vLLM API server 0 on http://0.0.0.0:8000")
        for route in ("/openapi.json", "/docs", "/health", "/v1/models", "/v1/chat/completions", "/v1/completions"):
            w.log(api, "INFO", "launcher.py:34", f"Route: {route}, Methods: GET, POST")
        w.uvicorn(api, "INFO", f"Started server process [{api[1]}]")
        w.uvicorn(api, "INFO", "Waiting for application startup.")
        w.uvicorn(api, "INFO", "Application startup complete.")
        w.clock.advance(30)

    def request(self, api, log_requests: bool) -> None:
        w = self.w
        self._req += 1
        if self.warn_share and self.rng.random() < self.warn_share:
            w.log(api, "WARNING", "serving_chat.py:186",
                  f"chatcmpl-{self._req:032x}: max_tokens was capped to the remaining context length "
                  f"({self.rng.randint(100, 8000)} tokens)")
        if self.abort_share and self.rng.random() < self.abort_share:
            w.log(api, "INFO", "async_llm.py:411", f"Request chatcmpl-{self._req:032x} aborted.")
        share = self.request_log_share if self.request_log_share is not None else (0.5 if log_requests else 0.0)
        if share and self.rng.random() < share:
            rid = f"chatcmpl-{self._req:032x}"
            words = " ".join(self.rng.choice(self.prompt_words) for _ in range(self.rng.randint(5, 40)))
            w.log(api, "INFO", "logger.py:49",
                  f"Received request {rid}: prompt: '<|im_start|>user\\n{words}<|im_end|>\\n', params: "
                  f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
                  f"temperature=0.7, top_p=0.8, top_k=20, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
                  f"bad_words=[], include_stop_str_in_output=False, ignore_eos=False, "
                  f"max_tokens={self.rng.randint(16, 4096)}, min_tokens=0, logprobs=None, prompt_logprobs=None, "
                  f"skip_special_tokens=True, spaces_between_special_tokens=True, truncate_prompt_tokens=None, "
                  f"structured_outputs=None, extra_args=None), prompt_token_ids: "
                  f"[{', '.join(str(self.rng.randint(0, 151000)) for _ in range(self.rng.randint(8, 24)))}], "
                  f"prompt_embeds shape: None, lora_request: None.")
            w.log(api, "INFO", "async_llm.py:321", f"Added request {rid}.")
        w.uvicorn(api, "INFO", self.rng.choice(self._access_pool))

    def metrics(self, api) -> None:
        r = self.rng
        self.w.log(api, "INFO", "loggers.py:127",
                   f"Engine 000: Avg prompt throughput: {r.uniform(100, 9000):.1f} tokens/s, Avg generation "
                   f"throughput: {r.uniform(50, 3000):.1f} tokens/s, Running: {r.randint(1, 64)} reqs, Waiting: "
                   f"{r.randint(0, 8)} reqs, GPU KV cache usage: {r.uniform(0, 90):.1f}%, Prefix cache hit rate: "
                   f"{r.uniform(0, 80):.1f}%")

    def noise(self, api, n: int) -> None:
        """Other processes' lines written in between (always on a tagged stream of their own)."""
        for _ in range(n):
            if self.w.style == "v031":  # uvicorn lines are untagged there: use a tagged record
                self._req += 1
                self.w.log(api, "INFO", "async_llm.py:321", f"Added request chatcmpl-{self._req:032x}.")
            else:
                self.w.uvicorn(api, "INFO", self.rng.choice(self._access_pool))

    def handled_traceback(self, api) -> None:
        w = self.w
        nums = w.record(api, "ERROR", "serving_chat.py:250",
                        ["Error in preprocessing prompt inputs"] + tb_handled_bad_request(self.segment))
        self.plant(nums[1], "handled", "ValueError", api[0])
        w.uvicorn(api, "INFO", f'{self.rng.choice(self._access_pool).split(" - ")[0]} - '
                               '"POST /v1/chat/completions HTTP/1.1" 400 Bad Request')

    # -- crashes -------------------------------------------------------------------------
    def engine_fatal(self, eng, body: list[str], exc_type: str, rule, interleave_with) -> int:
        """The logged copy (every line headed), then later the raw multiprocessing copy."""
        w = self.w
        nums = w.record(eng, "ERROR", "core.py:710", ["EngineCore encountered a fatal error."] + body)
        self.plant(nums[1], "engine-fatal", exc_type, eng[0], rule)
        return nums[1]

    def raw_copy(self, eng, body: list[str], exc_type: str, first: int, interleave_with) -> None:
        w = self.w
        lines = raw_process_copy(eng[0], body)
        for i, text in enumerate(lines):
            n = w.raw(eng, text)
            if i == 1:
                self.plant(n, "engine-fatal-raw-copy", exc_type, eng[0], None, copy_of=first)
            if interleave_with is not None and i % 3 == 2 and w.style != "v031":
                self.noise(interleave_with, 1)  # other processes keep writing in between

    def api_fallout(self, api, streams: int = 3) -> None:
        w = self.w
        nums = w.record(api, "ERROR", "async_llm.py:480", ["AsyncLLM output_handler failed."] + tb_engine_dead())
        self.plant(nums[1], "engine-dead", "EngineDeadError", api[0], "engine-dead")
        for i in range(streams):
            w.clock.advance(0.01)
            nums = w.record(api, "ERROR", "serving_chat.py:1145",
                            ["Error in chat completion stream generator."] + tb_stream_generator())
            if i == 0:
                self.plant(nums[1], "stream-generator", "EngineDeadError", api[0])
            else:
                self.plant(nums[1], "stream-generator", "EngineDeadError", api[0], copy_of=self.planted[-1]["line"]
                           if self.planted[-1]["copy_of"] is None else self.planted[-1]["copy_of"])
            w.uvicorn(api, "INFO", f'{self.rng.choice(self._access_pool).split(" - ")[0]} - '
                                   '"POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error')

    def crash_structured_output(self, api, eng, workers) -> None:
        body = tb_structured_output()
        first = self.engine_fatal(eng, body, "ValueError", "structured-output-no-valid-param", api)
        self.api_fallout(api)
        self.raw_copy(eng, body, "ValueError", first, api)

    def crash_execute_model_timeout(self, api, eng, workers) -> None:
        w = self.w
        for _ in range(5):
            w.clock.advance(60)
            w.log(eng, "INFO", "shm_broadcast.py:466",
                  "No available shared memory broadcast block found in 60 seconds. This typically happens when some "
                  "processes are hanging or doing some time-consuming work (e.g. compilation)")
            self.noise(api, 3)
        body = tb_execute_model_timeout()
        first = self.engine_fatal(eng, body, "TimeoutError", "v1-execute-model-rpc-timeout", api)
        self.api_fallout(api, 2)
        self.raw_copy(eng, body, "TimeoutError", first, api)

    def crash_worker_oom(self, api, eng, workers) -> None:
        w = self.w
        body = tb_worker_oom()
        for i, wk in enumerate(workers):
            nums = w.record(wk, "ERROR", "multiproc_executor.py:671", ["WorkerProc hit an exception."] + body)
            self.plant(nums[1], "worker-exception", "torch.OutOfMemoryError", wk[0],
                       copy_of=None if i == 0 else self.planted[-1]["line"])
            self.noise(api, 2)
        ebody = tb_engine_worker_failed()
        first = self.engine_fatal(eng, ebody, "RuntimeError", None, api)
        self.api_fallout(api, 1)
        self.raw_copy(eng, ebody, "RuntimeError", first, api)

    def crash_segfault(self, api, eng, workers) -> None:
        w = self.w
        victim = workers[-1]
        for i, text in enumerate(faulthandler_dump()):
            n = w._put(text)  # faulthandler writes to fd 2 directly: never tagged
            if i == 0:
                self.plant(n, "faulthandler", "Segmentation fault", "-")
            if i in (3, 8):
                self.noise(api, 2)
        w.clock.advance(1)
        w.log(eng, "ERROR", "multiproc_executor.py:150",
              f"Worker proc VllmWorker-{len(workers) - 1} died unexpectedly, shutting down executor.")
        body = tb_executor_failed()
        first = self.engine_fatal(eng, body, "RuntimeError", None, api)
        self.api_fallout(api, 1)
        self.raw_copy(eng, body, "RuntimeError", first, api)
        del victim

    def crash_cuda_abort(self, api, eng, workers) -> None:
        w = self.w
        for i, text in enumerate(cuda_abort()):
            n = w._put(text)  # C++ output on fd 2: never tagged
            if i == 0:
                self.plant(n, "cpp-abort", "c10::Error", "-")
            if i == 4:
                self.noise(api, 1)
        w.clock.advance(1)
        w.log(eng, "ERROR", "multiproc_executor.py:150",
              "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.")
        body = tb_executor_failed()
        first = self.engine_fatal(eng, body, "RuntimeError", None, api)
        self.api_fallout(api, 1)
        self.raw_copy(eng, body, "RuntimeError", first, api)

    def shutdown(self, api, workers) -> None:
        w = self.w
        for wk in workers:
            w.log(wk, "INFO", "multiproc_executor.py:702", "Parent process exited, terminating worker")
            w.log(wk, "INFO", "multiproc_executor.py:720", "WorkerProc shutting down.")
        w.clock.advance(5)
        for msg in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                    f"Finished server process [{api[1]}]"):
            w.uvicorn(api, "INFO", msg)
        w.raw(api, "/usr/lib/python3.12/multiprocessing/resource_tracker.py:279: UserWarning: resource_tracker: "
                   "There appear to be 1 leaked shared_memory objects to clean up at shutdown")
        w.raw(api, "  warnings.warn('resource_tracker: There appear to be %d '")
        if workers:
            w.c10(0, "W", "ProcessGroupNCCL.cpp:1538", "Warning: WARNING: destroy_process_group() was not called "
                  "before program exit, which can leak resources. (function operator())")
        w.clock.advance(120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--size", default="64M", help="target size, e.g. 300K, 64M, 1G")
    ap.add_argument("--crashes", type=int, default=None, help="crashes to plant (default: 1 per ~80 MB, >= 5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mix", choices=sorted(MIXES), default="default",
                    help="traffic mix: warning-heavy (5%% of requests log a WARNING), request-log-heavy (20%% "
                         "'Received request'), restarts (a start-up block every 50 MB), tp8 (8 workers, per-rank lines), "
                         "crash-worded-prompts (request-log-heavy, the prompts quoting errors), client-aborts (a "
                         "third of the requests aborted)")
    ap.add_argument("--abort-share", type=float, help="share of requests whose client goes away")
    ap.add_argument("--prompt-words", choices=("plain", "crash"), help="what the logged prompts say")
    # Each share of the mix on its own, over the preset's value.
    ap.add_argument("--warn-share", type=float, help="share of requests that log a per-request WARNING")
    ap.add_argument("--request-log-share", type=float, help="share of requests logged ('Received request')")
    ap.add_argument("--restart-every", help="a healthy restart every SIZE of log, e.g. 50M (0: none)")
    ap.add_argument("--tp", type=int, help="TP workers in every run")
    ap.add_argument("--rank-lines", type=float, help="per worker and second: chance of a per-rank line")
    ap.add_argument("--metrics-every", type=float, help="seconds between metrics lines (vLLM: 10)")
    args = ap.parse_args(argv)
    target = parse_size(args.size)
    crashes = args.crashes if args.crashes is not None else max(5, target // (80 << 20))
    mix = dict(MIXES[args.mix])
    for key in ("warn_share", "request_log_share", "tp", "rank_lines", "metrics_every", "prompt_words", "abort_share"):
        if getattr(args, key) is not None:
            mix[key] = getattr(args, key)
    if args.restart_every is not None:
        mix["restart_every"] = parse_size(args.restart_every)
    with open(args.out, "wb") as out:
        gen = Generator(out, target, crashes, args.seed, **mix)
        gen.run()
    meta = {"lines": gen.w.lines, "bytes": gen.w.bytes, "crashes": crashes, "seed": args.seed,
            "planted": gen.planted}
    with open(args.out + ".planted.json", "w") as fh:
        json.dump(meta, fh, indent=1)
    sys.stderr.write(f"{args.out}: {gen.w.bytes / 1e6:.1f} MB, {gen.w.lines} lines, {len(gen.planted)} planted "
                     f"tracebacks in {gen.segment} runs\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

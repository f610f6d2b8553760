"""Offline (`vllm.LLM`) structured-output triggers, run as a child:

    python -m vcrash.repro.offline MODEL [--bypass]

Prints one `[offline] RESULT {json}` line per variant. Imports vLLM (only ever run as a child).
"""
from __future__ import annotations

import json
import sys
import time


def result(name: str, outcome: str, detail: str = "", **kw) -> None:
    print("[offline] RESULT " + json.dumps({"name": name, "outcome": outcome,
                                              "detail": detail[:300], **kw}), flush=True)


def main(model: str, bypass: bool) -> int:
    t0 = time.monotonic()
    from vllm import LLM, SamplingParams
    import vllm.sampling_params as sp

    SOP = getattr(sp, "StructuredOutputsParams", None) or getattr(sp, "GuidedDecodingParams")
    field = "structured_outputs" if hasattr(sp, "StructuredOutputsParams") else "guided_decoding"
    import vllm

    kw = {}
    if tuple(int(x) for x in vllm.__version__.split("+")[0].split(".")[:2]) >= (0, 12):
        kw["kv_cache_memory_bytes"] = 64 * 1024 * 1024  # older CPU builds: VLLM_CPU_KVCACHE_SPACE
    llm = LLM(model=model, dtype="float32", max_model_len=1024, enforce_eager=True, **kw)
    result("engine-up", "ok", f"LLM() ready after {time.monotonic() - t0:.1f}s")

    def params(**kw):
        return SOP(**kw)

    variants = [
        ("no-field", lambda: params()),
        ("json-none", lambda: params(json=None)),
        ("json-object-false", lambda: params(json_object=False)),
        ("json-empty-string", lambda: params(json="")),
        ("grammar-empty-string", lambda: params(grammar="")),
        ("regex-empty-string", lambda: params(regex="")),
        ("valid-choice", lambda: params(choice=["yes", "no"])),
    ]
    for name, make in variants:
        try:
            p = make()
            out = llm.generate("Hello", SamplingParams(max_tokens=8, **{field: p}), use_tqdm=False)
            o = out[0].outputs[0]
            result(name, "accepted", f"finish_reason={o.finish_reason} text={o.text!r}")
        except Exception as e:  # noqa: BLE001 - every outcome is recorded
            result(name, "raised", f"{type(e).__name__}: {e}", exc_type=type(e).__name__)
        alive = _alive(llm)
        result(name + ":after", "alive" if alive else "dead")
        if not alive:
            return 3

    if bypass:
        _bypass(llm, SOP, field)
        result("bypass:after", "alive" if _alive(llm) else "dead")
    return 0


def _alive(llm) -> bool:
    from vllm import SamplingParams
    try:
        out = llm.generate("Hello", SamplingParams(max_tokens=4), use_tqdm=False)
        return bool(out and out[0].outputs)
    except Exception:  # noqa: BLE001
        return False


def _bypass(llm, SOP, field) -> None:
    """White box: a json_object=False constraint put straight into the engine core, past verify()."""
    try:
        from vllm import SamplingParams
        from vllm.v1.engine import EngineCoreRequest

        p = SOP(json_object=True)
        p.json_object = False
        if hasattr(p, "_backend"):
            p._backend = "xgrammar"
        s = SamplingParams(max_tokens=8, **{field: p})
        tok = llm.get_tokenizer()
        req = EngineCoreRequest(request_id="bypass-1", prompt_token_ids=tok.encode("Hello"),
                                mm_features=None, sampling_params=s, pooling_params=None,
                                arrival_time=time.time(), lora_request=None, cache_salt=None,
                                data_parallel_rank=None)
        core = llm.llm_engine.engine_core
        core.add_request(req)
        fin = None
        for _ in range(50):
            outs = core.get_output()
            for o in getattr(outs, "outputs", []) or []:
                if o.request_id == "bypass-1" and o.finish_reason is not None:
                    fin = o
            if fin:
                break
        if fin is None:
            result("bypass", "finish-not-observed", "no output for bypass-1 in 50 get_output() calls (the engine log shows what happened)")
        else:
            result("bypass", "request-failed" if "ERROR" in str(fin.finish_reason).upper() else "finished",
                   f"finish_reason={fin.finish_reason} tokens={len(fin.new_token_ids)}")
    except Exception as e:  # noqa: BLE001
        result("bypass", "raised", f"{type(e).__name__}: {e}", exc_type=type(e).__name__)


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main(args[0], "--bypass" in args))

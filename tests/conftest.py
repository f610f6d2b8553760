import os
import tempfile

# Compiled Hyperscan databases (vcrash/hsdb.py) go to a folder of this run, not the user's cache:
# subprocesses of the suite inherit it.
os.environ.setdefault("VCRASH_CACHE_DIR", tempfile.mkdtemp(prefix="vcrash-test-cache-"))


import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def gen_log():
    """bench/gen_log.py as a module: `gen_log.main([OUT, "--size", "3M", ...])` writes a server log."""
    spec = importlib.util.spec_from_file_location("gen_log", Path(__file__).resolve().parents[1] / "bench" / "gen_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

import os
import tempfile

# Compiled Hyperscan databases (vcrash/hsdb.py) go to a folder of this run, not the user's cache:
# subprocesses of the suite inherit it.
os.environ.setdefault("VCRASH_CACHE_DIR", tempfile.mkdtemp(prefix="vcrash-test-cache-"))

"""`vcrash scan --engine dask`: the local engine's per-log function as one Dask task per log.

Without a scheduler address a `LocalCluster` sized to the machine is started (one single-thread
worker process per core, bound to 127.0.0.1); with one (`--scheduler`, or the
`DASK_SCHEDULER_ADDRESS` variable) the user's cluster runs the tasks. Every worker must have the
same vcrash installed and be able to read the inputs (object storage, or a shared filesystem).

The rule pack is loaded once on the client and broadcast, so user rule folders need not exist on
the workers. At most `in_flight` tasks are submitted at a time and each result is released as it
arrives: the client holds the small result rows and never a log's content. A worker that dies
mid-scan has its tasks rerun by the scheduler; rows are stored by input index, so a rerun task is
never counted twice. A log that kills its worker on every try becomes an unreadable row.
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import uuid

from vcrash.errors import Fatal

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"
CONNECT_TIMEOUT_S = 10
CONNECT_TIMEOUT_ENV = "VCRASH_DASK_CONNECT_TIMEOUT"
WORKERS_TIMEOUT_S = 60
MIN_IN_FLIGHT = 256
IN_FLIGHT_PER_THREAD = 8

_STATES: dict[str, dict] = {}
_STATES_LOCK = threading.Lock()


def connect_timeout() -> float:
    """Seconds to wait for the scheduler (`VCRASH_DASK_CONNECT_TIMEOUT`, default 10)."""
    try:
        return max(0.5, float(os.environ.get(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_S)))
    except ValueError:
        return CONNECT_TIMEOUT_S


def _worker_version() -> str:
    from vcrash import __version__

    return __version__


def _scan_task(source, pack, run: str, selectors, redact: bool):
    """One log on a worker. The analysis state is built once per worker and run."""
    from vcrash.scan import scan_one, worker_state

    with _STATES_LOCK:
        state = _STATES.get(run)
        if state is None:
            _STATES.clear()  # one run at a time per worker keeps its memory flat
            state = _STATES[run] = worker_state(pack, selectors, redact)
    return scan_one(source, state)


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise Fatal("--engine dask needs dask and distributed: pip install 'vcrash[dask]'") from None
    return distributed


class DaskEngine:
    """A connected client (and the LocalCluster it started, if any), as a context manager."""

    def __init__(self, scheduler: str | None = None, workers: int | None = None):
        self.scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
        self.workers = workers
        self.client = None
        self.cluster = None

    def __enter__(self) -> "DaskEngine":
        distributed = _import_distributed()
        from vcrash.remote import public, scrub

        # The client's own log lines (reconnect attempts, a nanny restarting a killed worker)
        # are chatter: vcrash reports what matters itself.
        logging.getLogger("distributed").setLevel(logging.ERROR)
        try:
            if self.scheduler:
                # A bad address fails here; a Client built on one hangs in its finalizer.
                distributed.comm.resolve_address(self.scheduler)
                self.client = distributed.Client(self.scheduler, timeout=connect_timeout(), set_as_default=False)
            else:
                self.cluster = distributed.LocalCluster(
                    n_workers=self.workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                    host="127.0.0.1", dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
                self.client = distributed.Client(self.cluster, set_as_default=False)
        except Exception as exc:
            self.__exit__(None, None, None)
            where = f"the Dask scheduler at {public(self.scheduler)}" if self.scheduler else "a local Dask cluster"
            why = scrub(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
            raise Fatal(f"cannot reach {where}: {why}") from None
        self._check_workers()
        return self

    def _check_workers(self) -> None:
        from vcrash import __version__
        from vcrash.remote import public

        try:
            self.client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
        except Exception:
            self.__exit__(None, None, None)
            raise Fatal(f"no Dask worker joined the scheduler at {public(self.scheduler or 'the local cluster')} "
                        f"within {WORKERS_TIMEOUT_S} s") from None
        try:
            versions = set(self.client.run(_worker_version).values())
        except Exception as exc:
            self.__exit__(None, None, None)
            raise Fatal(f"the Dask workers cannot run vcrash ({type(exc).__name__}): "
                        f"install vcrash {__version__} on every worker") from None
        if versions - {__version__}:
            self.__exit__(None, None, None)
            raise Fatal(f"the Dask workers run vcrash {', '.join(sorted(versions))}, this client "
                        f"{__version__}: install the same version everywhere")

    def __exit__(self, *exc) -> bool:
        for thing in (self.client, self.cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:
                    pass
        self.client = self.cluster = None
        return False

    @property
    def threads(self) -> int:
        return sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values()) or 1

    @property
    def dashboard(self) -> str | None:
        import importlib.util

        if self.cluster is not None and importlib.util.find_spec("bokeh") is None:
            return None  # a local scheduler without bokeh serves no dashboard pages
        services = self.client.scheduler_info().get("services", {})
        return self.client.dashboard_link if "dashboard" in services else None

    def list_map(self, func, jobs: list) -> list:
        """Run listing jobs on the workers (results in job order)."""
        if not jobs:
            return []
        return self.client.gather(self.client.map(func, jobs, pure=False))

    def scan(self, sources: list, pack, *, select=None, ignore=None, redact: bool = True,
             progress: bool = False, skipped: list | None = None):
        """`scan.run_scan` on the cluster: rows in input order, non-logs appended to `skipped`."""
        from distributed import as_completed

        from vcrash.scan import _nullcontext, _progress, collect

        client = self.client
        run = uuid.uuid4().hex
        selectors = (tuple(select or ()), tuple(ignore or ()))
        # The pack as a computed task rather than scattered data: if every worker holding it dies,
        # the scheduler recomputes it from the task (scattered data would be lost for good).
        pack_f = client.submit(pickle.loads, pickle.dumps(pack), key=f"vcrash-pack-{run}")
        results: list = [None] * len(sources)
        index: dict[str, int] = {}
        pending = iter(enumerate(sources))

        def submit_next():
            for i, src in pending:
                key = f"vcrash-scan-{run}-{i}"
                index[key] = i
                return client.submit(_scan_task, src, pack_f, run, selectors, redact, key=key)
            return None

        in_flight = max(MIN_IN_FLIGHT, IN_FLIGHT_PER_THREAD * self.threads)
        first = [f for f in (submit_next() for _ in range(min(in_flight, len(sources)))) if f is not None]
        bar = _progress(len(sources), "scanning (dask)") if progress else None
        with bar or _nullcontext() as b:
            done = as_completed(first, loop=client.loop)
            for fut in done:
                i = index.pop(fut.key)
                results[i] = self._outcome(fut, sources[i])
                fut.release()
                nxt = submit_next()
                if nxt is not None:
                    done.add(nxt)
                if b is not None:
                    b.advance()
        pack_f.release()
        return collect(results, skipped)

    @staticmethod
    def _outcome(fut, source):
        from vcrash.report.findings import LogResult

        try:
            return fut.result()
        except Exception as exc:
            from vcrash.remote import scrub

            if type(exc).__name__ == "KilledWorker":
                why = "its Dask worker died on every try (KilledWorker)"
            elif isinstance(exc, ImportError):
                raise Fatal(f"a Dask worker cannot import vcrash: {exc}") from None
            else:
                first = scrub(str(exc).splitlines()[0]) if str(exc) else ""
                why = f"{type(exc).__name__}: {first}"
            return LogResult(path=source.display, status="unreadable",
                             error=f"{source.display}: analysis failed: {why}")

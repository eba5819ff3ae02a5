"""Where simulations run: in this process, on a local process pool, or on a Dask cluster; and
the cache of finished runs that ``sweep``, ``plan`` and ``compare`` share.

- **Executors.** ``local`` with one job runs each simulation in this process, in the order it
  was submitted, when its result is first waited for; ``local`` with ``N`` jobs forks ``N``
  worker processes; ``dask`` submits to the scheduler at ``--address`` (or to a loopback
  cluster of ``N`` workers it starts). A simulation is deterministic for its seed, so which
  process runs it never changes its result; callers decide *what* runs, never in a way that
  depends on the executor.
- **Stopping.** Local workers leave Ctrl-C to the parent, die on SIGTERM and exit as soon as
  the parent is gone; an interrupted command terminates them at once (:meth:`Executor.close`).
- **Cache.** One JSON file per finished run under ``DIR/cache/<key>.json``, written atomically
  (a killed command leaves only whole files). ``key`` is the SHA-256 of the infersim version,
  the inputs the run reads besides its scenario (the traces it replays, what the caller keeps
  of the run) and the resolved scenario (every profile and workload it uses written in): a
  rerun, or a command killed half-way, only simulates what is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Literal

from simulator.config.files import read_json
from simulator.config.loading import Catalog, ConfigError
from simulator.config.scenario import Scenario
from simulator.config.workload import TraceLoad
from simulator.version import __version__

ExecutorName = Literal["local", "dask"]

#: Where a worker finds profiles: a catalog (this process only: loaded profiles do not pickle),
#: or the user's hardware, model and stack folders (any executor).
Profiles = Catalog | tuple[str | None, str | None, str | None]


def catalog_of(profiles: Profiles) -> Catalog:
    if isinstance(profiles, Catalog):
        return profiles
    hardware, model, stack = (Path(d) if d else None for d in profiles)
    return Catalog(hardware, model, stack_dir=stack)


#: How often a worker checks that the process that started it still runs (seconds).
PARENT_POLL_S = 0.5

#: A Dask scheduler address: ``[protocol://]host:port``.
DASK_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ws|wss|ucx)://)?(?:\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")


def check_address(address: str | None) -> None:
    """A Dask scheduler address must be ``[protocol://]host:port`` (checked before connecting)."""
    if address is not None and not DASK_ADDRESS.match(address):
        raise ConfigError(f"--address {address!r}: expected a Dask scheduler address such as tcp://10.0.0.5:8786")


def inputs_digest(scenario: Scenario, kept: object) -> str:
    """What a run reads besides its (self-contained) scenario: the traces it replays, and what
    the caller keeps of it (``kept``: metric names, a tag); a change to any of them is a cache miss."""
    digest = hashlib.sha256(json.dumps(kept).encode())
    for klass in scenario.workload_classes:
        if isinstance(klass.load, TraceLoad):
            path = klass.load.path
            files = sorted(path.glob("*.json")) if path.is_dir() else [path]
            try:
                for file in files:
                    digest.update(file.name.encode() + file.read_bytes())
            except OSError as exc:
                raise ConfigError(f"{path}: cannot read the trace ({exc.strerror})") from None
    return digest.hexdigest()


def run_key(scenario_json: str, inputs: str) -> str:
    """The cache key of one run: its resolved scenario (JSON), its :func:`inputs_digest`, the version."""
    return hashlib.sha256(f"{__version__}\n{inputs}\n{scenario_json}".encode()).hexdigest()[:32]


class Cache:
    """One JSON file per finished run, written atomically: each row goes to a temporary file named
    ``<pid>-*.tmp`` by the process writing it (only a command's own process writes its cache), then
    is renamed into place, so a killed command leaves whole rows and at most a temporary file,
    which the next command on the folder deletes (its writer is no longer running)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        for path in folder.glob("*.tmp"):
            writer = path.name.split("-", 1)[0]
            if writer.isdigit() and not _running(int(writer)):
                path.unlink(missing_ok=True)

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached row, or None when absent or unreadable (then the run is simply repeated)."""
        path = self.folder / f"{key}.json"
        if not path.exists():
            return None
        try:
            row = read_json(path, allow_nonfinite=True)  # rows are written by json.dump: NaN for missing metrics
        except ConfigError:
            return None
        return row if isinstance(row, dict) else None

    def put(self, key: str, row: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=f"{os.getpid()}-", suffix=".tmp")
        with os.fdopen(handle, "w") as f:
            json.dump(row, f)
        os.replace(temporary, self.folder / f"{key}.json")


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


class _Deferred(Future):  # type: ignore[type-arg]
    """A run in this process, computed when first waited for."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        super().__init__()
        self.call = (fn, args)

    def compute(self) -> None:
        if self.done():
            return
        fn, args = self.call
        try:
            self.set_result(fn(*args))
        except Exception as exc:
            self.set_exception(exc)


class Executor:
    """Runs ``fn(*args)`` somewhere; :meth:`completed` yields futures as they finish."""

    #: Runs that execute at once (a caller may fill spare slots with runs it may need later).
    slots: int = 1

    def submit(self, fn: Callable[..., Any], *args: Any, key: str) -> Any:
        future = _Deferred(fn, args)
        return future

    def completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        for future in futures:
            future.compute()
            yield future

    def close(self, interrupted: bool) -> None:
        """Stop the executor: at once when ``interrupted`` (queued runs cancelled, running ones stopped)."""


def _worker_init(parent_pid: int) -> None:
    """In each local worker: leave Ctrl-C to the parent, die on SIGTERM (the parent's handler is
    inherited by fork), and exit as soon as the parent is gone (a killed command must not leave
    workers computing for minutes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


class _Pool(Executor):
    def __init__(self, jobs: int) -> None:
        self.slots = jobs
        self.pool = ProcessPoolExecutor(max_workers=jobs, initializer=_worker_init, initargs=(os.getpid(),))

    def submit(self, fn: Callable[..., Any], *args: Any, key: str) -> Any:
        return self.pool.submit(fn, *args)

    def completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        yield from as_completed(list(futures))

    def close(self, interrupted: bool) -> None:
        if not interrupted:
            self.pool.shutdown(wait=True)
            return
        processes = list((getattr(self.pool, "_processes", None) or {}).values())  # no public API before 3.14
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()
        self.pool.shutdown(wait=True, cancel_futures=True)  # the pool sees its workers gone: returns at once


class _Dask(Executor):
    def __init__(self, address: str | None, jobs: int) -> None:
        try:
            from distributed import Client, LocalCluster, as_completed
        except ImportError:
            raise ConfigError("the dask executor needs dask.distributed: pip install 'infersim[dask]'") from None
        check_address(address)
        self.cluster = None
        if address is None:
            # The scheduler's HTTP server on a free port: on the default 8787 a second cluster on the
            # machine (another sweep, plan or compare) would clash.
            self.cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=jobs, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0"
            )
            address = self.cluster.scheduler_address
        try:
            self.client = Client(address, timeout="5s")  # type: ignore[no-untyped-call]
        except Exception as exc:  # refused, timed out, or something that is not a scheduler answered
            raise ConfigError(
                f"no Dask scheduler answered at {address} within 5 s ({type(exc).__name__}: {exc})"
            ) from None
        self.as_completed = as_completed
        workers = self.client.scheduler_info().get("workers", {})
        self.slots = max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))

    def submit(self, fn: Callable[..., Any], *args: Any, key: str) -> Any:
        return self.client.submit(fn, *args, key=f"infersim-{key}", pure=False)

    def completed(self, futures: Iterable[Any]) -> Iterator[Any]:
        yield from self.as_completed(list(futures))  # type: ignore[no-untyped-call]

    def close(self, interrupted: bool) -> None:
        self.client.close(timeout=5 if interrupted else None)  # type: ignore[no-untyped-call]
        if self.cluster is not None:
            self.cluster.close(timeout=5 if interrupted else None)


def start(executor: ExecutorName, jobs: int, address: str | None) -> Executor:
    """The executor: ``dask`` (at ``address``, or a loopback cluster of ``jobs`` workers), a local
    pool of ``jobs`` workers, or this process for one local job."""
    if executor == "dask":
        return _Dask(address, jobs)
    return _Pool(jobs) if jobs > 1 else Executor()


class Runs:
    """Runs by key, each at most once: from the cache, already in flight, or submitted now.

    ``fn(payload, *args)`` computes a run's JSON-able result on the executor. A caller asks for
    the runs it needs (and, where slots are idle, for runs it may need next: *spare* runs, never
    waited for unless asked again) and then waits for the ones it needs; every result is cached
    as it arrives and reported to ``on_done(key, cached)``.
    """

    def __init__(
        self,
        executor: Executor,
        fn: Callable[..., dict[str, Any]],
        args: tuple[Any, ...],
        cache: Cache | None,
        on_done: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.executor, self.fn, self.args, self.cache = executor, fn, args, cache
        self.on_done = on_done or (lambda key, cached: None)
        self.results: dict[str, dict[str, Any]] = {}
        self.flight: dict[Any, str] = {}  # future -> key, in submission order

    def ask(self, key: str, payload: str, spare: bool = False) -> None:
        """Start the run ``key`` unless it is known or running; a spare run only on an idle slot
        of a parallel executor (this process never computes what no one waits for)."""
        if key in self.results or key in self.flight.values():
            return
        cached = self.cache.get(key) if self.cache else None
        if cached is not None:
            self.results[key] = cached
            self.on_done(key, True)
            return
        if spare and (self.executor.slots < 2 or len(self.flight) >= self.executor.slots):
            return
        self.flight[self.executor.submit(self.fn, payload, *self.args, key=key)] = key

    def wait(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The results of ``keys`` (each asked for before), as soon as all have finished."""
        wanted = list(keys)
        missing = set(wanted) - self.results.keys()
        if missing - set(self.flight.values()):
            raise KeyError(f"runs never asked for: {sorted(missing - set(self.flight.values()))}")
        while missing:
            for future in self.executor.completed(list(self.flight)):
                key = self.flight.pop(future)
                self.results[key] = future.result()
                self.on_done(key, False)  # before the cache: the caller's folder exists before its cache
                if self.cache is not None:
                    self.cache.put(key, self.results[key])
                missing.discard(key)
                if not missing:
                    break
        return {key: self.results[key] for key in wanted}

    def close(self, interrupted: bool = False) -> None:
        """Stop the executor; spare runs still in flight are stopped, not waited for."""
        self.executor.close(interrupted or bool(self.flight))

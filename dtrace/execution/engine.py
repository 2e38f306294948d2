"""Where tasks run: the only module that talks to a Dask scheduler (clients, clusters, futures).

:meth:`Engine.map` runs a picklable module-level function over small items, in-process or on a
cluster. The API maps two phases with it, the functions of :mod:`dtrace.execution.tasks`:

1. ingest: one task per batch of input files (paths travel, not bytes; workers read the
   files) → small :class:`~dtrace.ingest.cache.FileRecord` objects;
2. analyse: one task per partition of whole ranks → small tables per store group.

The client then runs the reduce on those small frames. (:func:`dtrace.events` builds a Dask
DataFrame of its own, with ``dask.dataframe.from_map``, and runs on whatever scheduler the user
computes it with.) Where the work runs, decided by :meth:`Engine.start` from the estimated work:

- ``scheduler=None`` (the default, "auto"): in-process when the job is small — one task, one
  core, or less time saved by spreading the estimated work over ``n`` cores (``work × (1 −
  1/n)``) than a local cluster costs to start, feed and stop (:data:`CLUSTER_COST_S`) — else a
  ``LocalCluster`` of single-threaded worker processes, one per core;
- ``"sync"``: in-process; ``"local"``: always a ``LocalCluster``;
- a scheduler address or ``scheduler_file``: an existing cluster; ``cluster="slurm"|"pbs"``:
  workers submitted as batch jobs through dask-jobqueue (the optional extra ``jobqueue``).

Dask is imported only when a cluster is used: an in-process run never imports it. A local
cluster's scratch space (Dask's worker folders) is a folder of the run under the temporary
folder (``TMPDIR``), removed when the engine closes.

A task that fails — a bug, or a worker process killed on every attempt (out of memory, a crash
in a native library) — never loses the run: its item is split by the caller's ``split`` (the
API splits a batch of files into single files, a partition into halves) and the pieces run
again; an item that cannot be split is reported as a :class:`TaskFailure` for its inputs alone.
A worker's death fails every task it held, the innocent ones too, so an item that cannot be
split and failed that way is first run once more alone on the cluster; a result lost after its
task finished (the worker holding it died) takes the same path. A local cluster keeps its
workers: a slow restart is waited for, a nanny that gave up is replaced (:func:`_keep_workers`),
so a run never waits on a cluster without workers. Progress, when asked for: a bar on a
terminal, a log line every :data:`LOG_EVERY_S` seconds otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TextIO

from ..core.fileio import read_regular
from ..core.memory import restore_pool, use_jemalloc, worker_env
from ..errors import DtraceError, UsageError

if TYPE_CHECKING:  # distributed is imported only when a cluster runs
    from distributed import Future

JOBQUEUE_CLUSTERS = ("slurm", "pbs")
CLUSTER_COST_S = 2.5
"""What a local cluster costs (start, workers importing dtrace, stop; measured ~2.3 s on 2 cores):
``scheduler=None`` starts one only when spreading the work saves more than this."""
PARSE_BYTES_PER_S = 80e6
"""Rough single-core speed of parsing and analysing an input, to estimate a job's work before
choosing where to run it (fitted on the cold in-process runs of bench/many_ranks.py: Kineto
ranks of 0.28 and 1.8 MB took 15 and 34 worker-ms each, ingest and analysis together)."""
PARSE_FILE_S = 0.012
"""Rough fixed cost of one input (open, fingerprint, decode set-up, cache entry, its part's analyses)."""
WORKER_MODULES = ("distributed", "dtrace.execution.tasks")
"""What a local cluster's worker imports before its first task (see :func:`prestart_workers`)."""
LOG_EVERY_S = 10.0
CONNECT_TIMEOUT_S = 30.0
"""How long to try to reach a running scheduler (``scheduler=ADDR``, ``scheduler_file=``)."""
WATCH_S = 2.0
"""How often a local cluster is checked for workers it lost for good (:func:`_keep_workers`)."""
WORKER_CONFIG: dict[str, Any] = {"distributed.worker.profile.enabled": False}
"""Dask settings of the workers dtrace starts (a local cluster, dask-jobqueue jobs, ``jobs/``).
Dask's statistical profiler samples each worker's task thread every 10 ms for the dashboard's
profile page, which dtrace never shows: off, the 256-rank real job runs ~6 % faster (bench/RESULTS.md)."""


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """Where to run. ``scheduler``: ``None`` (auto), ``"sync"``, ``"local"`` or an address.

    ``cluster`` (``"slurm"`` or ``"pbs"``) submits ``jobs`` batch jobs of Dask workers through
    dask-jobqueue; ``cluster_options`` are keyword arguments of its ``SLURMCluster`` /
    ``PBSCluster`` (``cores``, ``memory``, ``queue``, ``account``, ``walltime``,
    ``interface``, ...), defaults from dask's ``jobqueue`` configuration, else one core and
    4 GiB per job. Each core is one single-threaded worker process. ``startup_timeout``:
    seconds to wait for the first worker of the submitted jobs. ``progress``: ``True`` (a bar on
    a terminal, log lines elsewhere), ``False``, or a stream to write to.
    """

    scheduler: str | None = None
    scheduler_file: str | None = None
    workers: int | None = None
    progress: Any = False
    retries: int = 2
    cluster: str | None = None
    jobs: int | None = None
    cluster_options: Mapping[str, Any] | None = None
    startup_timeout: float = 600.0

    def __post_init__(self) -> None:
        if self.scheduler in ("", "auto"):
            object.__setattr__(self, "scheduler", None)
        if self.scheduler and self.scheduler_file:
            raise UsageError("give either scheduler or scheduler_file, not both")
        if self.workers is not None and self.workers < 1:
            raise UsageError("workers must be >= 1")
        if self.cluster is not None:
            if self.cluster not in JOBQUEUE_CLUSTERS:
                raise UsageError(f"unknown cluster {self.cluster!r}; choose one of: {', '.join(JOBQUEUE_CLUSTERS)}")
            if self.scheduler or self.scheduler_file:
                raise UsageError("give either a cluster to submit jobs to or a scheduler to connect to, not both")
        elif self.jobs is not None or self.cluster_options:
            raise UsageError(
                "jobs and job settings need a cluster to submit to (--cluster slurm|pbs, cluster='slurm'|'pbs')"
            )
        if self.jobs is not None and self.jobs < 1:
            raise UsageError("jobs must be >= 1")

    @property
    def auto(self) -> bool:
        return self.scheduler is None and not self.scheduler_file and not self.cluster


def scheduler_address(path: str) -> str:
    """The scheduler address a Dask scheduler file holds, read once.

    Dask's ``Client(scheduler_file=...)`` waits for a missing file for ever and asserts on a
    garbage one; here a missing, unreadable (a FIFO, a device: refused without reading) or
    malformed file is a one-line :class:`UsageError`.

    Examples
    --------
    >>> import json, tempfile
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    >>> _ = f.write(json.dumps({"address": "tcp://10.0.0.1:8786"})); f.close()
    >>> scheduler_address(f.name)
    'tcp://10.0.0.1:8786'
    >>> scheduler_address("/nonexistent.json")
    Traceback (most recent call last):
    dtrace.errors.UsageError: scheduler file /nonexistent.json: no such file (start the scheduler first: dask scheduler --scheduler-file /nonexistent.json)
    """
    try:
        doc = json.loads(read_regular(path, limit=1 << 20))
    except FileNotFoundError:
        raise UsageError(
            f"scheduler file {path}: no such file (start the scheduler first: dask scheduler --scheduler-file {path})"
        ) from None
    except OSError as exc:
        raise UsageError(f"scheduler file {path}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, RecursionError):
        raise UsageError(f"scheduler file {path}: not a Dask scheduler file (not JSON)") from None
    address = doc.get("address") if isinstance(doc, dict) else None
    if not isinstance(address, str) or "://" not in address:
        raise UsageError(f'scheduler file {path}: not a Dask scheduler file (no "address": "PROTOCOL://HOST:PORT")')
    return address


def _connect(client: Any, address: str, where: str) -> Any:
    """A Dask ``Client`` of the scheduler at ``address``, or a one-line :class:`DtraceError`
    after :data:`CONNECT_TIMEOUT_S` seconds."""
    try:
        return client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, asyncio.TimeoutError, ValueError, TypeError) as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise DtraceError(
            f"cannot connect to the Dask scheduler at {address}{where} within {CONNECT_TIMEOUT_S:g} s: {why}"
        ) from None


@dataclass
class TaskFailure:
    """An item whose task failed even alone (the worker died, or the task raised)."""

    item: Any
    reason: str


def local_workers(spec: ClusterSpec) -> int:
    return spec.workers or max(1, os.cpu_count() or 1)


def wants_cluster(spec: ClusterSpec, work_s: float, tasks: int) -> bool:
    """Whether :meth:`Engine.start` starts (or joins) a cluster for this much work: always but
    for ``"sync"`` when the spec names one, else when spreading the work over the local cores saves
    more than :data:`CLUSTER_COST_S` (see the module docstring)."""
    if spec.scheduler == "sync":
        return False
    if not spec.auto:
        return True
    n = local_workers(spec)
    return not (tasks <= 1 or n <= 1 or work_s * (1 - 1 / n) <= CLUSTER_COST_S)


def estimated_work(sizes: Sequence[int]) -> float:
    """Seconds of one core to parse and analyse inputs of these content sizes (bytes), none cached."""
    return sum(sizes) / PARSE_BYTES_PER_S + len(sizes) * PARSE_FILE_S


_prestarted: tuple[Any, ...] | None = None
"""The environment and import path :func:`prestart_workers` gave the process server the workers
fork from (None: no server). A cluster started after either changed (credentials set, a pool
chosen, a folder put on ``sys.path``) spawns its workers as usual: a forked worker would see the
server's."""


def _server_env() -> tuple[Any, ...]:
    """What a worker started now would find: the environment (with the workers' settings,
    :func:`~dtrace.core.memory.worker_env`) and the import path."""
    return tuple(sorted({**os.environ, **worker_env()}.items())), tuple(sys.path)


def _forked_workers() -> bool:
    """Whether a local cluster started now forks its workers from the prestarted server."""
    return _prestarted is not None and _prestarted == _server_env()


def prestart_workers(spec: ClusterSpec, work_s: float, tasks: int) -> bool:
    """Launch the server process that a local cluster's workers will fork from, if the spec and
    the estimated work call for a local cluster (:func:`wants_cluster`).

    It imports Dask's worker and dtrace's tasks (:data:`WORKER_MODULES`) at once, in its own
    process, while the caller goes on (the CLI imports pandas and plans meanwhile); each worker
    then forks from it with everything imported instead of starting an interpreter and importing
    it all again (~1 s per worker). The server gets the workers' environment (Arrow's pool, see
    :func:`~dtrace.core.memory.worker_env`) when it starts: it holds for everything forked from it.
    Where the platform has no ``forkserver`` this does nothing and workers are spawned as usual.
    Returns whether the server runs.
    """
    global _prestarted
    if _prestarted is not None:
        return _forked_workers()
    local = spec.scheduler in (None, "local") and not spec.scheduler_file and not spec.cluster
    if not local or not wants_cluster(spec, work_s, tasks):
        return False
    import multiprocessing
    from multiprocessing import forkserver

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_MODULES))
    before = dict(os.environ)
    want = _server_env()
    os.environ.update(worker_env())  # the server's environment is this process's when it starts
    try:
        forkserver.ensure_running()
    except OSError:
        return False
    finally:
        _restore_environ(before)
    _prestarted = want
    return True


class Engine:
    """Maps functions over items, in-process or on a Dask cluster; use as a context manager.

    ``start(work_s, tasks)`` decides where to run (see the module docstring) and starts the
    cluster if one is needed; :meth:`map` then runs tasks there.
    """

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.client: Any = None
        self._cluster: Any = None
        self._scratch: str | None = None
        self._watch: Any = None  # keeps a local cluster's workers (see _keep_workers)
        self._config: Any = None  # dask settings held while a local cluster runs
        self.mode = "in-process"
        self._pool: Any = None  # Arrow's default pool before this engine (core.memory)
        self._stopping: threading.Thread | None = None  # see stop_in_background
        self._environ: dict[str, str] | None = None  # the process's environment before a local cluster

    def __enter__(self) -> "Engine":
        self._pool = use_jemalloc()
        return self

    def start(self, work_s: float = float("inf"), tasks: int = 2) -> "Engine":
        """Start what the spec and the estimated work (seconds on one core, ``tasks`` tasks) call for."""
        s = self.spec
        if not wants_cluster(s, work_s, tasks):
            return self
        from distributed import Client, LocalCluster

        if s.cluster:
            self._cluster = _jobqueue_cluster(s)
            try:
                self._cluster.scale(jobs=s.jobs or 1)
                self.client = Client(self._cluster)  # type: ignore[no-untyped-call]  # distributed is untyped
                self.client.wait_for_workers(1, timeout=s.startup_timeout)
            except BaseException as exc:
                self.__exit__(None, None, None)  # cancels the submitted jobs
                if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
                    raise DtraceError(
                        f"no Dask worker of the {s.jobs or 1} {s.cluster} job(s) connected within "
                        f"{s.startup_timeout:g} s: check the queue and the jobs' logs"
                    ) from None
                raise
            self.mode = f"{s.cluster} jobs"
        elif s.scheduler_file:
            self.client = _connect(Client, scheduler_address(s.scheduler_file), f" (from {s.scheduler_file})")
            self.mode = "cluster"
        elif s.scheduler and s.scheduler != "local":
            self.client = _connect(Client, s.scheduler, "")
            self.mode = "cluster"
        else:
            import dask

            # Dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers, which turns off glibc's
            # adaptive mmap threshold: every large numpy array is then mmap'ed and unmapped again,
            # and the analyses run twice slower (measured: 2.3 s vs 1.2 s per 600k-event partition).
            # The workers get dtrace's heap settings instead (worker_env: MALLOC_SETTINGS, unless
            # the user set their own), or glibc's defaults.
            # Dask's scratch space (worker folders, spilled data) goes to a folder of this run under
            # the temporary folder (TMPDIR), removed when the run ends, not to a shared
            # /tmp/dask-scratch-space that other runs and users write to as well.
            self._scratch = tempfile.mkdtemp(prefix="dtrace-dask-")
            # the nannies copy the workers' environment (pre-spawn-environ: dtrace's MALLOC_* and
            # Arrow pool, Dask's OMP_NUM_THREADS=1, ...) into this process's: put back at the end,
            # so that the caller's later subprocesses do not inherit it
            self._environ = dict(os.environ)
            # a worker restarting slowly (a loaded machine) is not dropped by the cluster while
            # this engine runs: dropping it kills it when it comes back, with the task it was
            # given (_keep_workers replaces a nanny that gave up)
            # (the workers' own settings, WORKER_CONFIG, held as long: a nanny hands its settings
            # to the worker it starts, a nanny started later to replace one included)
            self._config = dask.config.set({"distributed.deploy.lost-worker-timeout": "1 day", **WORKER_CONFIG})
            with dask.config.set(
                {
                    **({"distributed.worker.multiprocessing-method": "forkserver"} if _forked_workers() else {}),
                    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                    **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in worker_env().items()},
                    "temporary-directory": self._scratch,
                }
            ):
                self._cluster = LocalCluster(  # type: ignore[no-untyped-call]  # distributed is untyped
                    n_workers=local_workers(s),
                    threads_per_worker=1,
                    processes=True,
                    # no dashboard: dtrace shows its own progress and never a dashboard's address,
                    # and where bokeh is installed serving one costs the start 0.25 s (the scripts
                    # in jobs/ pass --no-dashboard). The scheduler's HTTP server (health, metrics)
                    # stays, on a free local port: without an address it takes 8787, which another
                    # cluster may hold (it then retries elsewhere and leaks the socket it tried).
                    dashboard_address="127.0.0.1:0",
                    scheduler_kwargs={"dashboard": False},
                    silence_logs=logging.ERROR,
                    local_directory=self._scratch,
                )
            self.client = Client(self._cluster)  # type: ignore[no-untyped-call]  # distributed is untyped
            self.mode = "local cluster"
            self._watch = _keep_workers(self._cluster)
        return self

    def stop_in_background(self) -> None:
        """Start stopping the workers and the cluster in a thread, so that the client's own work
        after the last task (the reduce) overlaps it; :meth:`__exit__` waits for it."""
        if self.client is None and self._cluster is None:
            return
        self._stopping = threading.Thread(target=self._stop_cluster, name="dtrace-engine-stop", daemon=True)
        self._stopping.start()

    def _stop_cluster(self) -> None:
        if self._watch is not None:
            with contextlib.suppress(Exception):
                self._cluster.loop.add_callback(self._watch.stop)
            self._watch = None
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.close()
        self.client = self._cluster = None

    def __exit__(self, *exc: object) -> None:
        if self._stopping is not None:
            self._stopping.join()
            self._stopping = None
        else:
            self._stop_cluster()
        if self._config is not None:
            self._config.__exit__(None, None, None)  # dask's settings as they were
            self._config = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        if self._environ is not None:
            _restore_environ(self._environ)
            self._environ = None
        restore_pool(self._pool)  # the process's default Arrow pool as it was
        self._pool = None

    @property
    def parallelism(self) -> int:
        """Workers a job's partitions are laid out for: the cluster's, else this machine's cores
        (an in-process run lays them out as a local cluster would, so stored results match)."""
        return self.n_workers if self.client is not None else local_workers(self.spec)

    @property
    def n_workers(self) -> int:
        if self.client is None:
            return 1
        return len(self.client.scheduler_info().get("workers", {})) or 1

    def map(
        self,
        func: Callable[..., Any],
        items: Sequence[Any],
        *args: Any,
        label: str = "",
        split: Callable[[Any], list[Any] | None] | None = None,
    ) -> list[Any]:
        """``[func(item, *args) for item in items]`` in item order, where a failed item is
        replaced by the results of its pieces (``split(item)``, tried one by one) or, when it
        cannot be split, by a :class:`TaskFailure`."""
        if not items:
            return []
        progress = _Progress(self.spec.progress, label, len(items))
        try:
            if self.client is None:
                return self._map_local(func, list(items), args, split, progress)
            return self._map_cluster(_OnWorker(func), list(items), args, split, progress)
        finally:
            progress.close()

    def _map_local(
        self,
        func: Callable[..., Any],
        items: list[Any],
        args: tuple[Any, ...],
        split: Callable[[Any], list[Any] | None] | None,
        progress: "_Progress",
    ) -> list[Any]:
        out: list[Any] = []
        for item in items:
            try:
                out.append(func(item, *args))
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # noqa: BLE001 - a bug in one task: isolate its inputs
                pieces = split(item) if split else None
                if pieces:
                    out.extend(self._map_local(func, pieces, args, split, _Progress(False, "", 0)))
                else:
                    out.append(TaskFailure(item, _reason(exc)))
            progress.advance()
        return out

    def _map_cluster(
        self,
        func: Callable[..., Any],
        items: list[Any],
        args: tuple[Any, ...],
        split: Callable[[Any], list[Any] | None] | None,
        progress: "_Progress",
    ) -> list[Any]:
        from distributed import as_completed

        results: dict[tuple[int, ...], Any] = {}
        futures: dict["Future[Any]", tuple[tuple[int, ...], Any]] = {}
        for i, item in enumerate(items):
            f = self.client.submit(func, item, *args, pure=False, retries=self.spec.retries)
            futures[f] = ((i,), item)
        done = as_completed(list(futures))  # type: ignore[no-untyped-call]  # distributed is untyped
        top = set(range(len(items)))
        suspects: list[tuple[tuple[int, ...], Any]] = []
        for f in done:
            path, item = futures.pop(f)
            exc = _outcome(f, path, results)
            if exc is not None:
                pieces = split(item) if split else None
                if pieces:
                    for j, piece in enumerate(pieces):
                        g = self.client.submit(func, piece, *args, pure=False, retries=self.spec.retries)
                        futures[g] = (path + (j,), piece)
                        done.add(g)  # type: ignore[no-untyped-call]  # distributed is untyped
                elif _killed(exc) or _lost(exc):
                    suspects.append((path, item))
                else:
                    results[path] = TaskFailure(item, _reason(exc))
            f.release()
            if path[0] in top and not any(p[0] == path[0] for p, _ in futures.values()):
                top.discard(path[0])
                progress.advance()
        # A dead worker takes every task it held with it, so a task can be blamed for a death it
        # did not cause. Each one is run again alone on the cluster: what dies then, failed.
        for path, item in suspects:
            f = self.client.submit(func, item, *args, pure=False, retries=self.spec.retries)
            try:
                results[path] = f.result()
            except Exception as exc:  # noqa: BLE001 - reported for this item alone
                results[path] = TaskFailure(item, _reason(exc))
            finally:
                f.release()
        return [results[k] for k in sorted(results)]


class TaskInterrupted(Exception):
    """A task on a worker raised ``KeyboardInterrupt`` (code it ran, a user's analysis say)."""


class _OnWorker:
    """A task function as run on a Dask worker (its tasks keep the function's name as key prefix).

    Signals reach a process's main thread only and Dask runs tasks in other threads, so a
    ``KeyboardInterrupt`` in a task is not the user's Ctrl-C (that one stops the client) but an
    exception raised by the code the task ran. Left alone it would kill the worker, and every
    retry another one; as :class:`TaskInterrupted` it fails its task like any other exception.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.__name__ = getattr(func, "__name__", "task")

    def __call__(self, item: Any, *args: Any) -> Any:
        try:
            return self.func(item, *args)
        except KeyboardInterrupt:
            raise TaskInterrupted("KeyboardInterrupt raised by the code the task ran (not a Ctrl-C)") from None


def _keep_workers(cluster: Any, every_s: float = WATCH_S) -> Any:
    """Keep a local cluster at its size: a worker process killed (out of memory, a crash) is
    restarted by its nanny, but a nanny whose restart failed closes for good, and a run whose
    workers are all gone would wait forever. Every ``every_s`` seconds, on the cluster's event
    loop, such a nanny is replaced by a new one. (Dask would also drop a worker whose restart
    outlasts ``distributed.deploy.lost-worker-timeout``, killing it if it comes back late — and
    a task it runs; :meth:`Engine.start` sets that timeout out of reach for the run.) Returns
    the periodic callback (``stop()``)."""
    from tornado.ioloop import PeriodicCallback

    def check() -> None:
        if getattr(cluster.status, "name", "") != "running":
            return
        for name, nanny in list(cluster.workers.items()):
            if getattr(nanny.status, "name", "") in ("closed", "failed"):  # it gave up restarting its worker
                del cluster.workers[name]
        if len(cluster.workers) < len(cluster.worker_spec):
            cluster.scale(len(cluster.worker_spec))  # starts the workers of the spec that are gone

    watch = PeriodicCallback(check, every_s * 1000)
    cluster.loop.add_callback(watch.start)
    return watch


def _outcome(f: "Future[Any]", path: tuple[int, ...], results: dict[tuple[int, ...], Any]) -> BaseException | None:
    """Store a completed task's result under ``path``; else return why it failed (never raise).

    A result can be lost after its task finished (the worker holding it died): the future is
    pending again while Dask computes it once more, and fetching it waits for that — which may
    itself fail (``KilledWorker``, a cancelled future): that failure is returned like any other.
    """
    try:
        results[path] = f.result()
    except Exception as exc:  # noqa: BLE001 - the task's own error, or its result was lost
        return exc
    return None


def _lost(exc: BaseException | None) -> bool:
    """Whether a task's result was lost with the worker or the connection that held it (a
    cancelled future, a closed comm): the task is run again alone before it is blamed."""
    return type(exc).__name__ in ("CancelledError", "FutureCancelledError", "CommClosedError")


def _killed(exc: BaseException | None) -> bool:
    """Whether a task failed because the worker process running it died (Dask's ``KilledWorker``)."""
    return type(exc).__name__ == "KilledWorker"


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "the task failed"
    name = type(exc).__name__
    if _killed(exc):
        return (
            "the worker process died each time it ran this input (killed for using too much memory, or a "
            "crash in a native library)"
        )
    if isinstance(exc, TaskInterrupted):
        return str(exc)
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
    return f"internal error ({name}: {' '.join(str(exc).split())}{where})"


class _Progress:
    """A progress bar on a terminal; otherwise a log line every :data:`LOG_EVERY_S` seconds (and a
    last one when the phase ends), so a short run prints nothing and a long batch job shows it
    is alive."""

    def __init__(self, enabled: Any, label: str, total: int) -> None:
        self.stream: TextIO | None = None
        if enabled is True:
            self.stream = sys.stderr
        elif enabled not in (False, None) and hasattr(enabled, "write"):
            self.stream = enabled
        self.label, self.total, self.done = label, total, 0
        self.t0 = self.last = time.monotonic()
        self.logged = False
        self.tty = bool(self.stream is not None and getattr(self.stream, "isatty", lambda: False)())
        if self.stream is not None and total and self.tty:
            self._show()

    def advance(self) -> None:
        self.done += 1
        if self.stream is not None:
            self._show(force=self.done == self.total)

    def _show(self, force: bool = False) -> None:
        assert self.stream is not None
        now = time.monotonic()
        elapsed = now - self.t0
        if self.tty:
            width = 30
            fill = int(width * self.done / max(self.total, 1))
            self.stream.write(
                f"\r{self.label} [{'#' * fill}{' ' * (width - fill)}] {self.done}/{self.total} {elapsed:5.1f} s"
            )
            self.stream.flush()
        elif (force and self.logged) or now - self.last >= LOG_EVERY_S:
            self.last, self.logged = now, True
            self.stream.write(f"dtrace: {self.label}: {self.done}/{self.total} done, {elapsed:.1f} s\n")
            self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.tty and self.total:
            self.stream.write("\n")
            self.stream.flush()


def _restore_environ(before: Mapping[str, str]) -> None:
    """Make ``os.environ`` what it was (``before``): the variables set since removed, the changed
    ones put back."""
    for k in [k for k in os.environ if k not in before]:
        del os.environ[k]
    for k, v in before.items():
        if os.environ.get(k) != v:
            os.environ[k] = v


def _env_name(key: str) -> str:
    """The environment variable that sets Dask setting ``key``.

    >>> _env_name("distributed.worker.profile.enabled")
    'DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED'
    """
    return "DASK_" + key.upper().replace(".", "__").replace("-", "_")


def _jobqueue_cluster(spec: ClusterSpec) -> Any:
    """A dask-jobqueue ``SLURMCluster`` / ``PBSCluster`` (no jobs submitted yet)."""
    import dask

    try:
        from dask_jobqueue.pbs import PBSCluster
        from dask_jobqueue.slurm import SLURMCluster
    except ImportError:
        raise UsageError(f"--cluster {spec.cluster} needs dask-jobqueue: pip install 'dtrace[jobqueue]'") from None
    cls = {"slurm": SLURMCluster, "pbs": PBSCluster}[spec.cluster or ""]
    kw = dict(spec.cluster_options or {})
    cfg = f"jobqueue.{spec.cluster}"
    kw.setdefault("cores", dask.config.get(f"{cfg}.cores", None) or 1)
    kw.setdefault("memory", dask.config.get(f"{cfg}.memory", None) or "4GiB")
    kw.setdefault("processes", dask.config.get(f"{cfg}.processes", None) or kw["cores"])  # 1 thread each
    kw.setdefault("python", sys.executable)  # the workers run this environment's dtrace
    kw.setdefault("job_name", "dtrace-worker")
    kw.setdefault("silence_logs", "error")
    # the workers' heap settings: dtrace's, never Dask's MALLOC_TRIM_THRESHOLD_ (see the
    # LocalCluster in Engine.start)
    env = worker_env(threads=max(1, int(kw["cores"]) // max(int(kw["processes"]), 1)))
    spawn = {"MALLOC_TRIM_THRESHOLD_": None, **{k: v for k, v in env.items() if k.startswith("MALLOC_")}}
    kw.setdefault(
        "job_script_prologue",
        [
            f'export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON="{spawn!r}"',
            *(f"export {k}={v}" for k, v in env.items()),
            *(f"export {_env_name(k)}={v}" for k, v in WORKER_CONFIG.items()),
        ],
    )
    # no dashboard, as for a local cluster (Engine.start)
    kw.setdefault("scheduler_options", {"dashboard": False, "dashboard_address": "127.0.0.1:0"})
    try:
        return cls(**kw)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"invalid {spec.cluster} cluster option: {exc}") from None

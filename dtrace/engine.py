"""The Dask layer: the only module that talks to Dask.

Two phases, each one task per item, mapped over picklable module-level functions:

1. ingest: one task per input file (paths travel, not bytes; workers read the files) →
   small :class:`~dtrace.cache.FileRecord` objects;
2. analyse: one task per (rank, device) partition → small per-rank frames.

The client then runs the reduce on those small frames. ``scheduler="sync"`` runs the same
graph in-process (tests, tiny inputs); otherwise a ``LocalCluster`` of processes sized to the
machine is started, or an existing cluster is used (``scheduler`` address or
``scheduler_file``), or — from a login node — a dask-jobqueue cluster whose workers run as
Slurm or PBS batch jobs (``cluster="slurm"``, ``jobs=N``; the optional extra ``jobqueue``).
Tasks are retried on other workers if a worker dies.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import dask

from .errors import DtraceError, UsageError


JOBQUEUE_CLUSTERS = ("slurm", "pbs")


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """Where to run. ``scheduler``: ``"sync"``, ``"local"`` (default) or a scheduler address.

    ``cluster`` (``"slurm"`` or ``"pbs"``) submits ``jobs`` batch jobs of Dask workers through
    dask-jobqueue; ``cluster_options`` are keyword arguments of its ``SLURMCluster`` /
    ``PBSCluster`` (``cores``, ``memory``, ``queue``, ``account``, ``walltime``,
    ``interface``, ...), defaults from dask's ``jobqueue`` configuration, else one core and
    4 GiB per job. Each core is one single-threaded worker process. ``startup_timeout``:
    seconds to wait for the first worker of the submitted jobs.
    """

    scheduler: str | None = None
    scheduler_file: str | None = None
    workers: int | None = None
    progress: bool = False
    retries: int = 2
    cluster: str | None = None
    jobs: int | None = None
    cluster_options: Mapping[str, Any] | None = None
    startup_timeout: float = 600.0

    def __post_init__(self) -> None:
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
            raise UsageError("jobs and job settings need a cluster to submit to "
                             "(--cluster slurm|pbs, cluster='slurm'|'pbs')")
        if self.jobs is not None and self.jobs < 1:
            raise UsageError("jobs must be >= 1")

    @property
    def synchronous(self) -> bool:
        return self.scheduler == "sync"


class Engine:
    """Maps functions over items on the chosen scheduler; use as a context manager."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.client: Any = None
        self._cluster: Any = None

    def __enter__(self) -> "Engine":
        s = self.spec
        if s.synchronous:
            return self
        from distributed import Client, LocalCluster

        if s.cluster:
            self._cluster = _jobqueue_cluster(s)
            try:
                self._cluster.scale(jobs=s.jobs or 1)
                self.client = Client(self._cluster)
                self.client.wait_for_workers(1, timeout=s.startup_timeout)
            except BaseException as exc:
                self.__exit__(None, None, None)  # cancels the submitted jobs
                if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
                    raise DtraceError(f"no Dask worker of the {s.jobs or 1} {s.cluster} job(s) connected within "
                                      f"{s.startup_timeout:g} s: check the queue and the jobs' logs") from None
                raise
        elif s.scheduler_file:
            self.client = Client(scheduler_file=s.scheduler_file)
        elif s.scheduler and s.scheduler != "local":
            self.client = Client(s.scheduler)
        else:
            n = s.workers or max(1, os.cpu_count() or 1)
            self._cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                         dashboard_address=None, silence_logs=logging.ERROR)
            self.client = Client(self._cluster)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.close()

    @property
    def n_workers(self) -> int:
        if self.client is None:
            return 1
        return len(self.client.scheduler_info().get("workers", {})) or 1

    def map(self, func: Callable[..., Any], items: Sequence[Any], *args: Any, label: str = "") -> list[Any]:
        """``[func(item, *args) for item in items]`` on the cluster; results in item order."""
        if not items:
            return []
        if self.client is None:
            tasks = [dask.delayed(func, pure=False)(item, *args) for item in items]
            with _progress_sync(self.spec.progress, label):
                return list(dask.compute(*tasks, scheduler="synchronous"))
        futures = self.client.map(func, list(items), *[[a] * len(items) for a in args],
                                  pure=False, retries=self.spec.retries)
        if self.spec.progress:
            from distributed import progress

            if label:
                print(label, file=sys.stderr)
            progress(futures, multi=False)
            print(file=sys.stderr)
        results = self.client.gather(futures)
        for f in futures:
            f.release()
        return list(results)


def _jobqueue_cluster(spec: ClusterSpec) -> Any:
    """A dask-jobqueue ``SLURMCluster`` / ``PBSCluster`` (no jobs submitted yet)."""
    try:
        import dask_jobqueue
    except ImportError:
        raise UsageError(f"--cluster {spec.cluster} needs dask-jobqueue: pip install 'dtrace[jobqueue]'") from None
    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}[spec.cluster or ""]
    kw = dict(spec.cluster_options or {})
    cfg = f"jobqueue.{spec.cluster}"
    kw.setdefault("cores", dask.config.get(f"{cfg}.cores", None) or 1)
    kw.setdefault("memory", dask.config.get(f"{cfg}.memory", None) or "4GiB")
    kw.setdefault("processes", dask.config.get(f"{cfg}.processes", None) or kw["cores"])  # 1 thread each
    kw.setdefault("python", sys.executable)  # the workers run this environment's dtrace
    kw.setdefault("job_name", "dtrace-worker")
    kw.setdefault("silence_logs", "error")
    # a random free port: the default 8787 may be taken (another cluster), which only warns
    kw.setdefault("scheduler_options", {"dashboard_address": ":0"})
    try:
        return cls(**kw)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"invalid {spec.cluster} cluster option: {exc}") from None


@contextlib.contextmanager
def _progress_sync(enabled: bool, label: str) -> Iterator[None]:
    if not enabled:
        yield
        return
    from dask.diagnostics import ProgressBar

    if label:
        print(label, file=sys.stderr)
    with ProgressBar(out=sys.stderr):
        yield

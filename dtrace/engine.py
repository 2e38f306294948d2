"""The Dask layer: the only module that talks to Dask.

Two phases, each one task per item, mapped over picklable module-level functions:

1. ingest: one task per input file (paths travel, not bytes; workers read the files) →
   small :class:`~dtrace.cache.FileRecord` objects;
2. analyse: one task per (rank, device) partition → small per-rank frames.

The client then runs the reduce on those small frames. ``scheduler="sync"`` runs the same
graph in-process (tests, tiny inputs); otherwise a ``LocalCluster`` of processes sized to the
machine is started, or an existing cluster is used (``scheduler`` address or
``scheduler_file``). Tasks are retried on other workers if a worker dies.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import dask

from .errors import UsageError


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """Where to run. ``scheduler``: ``"sync"``, ``"local"`` (default) or a scheduler address."""

    scheduler: str | None = None
    scheduler_file: str | None = None
    workers: int | None = None
    progress: bool = False
    retries: int = 2

    def __post_init__(self) -> None:
        if self.scheduler and self.scheduler_file:
            raise UsageError("give either scheduler or scheduler_file, not both")
        if self.workers is not None and self.workers < 1:
            raise UsageError("workers must be >= 1")

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

        if s.scheduler_file:
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

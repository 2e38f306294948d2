"""Scheduler preload for the distributed tests: log what every task got and what it returned.

``python -m distributed.cli.dask_scheduler --preload tests/dask_probe.py`` with
``DTRACE_PROBE_LOG=FILE`` appends one JSON line per task event to FILE:

- ``{"event": "start", "key", "prefix", "worker", "args", "spec_bytes"}`` when a task is sent
  to a worker: ``args`` are its positional arguments (strings and lists of strings as they
  are, anything else as its type name), ``spec_bytes`` the pickled size of the whole task as the scheduler ships it;
- ``{"event": "done", "key", "prefix", "worker", "nbytes"}`` when its result is in a worker's
  memory (``nbytes``: Dask's size estimate of the result, what a client gathering it gets).

This is evidence from the scheduler itself, independent of dtrace's own bookkeeping.
"""

from __future__ import annotations

import json
import os
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol import pickle
from distributed.utils import key_split


def _arg(a: Any) -> Any:
    if isinstance(a, (list, tuple)) and all(isinstance(x, str) for x in a):
        return list(a)  # a batch of paths
    return a if isinstance(a, (str, int, float, bool)) or a is None else type(a).__name__


class TaskProbe(SchedulerPlugin):
    """Appends task starts and results to a JSON-lines file."""

    name = "dtrace-test-probe"

    def __init__(self, path: str) -> None:
        self.path = path
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def _write(self, row: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        ts = self.scheduler.tasks.get(key)
        if ts is None:
            return
        if finish == "processing":
            spec = ts.run_spec
            self._write(
                {
                    "event": "start",
                    "key": str(key),
                    "prefix": key_split(key),
                    "worker": ts.processing_on.address if ts.processing_on else None,
                    "args": [_arg(a) for a in getattr(spec, "args", ())],
                    "spec_bytes": len(pickle.dumps(spec)),
                }
            )
        elif finish == "memory":
            self._write(
                {
                    "event": "done",
                    "key": str(key),
                    "prefix": key_split(key),
                    "worker": sorted(w.address for w in ts.who_has),
                    "nbytes": int(ts.nbytes),
                }
            )


def dask_setup(scheduler: Any) -> None:
    scheduler.add_plugin(TaskProbe(os.environ["DTRACE_PROBE_LOG"]))

"""dtrace: analyse GPU profiler traces from every rank of a cluster job at once.

>>> import dtrace
>>> r = dtrace.analyze("traces/", "results/")     # doctest: +SKIP
>>> r = dtrace.load("results/"); r.breakdown      # doctest: +SKIP

The names below are imported on first use (PEP 562), so ``import dtrace`` costs nothing until
one is needed.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_EXPORTS = {
    "analyze": "api",
    "load": "results",
    "Results": "results",
    "events": "explore.events",
    "tree": "explore.tree",
    "Tree": "calltree",
    "timeline": "explore.timeline",
    "whatif": "api",
    "Analysis": "analyses",
    "Batch": "analyses.batch",
    "Options": "options",
    "DtraceError": "errors",
    "InputError": "errors",
    "ResultsError": "errors",
    "UsageError": "errors",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dtrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

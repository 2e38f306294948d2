"""dtrace: analyse GPU profiler traces from every rank of a cluster job at once.

>>> import dtrace
>>> r = dtrace.analyze("traces/", "results/")     # doctest: +SKIP
>>> r = dtrace.load("results/"); r.breakdown      # doctest: +SKIP
"""
from __future__ import annotations

from ._version import __version__

from .analyses import Analysis  # noqa: E402
from .api import analyze  # noqa: E402
from .batch import Batch  # noqa: E402
from .calltree import Tree, tree  # noqa: E402
from .events import events  # noqa: E402
from .errors import DtraceError, InputError, ResultsError, UsageError  # noqa: E402
from .options import Options  # noqa: E402
from .results import Results, load  # noqa: E402
from .timeline_export import timeline  # noqa: E402

__all__ = ["analyze", "load", "events", "tree", "timeline", "Tree", "Analysis", "Batch", "Results", "Options",
           "DtraceError", "InputError", "ResultsError", "UsageError", "__version__"]

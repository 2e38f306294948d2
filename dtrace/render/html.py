"""The HTML report of one analysis: one self-contained file, nothing fetched from the network.

:func:`report` returns the whole page as a string (the CLI writes it). Every section renders
from whatever tables the results hold and says ``not available (table X absent)`` otherwise,
so the report works for a single-trace quick look and for a 1,024-rank job alike.

Sections (the questions a job's owner asks, in order): job summary; per-GPU breakdown (computation /
exposed comm / exposed memcpy / idle); time by kernel class per GPU; rank × step heatmaps
(step time, collective wait); stragglers with evidence and the robust z-scores of the rank
comparison; top kernels; idle gaps (GPU idle time by cause per GPU from the device gaps, their
histogram, then the per-stream gaps and top transitions, labelled per stream); kernel launches
(launch delay distribution per GPU, launch statistics across ranks); launch queues (queue length
over the slowest step); device memory over time (flagged and median GPU); collective skew;
per-op GPU time; op performance against the hardware's roofline (:mod:`.opperf`).

Scaling: a per-GPU bar chart shows every GPU up to ``max_bars`` (64) of them; beyond that it
shows the flagged stragglers, the GPUs at both extremes of the chart's metric and the median
one, and the distribution over all GPUs as box plots. Heatmaps bucket consecutive ranks into at
most 128 rows, keeping the extreme value of each bucket (and naming the rank that holds it).
Charts are inline SVG (:mod:`dtrace.render.charts`); the only script makes tables sortable.
"""

from __future__ import annotations

import time
from typing import Callable

from .._version import __version__
from ..results import Results
from .bounds import section_bounds
from .context import MAX_BARS, Context
from .host_sections import section_launches, section_memory, section_queues
from .opperf import section_perf
from .page import page
from .ranks import section_collectives, section_steps, section_stragglers
from .sections import section_breakdown, section_classes, section_gaps, section_kernels, section_ops, section_summary
from .whatif import section_whatif

#: The report's sections in order: (anchor id, heading, function of the context).
SECTIONS: list[tuple[str, str, Callable[[Context], str]]] = [
    ("summary", "Job summary", section_summary),
    ("breakdown", "GPU time breakdown per GPU", section_breakdown),
    ("classes", "Time by kernel class per GPU", section_classes),
    ("steps", "Ranks × steps", section_steps),
    ("stragglers", "Stragglers", section_stragglers),
    ("whatif", "What if: estimated step time", section_whatif),
    ("bounds", "What bounds each step", section_bounds),
    ("kernels", "Top kernels", section_kernels),
    ("gaps", "Idle gaps and transitions", section_gaps),
    ("launches", "Kernel launches", section_launches),
    ("queues", "Launch queues", section_queues),
    ("memory", "Device memory", section_memory),
    ("collectives", "Collective skew", section_collectives),
    ("ops", "GPU time per host op", section_ops),
    ("perf", "How far from the hardware: op roofline", section_perf),
]


def report(results: Results, *, title: str | None = None, max_bars: int = MAX_BARS, timeline: str | None = None) -> str:
    """The HTML report of one analysis, as one self-contained string.

    Parameters
    ----------
    results
        ``dtrace.load(OUT)`` or the return value of ``dtrace.analyze``.
    title
        Page title (default: ``dtrace report: <results path>``).
    max_bars
        Most GPUs drawn in one bar chart before the report switches to extremes + box plots.
    timeline
        Path of an exported slow-step timeline relative to the report, linked in the what-if
        section (always as a relative file path: a URL such as ``javascript:...`` is never a link).

    Examples
    --------
    >>> html = report(dtrace.load("run42/results"))               # doctest: +SKIP
    >>> open("report.html", "w").write(html)                      # doctest: +SKIP
    """
    ctx = Context(results, max_bars=max_bars, timeline=timeline)
    name = results.path or "in-memory results"
    title = title or f"dtrace report: {name}"
    n_ranks = int(ctx.parts["rank"].nunique()) if len(ctx.parts) else 0
    subtitle = (
        f"{n_ranks:,} ranks, {len(ctx.parts):,} GPUs · generated {time.strftime('%Y-%m-%d %H:%M')} "
        f"by dtrace {__version__}"
    )
    return page(title, subtitle, [(sid, head, fn(ctx)) for sid, head, fn in SECTIONS])

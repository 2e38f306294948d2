"""The bins of the per-part time series (see docs/semantics.md, "Time series").

Series over time (a stream's launch queue, the allocated memory, the copy bandwidth) travel to
the client for every rank, so each is cut into a fixed number of bins, ``timeline_bins`` (100 by
default), over the part's *timeline window*: from the earliest of its GPU event starts, their
launch calls' starts and its memory events, to the latest of its GPU event ends and memory
events. Bin ``b`` of a part is ``[lo + b·w, lo + (b + 1)·w)`` with ``w = (hi − lo) // bins + 1``
ns, so every time of the window falls in a bin and the resolution is the window divided by the
number of bins. All series of a part share its bins, so they line up in a chart.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from ..vector.groups import I64, max_by, min_by
from .batch import Batch, assign_steps

_BIG = np.iinfo(np.int64).max


def window(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """Per part, the start of its timeline window and the width of its bins (ns, ≥ 1)."""
    return batch.derived("timeline.window", _window)


def _window(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    n = batch.n_parts
    g = batch.gpu
    part = g["part"].to_numpy(I64)
    start = g["start_ns"].to_numpy(I64)
    launch = g["launch_ns"].to_numpy(I64)
    first = np.where(launch >= 0, np.minimum(launch, start), start)
    lo = min_by(part, first, n, _BIG)
    hi = max_by(part, g["end_ns"].to_numpy(I64), n, -_BIG)
    mem = batch.side_table("memory")
    if len(mem):
        mp, mt = mem["part"].to_numpy(I64), mem["time_ns"].to_numpy(I64)
        lo = np.minimum(lo, min_by(mp, mt, n, _BIG))
        hi = np.maximum(hi, max_by(mp, mt, n, -_BIG))
    empty = lo > hi
    lo = np.where(empty, 0, lo)
    hi = np.where(empty, 0, hi)
    return lo, (hi - lo) // int(batch.options.timeline_bins) + 1


def bin_of(t: np.ndarray, part: np.ndarray, lo: np.ndarray, width: np.ndarray, bins: int) -> np.ndarray:
    """The bin of each time ``t`` of ``part`` (clipped to the window's bins)."""
    return cast(np.ndarray, np.clip((np.asarray(t, I64) - lo[part]) // width[part], 0, bins - 1))


def bin_steps(batch: Batch, part: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """The step of each bin ``bins`` of ``part``: the part's step window that contains the bin's
    middle (-1 none); every bin of every part is looked up once per batch."""
    table = batch.derived("timeline.steps", _steps_of_bins)
    return table[np.asarray(part, I64), np.asarray(bins, I64)]


def _steps_of_bins(batch: Batch) -> np.ndarray:
    bins = int(batch.options.timeline_bins)
    lo, width = window(batch)
    part = np.repeat(np.arange(batch.n_parts, dtype=I64), bins)
    b = np.tile(np.arange(bins, dtype=I64), batch.n_parts)
    mid = lo[part] + b * width[part] + width[part] // 2
    frame = pd.DataFrame({"part": part, "start_ns": mid, "launch_ns": np.full(part.size, -1, I64)})
    return assign_steps(frame, batch.steps).reshape(batch.n_parts, bins)


def spread(
    grp: np.ndarray, gpart: np.ndarray, s: np.ndarray, e: np.ndarray, lo: np.ndarray, width: np.ndarray, bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each interval ``[s, e)`` of group ``grp`` (whose part is ``gpart[grp]``) once per bin of its
    part it touches: the interval's index, the bin and the bin's edges (a zero-length interval
    touches the bin of its start).

    Examples
    --------
    >>> idx, b, a, z = spread(np.array([0]), np.array([0]), np.array([5]), np.array([25]),
    ...                       np.array([0]), np.array([10]), 4)
    >>> idx.tolist(), b.tolist(), a.tolist(), z.tolist()
    ([0, 0, 0], [0, 1, 2], [0, 10, 20], [10, 20, 30])
    """
    p = gpart[grp]
    fb = bin_of(s, p, lo, width, bins)
    lb = bin_of(np.maximum(e - 1, s), p, lo, width, bins)
    nb = lb - fb + 1
    idx = np.repeat(np.arange(s.size, dtype=I64), nb)
    b = fb[idx] + np.arange(idx.size, dtype=I64) - np.repeat(np.cumsum(nb) - nb, nb)
    a = lo[p[idx]] + b * width[p[idx]]
    return idx, b, a, a + width[p[idx]]

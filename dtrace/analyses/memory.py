"""Device memory over time, from the allocator's events (see docs/semantics.md, "Memory").

With ``profile_memory=True`` the PyTorch profiler records every allocation and free of the
caching allocator as a ``[memory]`` instant event stating the bytes allocated (``Total
Allocated``) and reserved (``Total Reserved``) on the device after it; the Kineto reader keeps
those of each GPU in the part's ``memory`` side table. Each total is a step function of time: it
holds from one event to the next. Per (rank, device):

- ``memory``: the events, allocations and frees, the peak of the allocated bytes (the largest
  ``Total Allocated``), when it was first reached, the host op running on the allocating thread
  at that moment (the innermost ``cpu_op`` of the event's process and thread whose span contains
  it) and the step, the peak of the reserved bytes, the allocated bytes before the first event
  and after the last;
- ``memory_timeline``: both totals in the part's bins (:mod:`dtrace.analyses.timeline`): the
  value at the end of each bin and the largest value during it, from the bin of the first event
  on (the maximum of ``allocated_max_bytes`` over the bins is the peak).

Parts without memory events have no rows. Every part is computed at once: events sorted by
(part, time, file order), per-part maxima and lookups by ``searchsorted`` on one axis.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.constants import KINDS
from ..vector.groups import I64, count_by, lexsort_ints, max_by, sum_by, unique_first
from ..vector.intervals import Axis
from .batch import Batch, assign_steps, kind_codes
from .timeline import bin_steps, window

MEMORY_COLUMNS = [
    "rank",
    "device",
    "events",
    "allocations",
    "frees",
    "allocated_bytes",
    "freed_bytes",
    "start_allocated_bytes",
    "end_allocated_bytes",
    "peak_allocated_bytes",
    "peak_ns",
    "peak_op",
    "peak_step",
    "peak_reserved_bytes",
]
TIMELINE_COLUMNS = [
    "rank",
    "device",
    "bin",
    "lo_ns",
    "hi_ns",
    "step",
    "allocated_bytes",
    "allocated_max_bytes",
    "reserved_bytes",
    "reserved_max_bytes",
]


def _events(batch: Batch) -> pd.DataFrame:
    """The memory side table sorted by (part, time, file order)."""
    m = batch.side_table("memory")
    if not len(m):
        return m
    order = lexsort_ints((np.arange(len(m)), m["time_ns"].to_numpy(I64), m["part"].to_numpy(I64)))
    return m.iloc[order].reset_index(drop=True)


def memory(batch: Batch) -> pd.DataFrame:
    """The ``memory`` table (see the module docstring)."""
    m = _events(batch)
    if not len(m):
        return pd.DataFrame({c: [] for c in MEMORY_COLUMNS})
    n = batch.n_parts
    part = m["part"].to_numpy(I64)
    t = m["time_ns"].to_numpy(I64)
    nbytes = m["bytes"].to_numpy(I64)
    alloc = m["allocated"].to_numpy(I64)
    parts, first = unique_first(part)
    last = np.r_[first[1:] - 1, len(m) - 1]
    peak = max_by(part, alloc, n, -1)
    # the first event of each part at its peak: the smallest position among those equal to it
    at_peak = np.flatnonzero(alloc == peak[part])
    _, k = unique_first(part[at_peak])
    pk = at_peak[k]
    peak_t = t[pk]
    frame = pd.DataFrame({"part": parts, "start_ns": peak_t, "launch_ns": np.full(parts.size, -1, I64)})
    return pd.DataFrame(
        {
            **batch.keys(parts),
            "events": count_by(part, n)[parts],
            "allocations": count_by(part[nbytes > 0], n)[parts],
            "frees": count_by(part[nbytes < 0], n)[parts],
            "allocated_bytes": sum_by(part, np.maximum(nbytes, 0), n)[parts],
            "freed_bytes": sum_by(part, np.maximum(-nbytes, 0), n)[parts],
            "start_allocated_bytes": alloc[first] - nbytes[first],
            "end_allocated_bytes": alloc[last],
            "peak_allocated_bytes": peak[parts],
            "peak_ns": peak_t,
            "peak_op": _op_at(batch, parts, m["pid"].to_numpy(I64)[pk], m["tid"].to_numpy(I64)[pk], peak_t),
            "peak_step": assign_steps(frame, batch.steps),
            "peak_reserved_bytes": max_by(part, m["reserved"].to_numpy(I64), n, -1)[parts],
        }
    )


def _op_at(batch: Batch, parts: np.ndarray, pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query (one per part): the innermost ``cpu_op`` of that part, process and thread whose
    span contains ``t`` (the latest-starting one), or ``""``."""
    h = batch.host
    out = np.full(parts.size, "", dtype=object)
    if not len(h) or not parts.size:
        return out
    q = np.full(batch.n_parts, -1, I64)
    q[parts] = np.arange(parts.size)
    hp = h["part"].to_numpy(I64)
    qi = q[hp]
    qq = np.maximum(qi, 0)
    hs, he = h["start_ns"].to_numpy(I64), h["end_ns"].to_numpy(I64)
    cand = (
        (qi >= 0)
        & (kind_codes(h["kind"]) == KINDS.index("cpu_op"))
        & (h["pid"].to_numpy(I64) == pid[qq])
        & (h["tid"].to_numpy(I64) == tid[qq])
        & (hs <= t[qq])
        & (t[qq] < np.maximum(he, hs + 1))
    )
    rows = np.flatnonzero(cand)
    if not rows.size:
        return out
    # the latest start per query, then the first row holding it
    order = rows[lexsort_ints((rows, -hs[rows], qi[rows]))]
    _, k = unique_first(qi[order])
    best = order[k]
    names = h["name"]
    out[qi[best]] = np.asarray(names.cat.categories, dtype=object)[names.cat.codes.to_numpy()[best]]
    return out


def memory_timeline(batch: Batch) -> pd.DataFrame:
    """The ``memory_timeline`` table (see the module docstring)."""
    m = _events(batch)
    if not len(m):
        return pd.DataFrame({c: [] for c in TIMELINE_COLUMNS})
    bins = int(batch.options.timeline_bins)
    lo, width = window(batch)
    part = m["part"].to_numpy(I64)
    t = m["time_ns"].to_numpy(I64)
    parts, first = unique_first(part)
    first_bin = (t[first] - lo[parts]) // width[parts]
    # the cells: each part's bins from the one of its first event to the last
    nb = bins - first_bin
    cp = np.repeat(parts, nb)
    cb = np.arange(int(nb.sum()), dtype=I64) - np.repeat(np.cumsum(nb) - nb, nb) + np.repeat(first_bin, nb)
    a = lo[cp] + cb * width[cp]
    b = a + width[cp]
    axis = Axis(np.concatenate([part, cp, cp]), np.concatenate([t, a, b]), batch.n_parts)
    pt = axis.place(t, part)
    pa, pb = axis.place(a, cp), axis.place(b, cp)
    before_end = np.searchsorted(pt, pb, side="left") - 1  # the last event before the bin's end
    before_start = np.searchsorted(pt, pa, side="left") - 1  # the last event before the bin
    cell = np.full(batch.n_parts, -1, I64)
    cell[parts] = np.cumsum(nb) - nb  # first cell of each part
    ebin = np.clip((t - lo[part]) // width[part], 0, bins - 1)
    ecell = cell[part] + ebin - first_bin[np.searchsorted(parts, part)]
    out = {}
    for col in ("allocated", "reserved"):
        v = m[col].to_numpy(I64)
        carried = np.where(
            (before_start >= 0) & (part[np.maximum(before_start, 0)] == cp), v[np.maximum(before_start, 0)], -1
        )
        peak = carried.copy()
        np.maximum.at(peak, ecell, v)
        out[f"{col}_bytes"] = v[before_end]  # every cell ends after its part's first event
        out[f"{col}_max_bytes"] = peak
    return pd.DataFrame(
        {
            **batch.keys(cp),
            "bin": cb,
            "lo_ns": a,
            "hi_ns": b,
            "step": bin_steps(batch, cp, cb),
            "allocated_bytes": out["allocated_bytes"],
            "allocated_max_bytes": out["allocated_max_bytes"],
            "reserved_bytes": out["reserved_bytes"],
            "reserved_max_bytes": out["reserved_max_bytes"],
        }
    )

"""Collective identity of a communication kernel from its enclosing ``record_param_comms``.

PyTorch records every c10d collective as a host op (``record_param_comms``) whose args name
the collective, its process group, dtype and message sizes (``Collective name``, ``Process
Group Name``, ``Process Group Ranks``, ``Group size``, ``dtype``, ``In msg nelems``, ``Out msg
nelems``, ``Seq``). Recent Kineto versions copy these args onto the kernel; older ones, and
RCCL kernels whose name says nothing (``ncclDevKernel_Generic``), do not. The kernel is still
linked to its launch call by correlation id, and that call runs on the same host thread inside
the ``record_param_comms`` op's time window: the innermost such op is the kernel's collective.

:func:`inherit_collective_args` does that matching once per trace, vectorised: kernels by
correlation to launches (a hash lookup), launches to ops by an as-of join on the thread and the
start time (the latest op started at or before the launch), then a containment check. Only
launches that are not inside the latest-started op (an inner op already ended) walk back through
that thread's earlier ops, so the Python loop runs over those few kernels only. Only kernels whose
name is a communication kernel's (:data:`dtrace.knowledge.categories.PATTERNS`) inherit: a collective op may
also launch copies or memsets of its buffers, which stay what they are.
"""

from __future__ import annotations

from typing import Any, Sequence, cast

import numpy as np
import pandas as pd
import pyarrow as pa

_COMM: dict[str, bool] = {}  # kernel name -> a communication kernel's (the process's inputs share their names)
_COMM_MAX = 1 << 16  # names remembered at most (then forgotten all at once)


def _comm_names(names: Sequence[str]) -> np.ndarray:
    """Which of the distinct kernel ``names`` are communication kernels (default rules; each
    name classified once per process)."""
    new = [n for n in dict.fromkeys(names) if n not in _COMM]
    if new:
        from ..knowledge.categories import categorize_names

        if len(_COMM) + len(new) > _COMM_MAX:
            _COMM.clear()
        _COMM.update(zip(new, (c == "comm" for c in categorize_names(new, ["kernel"] * len(new)))))
    return np.fromiter(map(_COMM.__getitem__, names), bool, len(names))


def _enclosing(
    launch_pid: np.ndarray,
    launch_tid: np.ndarray,
    launch_start: np.ndarray,
    rec_pid: np.ndarray,
    rec_tid: np.ndarray,
    rec_start: np.ndarray,
    rec_end: np.ndarray,
) -> np.ndarray:
    """Index of the innermost record on the launch's thread whose window ``[start, end)`` holds the
    launch's start (-1: none).

    Examples
    --------
    >>> z = np.zeros(3, np.int64)  # ops 10..30 holding 12..18, and 40..50; launches at 15, 26 and 90
    >>> _enclosing(z, z, np.array([15, 26, 90]), z, z, np.array([10, 12, 40]), np.array([30, 18, 50])).tolist()
    [1, 0, -1]
    """
    n = len(launch_start)
    if not n or not len(rec_start):
        return np.full(n, -1, np.int64)
    order = np.lexsort((-rec_end, rec_start))  # by start; the outer of two ops starting together first
    recs = pd.DataFrame(
        {"pid": rec_pid[order], "tid": rec_tid[order], "t": rec_start[order], "rec": order.astype(np.int64)}
    )
    launches = pd.DataFrame({"pid": launch_pid, "tid": launch_tid, "t": launch_start, "i": np.arange(n)})
    hit = pd.merge_asof(launches.sort_values("t", kind="stable"), recs, on="t", by=["pid", "tid"], direction="backward")
    rec = np.full(n, -1, np.int64)
    rec[hit["i"].to_numpy()] = hit["rec"].fillna(-1).to_numpy(np.int64)
    found = rec >= 0
    inside = np.zeros(n, bool)
    inside[found] = launch_start[found] < rec_end[rec[found]]
    # the latest-started op ended before the launch: an enclosing op, if any, started earlier
    outside = np.flatnonzero(found & ~inside)
    if len(outside):
        threads = recs.groupby(["pid", "tid"], sort=False).indices  # positions, in start order
        ordered = recs["rec"].to_numpy()
        for i in outside.tolist():
            cands = ordered[threads[(launch_pid[i], launch_tid[i])]]
            ok = np.flatnonzero((rec_start[cands] <= launch_start[i]) & (launch_start[i] < rec_end[cands]))
            if len(ok):
                rec[i], inside[i] = cands[ok[-1]], True
    return np.where(inside, rec, -1)


def _column(events: pa.Table, name: str) -> np.ndarray:
    return cast(np.ndarray, events.column(name).to_numpy())


def _name_codes(events: pa.Table, rows: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """The distinct names and the name code of each of ``rows`` (from the table's dictionary
    without a take where its names are dictionary-encoded without nulls)."""
    names = events.column("name").combine_chunks()
    if isinstance(names, pa.DictionaryArray) and not names.indices.null_count:
        return names.dictionary.to_pylist(), names.indices.to_numpy()[rows]
    picked = names.take(pa.array(rows))
    if isinstance(picked, pa.DictionaryArray):
        return picked.dictionary.to_pylist(), picked.indices.to_numpy(zero_copy_only=False)
    codes, uniq = pd.factorize(np.asarray(picked.to_pylist(), object))
    return list(uniq), codes


def inherit_collective_args(
    events: pa.Table, with_args: Sequence[tuple[int, Any, str]], records: Sequence[tuple[int, Any]]
) -> list[tuple[int, Any, str]]:
    """Collective args for the communication kernels that carry none, from their enclosing op.

    Parameters
    ----------
    events
        The event table (:data:`dtrace.core.schema.EVENT_SCHEMA`).
    with_args
        ``(row, args, name)`` of the kernels that carry collective args themselves (they keep theirs).
    records
        ``(row, args)`` of the host ops that carry collective args (``record_param_comms``).

    Returns
    -------
    list of (row, args, name)
        One entry per kernel that inherits the args of its enclosing op, in the form of ``with_args``.
    """
    if not records or not events.num_rows:
        return []
    kind = events.column("kind").combine_chunks()
    codes = kind.indices.to_numpy(zero_copy_only=False)
    labels = kind.dictionary.to_pylist()
    kinds = np.array([labels.index(k) if k in labels else -1 for k in ("kernel", "runtime")])
    correlation = _column(events, "correlation")
    krows = np.flatnonzero((codes == kinds[0]) & (correlation >= 0))
    krows = krows[~np.isin(krows, np.array([r[0] for r in with_args], np.int64))]
    if not len(krows):
        return []
    # only communication kernels inherit: decide that first, once per distinct name, so the search
    # below never runs for the (many) compute kernels
    uniq, ncodes = _name_codes(events, krows)
    used = np.unique(ncodes)  # the names of these kernels, not every name of the trace
    is_comm = np.zeros(len(uniq), bool)
    is_comm[used] = _comm_names([str(uniq[i]) for i in used.tolist()])
    comm = is_comm[ncodes]
    krows, ncodes = krows[comm], ncodes[comm]
    if not len(krows):
        return []
    lrows = np.flatnonzero((codes == kinds[1]) & (correlation >= 0))
    lcorr = pd.Index(correlation[lrows])
    if not lcorr.is_unique:
        keep = ~lcorr.duplicated()
        lrows, lcorr = lrows[keep], lcorr[keep]
    pos = lcorr.get_indexer(correlation[krows])
    krows, ncodes, launch = krows[pos >= 0], ncodes[pos >= 0], lrows[pos[pos >= 0]]
    rrows = np.fromiter((r for r, _ in records), np.int64, len(records))
    pid, tid, start, end = (_column(events, c) for c in ("pid", "tid", "start_ns", "end_ns"))
    rec = _enclosing(pid[launch], tid[launch], start[launch], pid[rrows], tid[rrows], start[rrows], end[rrows])
    hit = rec >= 0
    return [
        (int(r), records[j][1], str(uniq[c]))
        for r, j, c in zip(krows[hit].tolist(), rec[hit].tolist(), ncodes[hit].tolist())
    ]

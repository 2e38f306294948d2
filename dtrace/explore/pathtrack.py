"""The critical path of the exported steps as a track of the timeline (``dtrace timeline``).

For each exported part, :func:`path_track` walks the critical path of the step shown (or of the
steps a ``--window`` overlaps, cut to the window) with
:func:`~dtrace.analyses.step_path.step_path` — the path whose time ``step_bounds`` splits — and
draws it as the part's first thread, ``critical path``: one slice per interval, named by what the
path waited on there (``host``, ``compute``, ``comm``, ``memcpy``, ``sync``, ``other``), coloured
by it (the trace format's ``cname``), with the step, where the path was (the GPU, or a host
thread), the op and the GPU event it waited on as arguments. Where the path hops between host and
GPU, a flow arrow joins the path's slice and the GPU event on its stream: from the launch latency
(or the host time before it) to the kernel launched, and from the GPU event a blocking call waited
for to the release latency (or the host time after it). An arrow whose GPU event is not exported
(another step's, outside the window) is left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..analyses.batch import Batch
from ..analyses.critical_path import Lookup
from ..analyses.step_path import step_path

PATH_TID = 1 << 34
"""The thread id of the ``critical path`` track (above every stream and host thread id exported)."""

CAT = "critical path"
"""The trace-event category of the path's slices and arrows."""

CNAME = {
    "host": "thread_state_iowait",  # orange
    "compute": "rail_load",  # green
    "comm": "rail_response",  # blue
    "memcpy": "yellow",
    "sync": "terrible",  # red
    "other": "grey",
}
"""The colour of each kind of interval (Chrome trace-event ``cname`` names)."""

_HOP_TEXT = {"launch": "launch latency", "release": "release latency"}


def path_track(
    part: Batch,
    *,
    step: int | None,
    window: tuple[int, int] | None,
    exported: np.ndarray,
    pid: int,
    shift: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The ``critical path`` track of one part: its slices and flow arrows, its thread's metadata
    and the number of slices.

    ``step`` is the step shown, else ``window`` the window (the part's own clock) whose steps'
    paths are drawn, cut to it; ``exported`` says which rows of ``part.gpu`` the timeline exports
    (arrows bind only to those); ``shift`` turns the part's own clock into the exported axis (ns).
    """
    path = step_path(part, steps=[step] if step is not None else None, window=window)
    if window is not None and len(path):
        path = path.assign(
            start_ns=np.clip(path["start_ns"].to_numpy(np.int64), *window),
            end_ns=np.clip(path["end_ns"].to_numpy(np.int64), *window),
        )
    if not len(path):
        return [], [], 0
    chain = np.unique(path["step"].fillna(-1).to_numpy(np.int64), return_inverse=True)[1].astype(np.int64).ravel()
    start, end = path["start_ns"].to_numpy(np.int64), path["end_ns"].to_numpy(np.int64)
    drawn = np.flatnonzero(end > start)
    events = _slices(path.iloc[drawn], pid, shift)
    events += _arrows(part, path, (chain, start, end), drawn, exported, pid, shift)
    meta = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": PATH_TID, "ts": 0, "args": {"name": "critical path"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": PATH_TID, "ts": 0, "args": {"sort_index": -1}},
    ]
    return events, meta, int(drawn.size)


def _slices(p: pd.DataFrame, pid: int, shift: int) -> list[dict[str, Any]]:
    """One complete event per interval of the path."""
    start = p["start_ns"].to_numpy(np.int64)
    ts = ((start - shift) / 1000.0).tolist()
    dur = ((p["end_ns"].to_numpy(np.int64) - start) / 1000.0).tolist()
    step = [None if pd.isna(s) else int(s) for s in p["step"].tolist()]
    where = np.where(p["where"].to_numpy(object) == "gpu", "gpu", "host thread " + p["tid"].astype(str)).tolist()
    out = []
    for t, d, s, k, wh, hop, op, kern in zip(
        ts, dur, step, p["kind"].tolist(), where, p["hop"].tolist(), p["op"].tolist(), p["kernel"].tolist()
    ):
        args: dict[str, Any] = {"step": s, "kind": k, "where": wh}
        if hop:
            args["hop"] = _HOP_TEXT[hop]
        if op:
            args["op"] = op
        if kern:
            args["kernel"] = kern
        out.append(
            {
                "ph": "X",
                "cat": CAT,
                "name": k,
                "pid": pid,
                "tid": PATH_TID,
                "ts": t,
                "dur": d,
                "cname": CNAME[k],
                "args": args,
            }
        )
    return out


def _arrows(
    part: Batch,
    path: pd.DataFrame,
    times: tuple[np.ndarray, np.ndarray, np.ndarray],
    drawn: np.ndarray,
    exported: np.ndarray,
    pid: int,
    shift: int,
) -> list[dict[str, Any]]:
    """Flow arrows between the path's slices and the GPU events of its hops (launch: slice →
    kernel; release: GPU event → slice), each at the start of the slice and of the event."""
    chain, start, end = times
    hop = path["hop"].to_numpy(object)
    g = path["gpu_row"].to_numpy(np.int64)
    ok = (hop != "") & (g >= 0)
    ok[ok] = exported[g[ok]]
    rows = np.flatnonzero(ok)
    if not rows.size or not drawn.size:
        return []
    # the drawn slice on the host side of each hop: the last one starting before a launch's end,
    # the first one starting at or after a release's start
    lk = Lookup(chain[drawn], start[drawn], int(chain.max()) + 1)
    launch = hop[rows] == "launch"
    j = lk.last(chain[rows], np.where(launch, end[rows], start[rows]), strict=True)
    j = np.where(j >= 0, j, np.searchsorted(lk.group, chain[rows], side="left") - 1)
    j = np.where(launch, j, j + 1)
    jj = np.clip(j, 0, drawn.size - 1)
    s = drawn[lk.order[jj]]
    same = (j >= 0) & (j < drawn.size) & (lk.group[jj] == chain[rows])
    near = np.where(launch, end[s] >= start[rows], start[s] <= end[rows])
    keep = same & near
    rows, s, launch = rows[keep], s[keep], launch[keep]
    gr = g[rows]
    g_ts = ((part.gpu["start_ns"].to_numpy(np.int64)[gr] - shift) / 1000.0).tolist()
    g_tid = part.gpu["stream"].to_numpy(np.int64)[gr].tolist()
    p_ts = ((start[s] - shift) / 1000.0).tolist()
    out = []
    for i, (is_launch, gt, gtid, pt) in enumerate(zip(launch.tolist(), g_ts, g_tid, p_ts)):
        a = {"ph": "s", "pid": pid, "tid": PATH_TID, "ts": pt}
        b = {"ph": "f", "bp": "e", "pid": pid, "tid": gtid, "ts": gt}
        if not is_launch:
            a, b = (
                {"ph": "s", "pid": pid, "tid": gtid, "ts": gt},
                {"ph": "f", "bp": "e", "pid": pid, "tid": PATH_TID, "ts": pt},
            )
        name = "critical path: " + ("launch" if is_launch else "release")
        out += [{**e, "cat": CAT, "name": name, "id": f"cp{pid}.{i}"} for e in (a, b)]
    return out

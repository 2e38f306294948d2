"""What bounds each step across ranks (the ``step_bounds_xrank`` table).

``step_bounds`` (:mod:`dtrace.analyses.critical_path`) names, per rank and step, what the step's
critical path waited on. Across ranks the question is whether the job is bound by one thing or a
few ranks by something else: one row per (step, bound) with the parts bound by it, their median
share, and the part bound most strongly by it — with the host op or synchronisation it names.
A straggler shows up as a small group: "step 12: 15 parts compute-bound; rank 7 host-bound,
71 %, in ``DataLoader.__next__``".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyses.critical_path import CATEGORIES
from ..core.dtypes import empty_frame, missing_if_negative
from ..options import Options

COLUMNS: dict[str, object] = {
    "step": "Int64",
    "bound": object,
    "parts": "int64",
    "share_median": "float64",
    "span_median_ns": "int64",
    **{f"{c}_median_ns": "int64" for c in CATEGORIES},
    "top_rank": "int32",
    "top_device": "int32",
    "top_share": "float64",
    "top_span_ns": "int64",
    "top_op": object,
}
"""Declared columns of ``step_bounds_xrank``."""


def reduce_step_bounds(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    """One row per (step, bound): the parts the step is bound by it on, and the strongest of them.

    Rows are sorted by step (``NA``, a trace without steps, first), then by the number of parts
    (most first), then by the order of :data:`~dtrace.analyses.critical_path.CATEGORIES`. The
    medians are over the parts of the row; ``top_op`` is the strongest part's ``host_op`` for a
    host-bound row, its ``sync_op`` for a synchronisation-bound one, else ``""``.

    Examples
    --------
    >>> sb = pd.DataFrame({"rank": [0, 1, 2], "device": [0, 1, 2], "step": [4, 4, 4],
    ...                    "span_ns": [100, 100, 110], "bound": ["compute", "compute", "host"],
    ...                    "bound_share": [0.5, 0.75, 0.9], "host_op": ["", "", "loader"], "sync_op": "",
    ...                    **{f"{c}_ns": 0 for c in CATEGORIES}})
    >>> out = reduce_step_bounds({"step_bounds": sb}, Options())["step_bounds_xrank"]
    >>> out[["step", "bound", "parts", "share_median", "top_rank", "top_op"]].values.tolist()
    [[4, 'compute', 2, 0.625, 1, ''], [4, 'host', 1, 0.9, 2, 'loader']]
    """
    sb = tables.get("step_bounds")
    if sb is None or not len(sb) or "bound" not in sb.columns:
        return {"step_bounds_xrank": empty_frame(COLUMNS)}
    sb = sb.loc[sb["bound"].astype(str).to_numpy() != ""]
    if not len(sb):
        return {"step_bounds_xrank": empty_frame(COLUMNS)}
    step = sb["step"].to_numpy(np.int64, na_value=-1)
    bound = sb["bound"].astype(str).to_numpy(object)
    f = pd.DataFrame(
        {
            "step": step,
            "bound": bound,
            "share": sb["bound_share"].to_numpy(np.float64),
            "span": sb["span_ns"].to_numpy(np.int64),
            **{c: sb[f"{c}_ns"].to_numpy(np.int64) for c in CATEGORIES},
            "rank": sb["rank"].to_numpy(np.int64),
            "device": sb["device"].to_numpy(np.int64),
            "op": np.where(
                bound == "host",
                sb["host_op"].astype(str).to_numpy(object),
                np.where(bound == "sync", sb["sync_op"].astype(str).to_numpy(object), ""),
            ),
        }
    )
    by = f.groupby(["step", "bound"], sort=False)
    agg = by.agg(
        parts=("share", "size"),
        share_median=("share", "median"),
        span_median=("span", "median"),
        **{f"{c}_median": (c, "median") for c in CATEGORIES},
    )
    # the strongest part of each (step, bound): the largest share (then the lowest rank)
    top = f.sort_values(["step", "bound", "share", "rank", "device"], ascending=[True, True, False, True, True])
    top = top.drop_duplicates(["step", "bound"]).set_index(["step", "bound"]).reindex(agg.index)
    agg = agg.reset_index()
    order_cat = {c: i for i, c in enumerate(CATEGORIES)}
    agg["_cat"] = agg["bound"].map(order_cat)
    keep = np.lexsort((agg["_cat"].to_numpy(), -agg["parts"].to_numpy(), agg["step"].to_numpy()))
    agg, top = agg.iloc[keep].reset_index(drop=True), top.iloc[keep].reset_index(drop=True)
    out = pd.DataFrame(
        {
            "step": missing_if_negative(agg["step"].to_numpy(np.int64)),
            "bound": agg["bound"].to_numpy(object),
            "parts": agg["parts"].to_numpy(np.int64),
            "share_median": agg["share_median"].to_numpy(np.float64),
            "span_median_ns": agg["span_median"].to_numpy(np.float64),
            **{f"{c}_median_ns": agg[f"{c}_median"].to_numpy(np.float64) for c in CATEGORIES},
            "top_rank": top["rank"].to_numpy(np.int64),
            "top_device": top["device"].to_numpy(np.int64),
            "top_share": top["share"].to_numpy(np.float64),
            "top_span_ns": top["span"].to_numpy(np.int64),
            "top_op": top["op"].to_numpy(object),
        }
    )
    return {"step_bounds_xrank": out}

"""Collectives across ranks: match instances, remove host clock offsets, measure waits
(docs/semantics.md, "Collectives across ranks" and "Clock offsets").

Input: the per-rank ``collectives`` rows of :mod:`dtrace.analyses.collectives` (one per comm
kernel). Output tables:

``collectives``
    one row per (instance, rank): the instance id ``collective``, group, op, per-rank start/end
    (clock-corrected), ``wait_ns = latest start − own start``, ``transfer_ns`` (the instance's
    shortest duration over ranks: the time the data moved once everyone was there), start and end
    skew, bytes, ``algbw_gbps``/``busbw_gbps`` and whether this rank arrived ``last``.
``collective_instances``
    one row per matched instance: ranks matched, times, skews, total wait, the last rank.
``clock_offsets``
    one row per (rank, device): its host, the offset removed and the residual end deviation.

Matching
--------
The same collective on all ranks of a group is found, per row, by the best key the trace allows:

1. ``seq``: (process group, its ranks, ``Seq``) when the kernel carries a ``Seq`` and a group;
2. ``order``: (process group, its ranks, op, position within that (group, op) on the rank);
3. ``stream``: (stream, position of the comm kernel on that stream) when there are no args.

A kernel repeated under one key on a rank (coalesced launches) gets its occurrence index as a
further key, so every instance has at most one kernel per (rank, device).

Clock offsets
-------------
Blocking collectives end together on every rank, so the end times of an instance differ only by
the ranks' clock offsets (and a few µs of noise). With ``e[i, r] = E[i] + o[host(r)]``, the
host offsets ``o`` are the least-squares solution over all instances that span hosts, refitted
without outlier instances (:func:`estimate_offsets`); the host of the lowest rank is the
reference (offset 0). Hosts are ``rank // gpus_per_host``
(``Options.gpus_per_host``; 0 gives every rank its own clock). Offsets are removed from every
start and end before waits and skews are measured; the remaining end skew of instances that span
hosts is the quality figure (a few µs when the model holds).

Bandwidth
---------
``algbw = bytes / transfer`` (bytes/ns = GB/s) and ``busbw = algbw × f(n)`` with
``f = 2(n−1)/n`` for all-reduce, ``(n−1)/n`` for all-gather, reduce-scatter and all-to-all and 1
otherwise (the nccl-tests convention); ``n`` is the group size the trace states, else the number
of ranks matched.
"""

from __future__ import annotations

from typing import Callable, cast

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame, missing_if_negative
from ..options import Options

MATCH_METHODS = ("seq", "order", "stream")
BUS_FACTOR: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}

ROW_COLUMNS = {
    "collective": "int64",
    "rank": "int32",
    "device": "int32",
    "group": object,
    "op": object,
    "seq": "Int64",
    "match": object,
    "stream": "int64",
    "step": "Int64",
    "bytes": "Int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "duration_ns": "int64",
    "wait_ns": "int64",
    "transfer_ns": "int64",
    "start_skew_ns": "int64",
    "end_skew_ns": "int64",
    "ranks": "int64",
    "group_size": "int64",
    "last": "bool",
    "algbw_gbps": "float64",
    "busbw_gbps": "float64",
    "clock_offset_ns": "int64",
}
INSTANCE_COLUMNS = {
    "collective": "int64",
    "group": object,
    "group_ranks": object,
    "op": object,
    "seq": "Int64",
    "match": object,
    "ranks": "int64",
    "group_size": "int64",
    "hosts": "int64",
    "bytes": "Int64",
    "start_ns": "int64",
    "end_ns": "int64",
    "transfer_ns": "int64",
    "start_skew_ns": "int64",
    "end_skew_ns": "int64",
    "raw_end_skew_ns": "int64",
    "wait_total_ns": "int64",
    "last_rank": "int32",
    "last_device": "int32",
    "late_ns": "int64",
    "algbw_gbps": "float64",
    "busbw_gbps": "float64",
}
CLOCK_COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "host": "int64",
    "offset_ns": "int64",
    "instances": "int64",
    "residual_end_ns": "int64",
}


def match_instances(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Instance id (0.. by first start) and match method index of every comm-kernel row.

    Examples
    --------
    >>> rows = pd.DataFrame({"rank": [0, 0, 1, 1], "device": [0, 0, 1, 1], "stream": [7, 7, 7, 7],
    ...     "start_ns": [10, 50, 12, 55], "op": ["send_recv"] * 4, "group": [""] * 4,
    ...     "group_ranks": [""] * 4, "seq": [-1] * 4, "order_op": [0, 1, 0, 1], "order_stream": [0, 1, 0, 1]})
    >>> match_instances(rows)[0].tolist()
    [0, 1, 0, 1]
    """
    n = len(rows)
    # text keys as codes (a bijection per column: the same groups, found in the same order)
    group, groups = _codes(rows["group"])
    has_group = (groups != "")[group]
    seq = rows["seq"].to_numpy(np.int64, na_value=-1)
    has_seq = has_group & (seq >= 0)
    method = np.where(has_seq, 0, np.where(has_group, 1, 2)).astype(np.int8)
    keys = pd.DataFrame(
        {
            "m": method,
            # a group for methods 0 and 1, the stream for method 2 (``m`` is part of every key)
            "g": np.where(method < 2, group, rows["stream"].to_numpy(np.int64)),
            "gr": np.where(method < 2, _codes(rows["group_ranks"])[0], -1),
            "op": np.where(method == 1, _codes(rows["op"])[0], -1),
            "i": np.where(
                method == 0, seq, np.where(method == 1, rows["order_op"].to_numpy(), rows["order_stream"].to_numpy())
            ),
        }
    )
    keys["r"] = rows["rank"].to_numpy()
    keys["d"] = rows["device"].to_numpy()
    keys["occ"] = keys.groupby(["r", "d", "m", "g", "gr", "op", "i"], sort=False).cumcount().to_numpy()
    ids = keys.groupby(["m", "g", "gr", "op", "i", "occ"], sort=False).ngroup().to_numpy()
    first = pd.Series(rows["start_ns"].to_numpy()).groupby(ids).min()
    order = np.empty(len(first), np.int64)
    order[np.argsort(first.to_numpy(), kind="stable")] = np.arange(len(first))
    return (order[ids] if n else np.zeros(0, np.int64)), method


def _codes(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Codes of a text column in order of appearance (a missing value is a value of its own) and
    the distinct values as objects.

    Examples
    --------
    >>> c, u = _codes(pd.Series(["b", "", "b", None]))
    >>> c.tolist(), u.tolist()
    ([0, 1, 0, 2], ['b', '', nan])
    """
    codes, uniques = pd.factorize(col, use_na_sentinel=False)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def estimate_offsets(inst: np.ndarray, host: np.ndarray, end_ns: np.ndarray, *, rounds: int = 3) -> np.ndarray:
    """Clock offset (ns) of every host from the end times of matched instances.

    Model: ``m[i, h] = E[i] + o[h] + noise`` with ``m[i, h]`` the median end over host ``h``'s
    ranks in instance ``i``. Eliminating the instance ends ``E`` leaves the normal equations
    ``L o = b`` of a least-squares fit, ``L = Σ_i (diag(1_i) − 1_i 1_iᵀ / k_i)`` over the ``k_i``
    hosts of each instance (accumulated once per distinct host set, so a 128-host all-reduce
    repeated a thousand times costs one 128×128 update) and ``b_h = Σ_i (m[i, h] − mean_i m)``.
    The lowest host id in a spanning instance is the reference (offset 0); the minimum-norm
    solution leaves hosts that no instance links to the reference near 0. Instances whose residual exceeds six MADs (at least 20 µs) are
    dropped and the fit repeated, ``rounds`` times at most, so a few odd instances (a collective
    that did not block, a mismatch) do not bias the offsets.

    The fit runs on one BLAS thread: its last bits (and so an offset that rounds near half a ns)
    then do not depend on the machine's core count, and a 512-host fit takes ~25 ms instead of
    0.1-0.8 s of threads spinning against the client's other threads on a small busy machine.

    Parameters
    ----------
    inst, host, end_ns
        Per kernel row: instance id, host id (0..H-1) and end time. Only instances seen on at
        least two hosts carry information; the others are ignored.

    Returns
    -------
    numpy.ndarray
        ``offset[h]`` (int64 ns) to subtract from host ``h``'s times.

    Examples
    --------
    >>> inst = np.array([0, 0, 1, 1, 2, 2]); host = np.array([0, 1, 0, 1, 0, 1])
    >>> estimate_offsets(inst, host, np.array([100, 5100, 300, 5290, 700, 5700])).tolist()
    [0, 4997]
    """
    n_hosts = int(host.max()) + 1 if len(host) else 0
    if n_hosts < 2:
        return np.zeros(n_hosts, np.int64)
    f = pd.DataFrame({"i": inst, "h": host, "e": (end_ns - end_ns.min()).astype(np.float64)})
    m = f.groupby(["i", "h"], sort=True)["e"].median().reset_index()
    k = m.groupby("i")["h"].transform("size").to_numpy()
    m = m.loc[k >= 2].reset_index(drop=True)
    if not len(m):
        return np.zeros(n_hosts, np.int64)
    ref = int(m["h"].min())
    keep = np.ones(len(m), bool)
    off = np.zeros(n_hosts)
    zobrist = np.random.default_rng(12345).integers(1, 2**62, n_hosts, dtype=np.int64)
    for _ in range(max(1, rounds)):
        mm = m.loc[keep]
        i, h, e = mm["i"].to_numpy(), mm["h"].to_numpy(), mm["e"].to_numpy()
        g = pd.Series(e).groupby(i)
        c = e - g.transform("mean").to_numpy()
        b = np.bincount(h, weights=c, minlength=n_hosts)
        # one update of L per distinct host set: signature = (sum of random host keys, size)
        sig = pd.DataFrame({"i": i, "z": zobrist[h]}).groupby("i")["z"].sum()
        size = g.size()
        sets = pd.DataFrame({"sig": sig.to_numpy(), "k": size.to_numpy()}, index=sig.index)
        first = sets.reset_index().drop_duplicates(["sig", "k"])
        counts = sets.groupby(["sig", "k"]).size()
        L = np.zeros((n_hosts, n_hosts))
        for inst_id, s_key, kk in first[["i", "sig", "k"]].itertuples(index=False):
            hs = h[i == inst_id]
            n = counts.loc[(s_key, kk)]
            L[np.ix_(hs, hs)] -= n / kk
            L[hs, hs] += n
        free = np.flatnonzero(np.arange(n_hosts) != ref)
        # imported here, not at the top: importing threadpoolctl sets KMP_DUPLICATE_LIB_OK in the
        # environment, and a local cluster started after the environment changed cannot fork its
        # workers from the server prestarted with the old one (execution.engine.prestart_workers)
        from threadpoolctl import threadpool_limits  # noqa: PLC0415

        with threadpool_limits(1, user_api="blas"):  # one thread: see the docstring
            sol = np.linalg.lstsq(L[np.ix_(free, free)], b[free], rcond=None)[0]
        off = np.zeros(n_hosts)
        off[free] = sol
        resid = c - (off[h] - pd.Series(off[h]).groupby(i).transform("mean").to_numpy())
        worst = pd.Series(np.abs(resid)).groupby(i).transform("max").to_numpy()
        mad = float(np.median(np.abs(resid)))
        bad = worst > max(20_000.0, 6 * 1.4826 * mad)
        if not bad.any():
            break
        idx = np.flatnonzero(keep)
        keep[idx[bad]] = False
        if not keep.any():
            break
    return np.rint(off).astype(np.int64)


def _bus_factor(op: np.ndarray, n: np.ndarray) -> np.ndarray:
    out = np.ones(len(op))
    nn = np.maximum(n, 1).astype(np.float64)
    for name, f in BUS_FACTOR.items():
        m = op == name
        out[m] = f(nn[m])
    return out


def reduce_collectives(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    """Match the per-rank comm kernels into instances; see the module docstring.

    Phases: match the rows into instances, estimate each host's clock offset, number the
    instances by their first corrected start, aggregate per instance, find the rank that
    arrived last, then build the row, instance and clock tables.
    """
    rows = tables.get("collectives")
    if rows is None or not len(rows):
        return {
            "collectives": empty_frame(ROW_COLUMNS),
            "collective_instances": empty_frame(INSTANCE_COLUMNS),
            "clock_offsets": empty_frame(CLOCK_COLUMNS),
        }
    # missing values (NA: no seq, bytes, group size or step stated) are -1 for the arithmetic below
    rows = rows.reset_index(drop=True)
    rows = rows.assign(**{c: rows[c].to_numpy(np.int64, na_value=-1) for c in ("seq", "bytes", "group_size", "step")})
    inst, method = match_instances(rows)
    rank = rows["rank"].to_numpy(np.int64)
    device = rows["device"].to_numpy(np.int64)
    hosts, host_idx = _hosts(rank, device, options.gpus_per_host)
    raw_start = rows["start_ns"].to_numpy(np.int64)
    raw_end = rows["end_ns"].to_numpy(np.int64)
    host_off = estimate_offsets(inst, host_idx, raw_end)
    off = host_off[host_idx] if len(host_off) else np.zeros(len(rows), np.int64)
    start, end, dur = raw_start - off, raw_end - off, raw_end - raw_start
    inst = _number_by_first_start(inst, start)
    per = pd.DataFrame(
        {
            "collective": inst,
            "start_ns": start,
            "end_ns": end,
            "duration_ns": dur,
            "raw_end_ns": raw_end,
            "host": host_idx,
            "bytes": rows["bytes"].to_numpy(np.int64),
            "group_size": rows["group_size"].to_numpy(np.int64),
        }
    )
    agg = _instance_stats(per)
    last, late = _last_arrivals(inst, start, agg)
    first_row = pd.Series(np.arange(len(rows))).groupby(inst).first().to_numpy()
    op = rows["op"].astype(object).to_numpy()
    n_eff, algbw, busbw = _bandwidth(agg, op[first_row])
    group_label = np.where(
        method == 2, "stream " + rows["stream"].astype(str).to_numpy(object), rows["group"].astype(object).to_numpy()
    )
    wait = agg["start_max"].reindex(inst).to_numpy(np.int64) - start
    bw = (n_eff, algbw, busbw)
    out = _row_table(rows, inst, method, group_label, (start, end, dur, wait), agg, last, bw, off)
    instances = _instance_table(rows, agg, inst, method, first_row, group_label, wait, last, late, bw)
    clock = _clock_quality(rank, device, hosts[host_idx], off, inst, end, agg)
    return {"collectives": out, "collective_instances": instances, "clock_offsets": clock}


def _row_table(
    rows: pd.DataFrame,
    inst: np.ndarray,
    method: np.ndarray,
    group_label: np.ndarray,
    times: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    agg: pd.DataFrame,
    last: np.ndarray,
    bw: tuple[np.ndarray, np.ndarray, np.ndarray],
    off: np.ndarray,
) -> pd.DataFrame:
    """The ``collectives`` table: each row with its instance's figures; ``times``: its corrected
    start, end, duration and wait; ``bw``: per instance, the group size, algorithm and bus bandwidth."""
    start, end, dur, wait = times
    n_eff, algbw, busbw = bw
    a = agg.reindex(inst)
    return (
        pd.DataFrame(
            {
                "collective": inst,
                "rank": rows["rank"].to_numpy(np.int64).astype(np.int32),
                "device": rows["device"].to_numpy(np.int64).astype(np.int32),
                "group": group_label,
                "op": rows["op"].astype(object).to_numpy(),
                "seq": missing_if_negative(rows["seq"].to_numpy(np.int64)),
                "match": np.asarray(MATCH_METHODS, object)[method],
                "stream": rows["stream"].to_numpy(np.int64),
                "step": missing_if_negative(rows["step"].to_numpy(np.int64)),
                "bytes": missing_if_negative(a["bytes"].to_numpy(np.int64)),
                "start_ns": start,
                "end_ns": end,
                "duration_ns": dur,
                "wait_ns": wait,
                "transfer_ns": a["transfer_ns"].to_numpy(np.int64),
                "start_skew_ns": (a["start_max"] - a["start_min"]).to_numpy(np.int64),
                "end_skew_ns": (a["end_max"] - a["end_min"]).to_numpy(np.int64),
                "ranks": a["ranks"].to_numpy(np.int64),
                "group_size": n_eff[inst].astype(np.int64),
                "last": last,
                "algbw_gbps": algbw[inst],
                "busbw_gbps": busbw[inst],
                "clock_offset_ns": off.astype(np.int64),
            }
        )
        .sort_values(["collective", "rank", "device"], kind="stable")
        .reset_index(drop=True)
    )


def _instance_table(
    rows: pd.DataFrame,
    agg: pd.DataFrame,
    inst: np.ndarray,
    method: np.ndarray,
    first_row: np.ndarray,
    group_label: np.ndarray,
    wait: np.ndarray,
    last: np.ndarray,
    late: np.ndarray,
    bw: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> pd.DataFrame:
    """The ``collective_instances`` table: one row per instance, described by its first row,
    with the rank that arrived last and the total wait."""
    n_eff, algbw, busbw = bw
    rank = rows["rank"].to_numpy(np.int64)
    device = rows["device"].to_numpy(np.int64)
    last_rows = np.flatnonzero(last)
    last_rank = np.full(len(agg), -1, np.int64)
    last_dev = np.full(len(agg), -1, np.int64)
    last_rank[inst[last_rows]] = rank[last_rows]
    last_dev[inst[last_rows]] = device[last_rows]
    wait_total = pd.Series(wait).groupby(inst).sum().to_numpy(np.int64)
    return pd.DataFrame(
        {
            "collective": agg.index.to_numpy(np.int64),
            "group": group_label[first_row],
            "group_ranks": rows["group_ranks"].astype(object).to_numpy()[first_row],
            "op": rows["op"].astype(object).to_numpy()[first_row],
            "seq": missing_if_negative(rows["seq"].to_numpy(np.int64)[first_row]),
            "match": np.asarray(MATCH_METHODS, object)[method[first_row]],
            "ranks": agg["ranks"].to_numpy(np.int64),
            "group_size": n_eff.astype(np.int64),
            "hosts": agg["hosts"].to_numpy(np.int64),
            "bytes": missing_if_negative(agg["bytes"].to_numpy(np.int64)),
            "start_ns": agg["start_min"].to_numpy(np.int64),
            "end_ns": agg["end_max"].to_numpy(np.int64),
            "transfer_ns": agg["transfer_ns"].to_numpy(np.int64),
            "start_skew_ns": (agg["start_max"] - agg["start_min"]).to_numpy(np.int64),
            "end_skew_ns": (agg["end_max"] - agg["end_min"]).to_numpy(np.int64),
            "raw_end_skew_ns": (agg["raw_end_max"] - agg["raw_end_min"]).to_numpy(np.int64),
            "wait_total_ns": wait_total,
            "last_rank": last_rank.astype(np.int32),
            "last_device": last_dev.astype(np.int32),
            "late_ns": late,
            "algbw_gbps": algbw,
            "busbw_gbps": busbw,
        }
    )


def _hosts(rank: np.ndarray, device: np.ndarray, gpus_per_host: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct hosts and each row's index into them: ``rank // gpus_per_host``, or one host
    per (rank, device) when the GPU count per host is not given."""
    if gpus_per_host > 0:
        host = rank // gpus_per_host
    else:
        host = pd.MultiIndex.from_arrays([rank, device]).factorize()[0].astype(np.int64)
    hosts, host_idx = np.unique(host, return_inverse=True)
    return hosts, host_idx


def _number_by_first_start(inst: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Instance ids renumbered 0.. in the order of their first (clock-corrected) start."""
    first = pd.Series(start).groupby(inst).min()
    renum = np.empty(len(first), np.int64)
    renum[first.index.to_numpy()[np.argsort(first.to_numpy(), kind="stable")]] = np.arange(len(first))
    return cast(np.ndarray, renum[inst])


def _instance_stats(per: pd.DataFrame) -> pd.DataFrame:
    """Per instance (index ``collective``): ranks, earliest and latest corrected start and end,
    the shortest duration (the transfer), the raw end range, bytes, group size and hosts."""
    g = per.groupby("collective", sort=True)
    return pd.DataFrame(
        {
            "ranks": g.size(),
            "start_max": g["start_ns"].max(),
            "start_min": g["start_ns"].min(),
            "end_max": g["end_ns"].max(),
            "end_min": g["end_ns"].min(),
            "transfer_ns": g["duration_ns"].min(),
            "raw_end_max": g["raw_end_ns"].max(),
            "raw_end_min": g["raw_end_ns"].min(),
            "bytes": g["bytes"].max(),
            "group_size": g["group_size"].max(),
            "hosts": g["host"].nunique(),
        }
    )


def _last_arrivals(inst: np.ndarray, start: np.ndarray, agg: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Which row arrived last in its instance (the latest start, the first such row on ties), and
    per instance how much the last rank alone delayed it: latest start − second-latest start, in
    int64 ns (absolute times near 1.7e18 ns are not exact in float64); 0 for one-rank instances."""
    order = np.lexsort((-start, inst))
    first_of = np.r_[True, inst[order][1:] != inst[order][:-1]]
    last = np.zeros(len(inst), bool)
    last[order[first_of]] = True
    second_pos = order[np.r_[False, first_of[:-1]] & ~first_of] if len(order) > 1 else np.zeros(0, np.int64)
    late = np.zeros(len(agg), np.int64)
    late[inst[second_pos]] = agg["start_max"].to_numpy(np.int64)[inst[second_pos]] - start[second_pos]
    return last, late


def _bandwidth(agg: pd.DataFrame, inst_op: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per instance: the group size (stated, else the ranks seen), algorithm bandwidth (bytes /
    transfer) and bus bandwidth (nccl-tests' factor for the op), NaN where bytes are unknown."""
    n_eff = np.where(agg["group_size"].to_numpy() > 0, agg["group_size"].to_numpy(), agg["ranks"].to_numpy())
    transfer = agg["transfer_ns"].to_numpy(np.float64)
    nbytes = agg["bytes"].to_numpy(np.float64)
    ok = (nbytes > 0) & (transfer > 0)
    algbw = np.where(ok, nbytes / np.where(transfer > 0, transfer, 1.0), np.nan)
    return n_eff, algbw, algbw * _bus_factor(inst_op, n_eff)


def _clock_quality(
    rank: np.ndarray,
    device: np.ndarray,
    host: np.ndarray,
    off: np.ndarray,
    inst: np.ndarray,
    end: np.ndarray,
    agg: pd.DataFrame,
) -> pd.DataFrame:
    """Per (rank, device): its host, clock offset, the shared multi-host instances, and the median
    |own end − instance median end| over them (ends relative to the instance's first end:
    absolute ns are not exact in float64)."""
    end_rel = end - agg["end_min"].to_numpy(np.int64)[inst]
    med_end = pd.Series(end_rel).groupby(inst).median().to_numpy()
    dev_end = np.abs(end_rel - med_end[inst])
    multi = agg["hosts"].to_numpy()[inst] >= 2
    per = pd.DataFrame(
        {
            "rank": rank,
            "device": device,
            "host": host,
            "offset_ns": off,
            "multi": multi.astype(np.int64),
            "residual": np.where(multi, dev_end, np.nan),
        }
    )
    g = per.groupby(["rank", "device"], sort=True)
    clock = pd.DataFrame(
        {
            "host": g["host"].first(),
            "offset_ns": g["offset_ns"].first(),
            "instances": g["multi"].sum(),
            "residual_end_ns": np.rint(g["residual"].median().fillna(0)),
        }
    ).reset_index()
    return clock.astype(
        {
            "rank": "int32",
            "device": "int32",
            "host": "int64",
            "offset_ns": "int64",
            "instances": "int64",
            "residual_end_ns": "int64",
        }
    )

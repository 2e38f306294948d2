"""The roofline of every op on every rank, and the slow-GPU signal (docs/semantics.md, "Op
performance model", "Hardware peaks", "Ranks and stragglers").

From the per-partition ``op_perf`` and ``devices`` tables (:mod:`dtrace.analyses.opperf`) and
the GPU peaks (:mod:`dtrace.knowledge.hardware`, with the ``gpu_spec`` option's entries first):

``devices``
    gains ``gpu`` (the matched entry of the GPU table, ``""`` if none) and ``gpu_note`` (why
    none matched).
``gpu_peaks``
    every figure of every matched entry (metric, value, unit, source).
``op_perf``
    gains, per row, the achieved throughput and the roofline of its part's device::

        tflops       = count·flops / gpu_ns / 1000       (TFLOP/s; FLOP per ns = GFLOP/s)
        tbps         = count·bytes / gpu_ns / 1000       (TB/s)
        intensity    = flops / bytes                     (FLOP per byte)
        roofline_ns  = count · max(flops / peak_tflops, bytes / peak_tbps)   (in ns)
        bound        = compute if the first term is the larger, else memory
        roofline_share = roofline_ns / gpu_ns
        lost_ns      = max(gpu_ns − roofline_ns, 0)      (the time a perfect kernel would save)
        above_peak   = roofline_ns > gpu_ns              (faster than the roofline allows)

    A row above the peak (``roofline_share`` > 1) is not a kernel beating the hardware: the peak
    table is low for that device (a datasheet figure below what the part reaches, a clock above
    the reference) or the timing is off (a kernel whose reported duration is short of its work,
    bytes the model counts that caches serve). It is flagged and loses no time, never a negative
    one; ``dtrace perf`` lists such rows.

    ``peak_tflops`` is the device's peak for the op's unit (matrix or vector) and precision,
    ``peak_tbps`` its HBM bandwidth. An op without FLOPs (a copy, a fill) or without a compute
    peak for its precision (integer arithmetic) is bounded by its bytes alone.
``op_perf_xrank``
    per (op, arguments, phase, step sequences) over the parts that ran it: summed count, time,
    roofline and time lost; the per-part median instance time's median, minimum, maximum,
    ``spread = max / median`` and the slowest part.
``op_family_perf``
    per (rank, device, family, phase): instances, time, its share of the part's op time, FLOPs,
    bytes, achieved throughput over the modelled rows, roofline and time lost; ``unmodelled``
    holds the ops without a model (their time, no FLOPs). A trace without serving step
    annotations has one phase, ``""``.
``gpu_slowness``
    signal (e) of the straggler detector: per part, its modelled ops' time against the median
    part's at equal (op, arguments), over the (op, arguments) at least two parts ran:
    ``gpu_slowdown = Σ own time / Σ count·median_over_parts(mean instance time)`` (time-weighted:
    every instance counts, so a GPU time-sliced with another process, whose few stretched
    instances hold most of the lost time, reads as slow as it is; > 1: slower), its robust
    z-score, ``median_slowdown`` (the same with each part's median instance time: a shift of every
    instance, as a throttled GPU shows, moves both; a long tail of slow instances, as a contended
    GPU shows, moves ``gpu_slowdown`` only), ``min_slowdown`` (the same with the fastest instance:
    a contended GPU's fastest instances are as fast as the others'), the share of the compared time in (op, arguments)
    where the part is slower than the median part, and the op that loses it the most time. An
    op's time is the union of its own kernels: waiting for other ranks does not enter it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyses.opperf import str_column
from ..core.dtypes import conform, empty_frame
from ..knowledge.hardware import Spec, load_specs, match_device
from ..options import Options
from ..vector.groups import I64, dense_codes, first_match, unique, unique_first
from .ranks import peer_z

Tables = dict[str, pd.DataFrame]
KEYS = ["rank", "device"]
ARG_KEYS = ["op", "family", "backward", "modelled", "shapes", "dtypes", "strides", "args", "phase", "seqs"]
IDENT = ["op", "shapes", "dtypes", "strides", "args", "phase", "seqs"]  # the rest of ARG_KEYS follows from these
STEP_COLUMNS = ("phase", "seqs")
"""The serving step's columns of ``op_perf`` (results written before them read as ``""``)."""
MIN_GPU_SLOWDOWN = 1.03
SLOWDOWN_FLOOR = 0.005

ROOFLINE_COLUMNS = {
    "tflops": "float64",
    "tbps": "float64",
    "intensity": "float64",
    "gpu": "object",
    "peak_tflops": "float64",
    "peak_tbps": "float64",
    "roofline_ns": "Int64",
    "bound": "object",
    "roofline_share": "float64",
    "lost_ns": "Int64",
    "above_peak": "bool",
}
DEVICE_EXTRA = {"gpu": "object", "gpu_note": "object"}
PEAK_COLUMNS = {
    "gpu": "object",
    "metric": "object",
    "value": "float64",
    "unit": "object",
    "source": "object",
    "origin": "object",
}
XRANK_COLUMNS = {
    **{k: ("bool" if k in ("backward", "modelled") else "object") for k in ARG_KEYS},
    "parts": "int64",
    "count": "int64",
    "gpu_ns": "int64",
    "median_ns": "int64",
    "min_ns": "int64",
    "max_ns": "int64",
    "max_rank": "int32",
    "max_device": "int32",
    "spread": "float64",
    "flops": "float64",
    "bytes": "float64",
    "unit": "object",
    "precision": "object",
    "params": "object",
    "tflops": "float64",
    "tbps": "float64",
    "intensity": "float64",
    "gpu": "object",
    "roofline_ns": "Int64",
    "bound": "object",
    "roofline_share": "float64",
    "lost_ns": "Int64",
    "above_peak": "bool",
}
FAMILY_COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "family": "object",
    "phase": "object",
    "ops": "int64",
    "count": "int64",
    "gpu_ns": "int64",
    "share": "float64",
    "modelled_ns": "int64",
    "flops": "float64",
    "bytes": "float64",
    "tflops": "float64",
    "tbps": "float64",
    "roofline_ns": "Int64",
    "roofline_share": "float64",
    "lost_ns": "Int64",
}
SLOW_COLUMNS = {
    "rank": "int32",
    "device": "int32",
    "gpu_slowdown": "float64",
    "gpu_slowdown_z": "float64",
    "median_slowdown": "float64",
    "min_slowdown": "float64",
    "shapes": "int64",
    "slower_share": "float64",
    "compared_ns": "int64",
    "worst_op": "object",
    "worst_ratio": "float64",
    "worst_excess_ns": "int64",
}


def row_codes(df: pd.DataFrame, cols: list[str]) -> tuple[np.ndarray, int]:
    """One integer per distinct tuple of ``df[cols]`` (each column hashed once, no Python tuples)."""
    return dense_codes(*(pd.factorize(df[c], use_na_sentinel=True)[0] for c in cols))


def _device_specs(devices: pd.DataFrame, specs: list[Spec]) -> tuple[pd.DataFrame, dict[str, Spec]]:
    """``devices`` with ``gpu`` and ``gpu_note``, and the matched entries by name (each distinct
    device described once)."""
    out = devices.copy()
    cols = ["name", "vendor", "capability", "sms", "memory_bytes"]
    if not len(out):
        return conform(out.assign(gpu=[], gpu_note=[]), DEVICE_EXTRA, "devices"), {}
    ident = pd.MultiIndex.from_frame(out[cols].astype(str))
    codes, uniq = pd.factorize(ident)
    gpu, note, used = [], [], {}
    for name, vendor, cap, sms, mem in uniq:
        spec = match_device(specs, name, vendor=vendor, capability=cap, sms=int(sms), memory_bytes=int(mem))
        if spec is not None:
            gpu.append(spec.gpu)
            note.append("")
            used[spec.gpu] = spec
        else:
            gpu.append("")
            note.append(
                "the trace names no device (Kineto's deviceProperties, rocprofv3's agents, Nsight Systems' "
                "TARGET_INFO_GPU)"
                if not name
                else f"{name!r} is not in the GPU table: add its peaks with --gpu-spec FILE"
            )
    out["gpu"] = np.asarray(gpu, dtype=object)[codes] if len(codes) else []
    out["gpu_note"] = np.asarray(note, dtype=object)[codes] if len(codes) else []
    return out, used


def _peaks(used: dict[str, Spec]) -> pd.DataFrame:
    rows = [(s.gpu, m, v, u, s.source, s.origin) for s in used.values() for m, v, u in s.figures()]
    return pd.DataFrame(rows, columns=list(PEAK_COLUMNS)) if rows else empty_frame(PEAK_COLUMNS)


def roofline(
    op: pd.DataFrame, devices: pd.DataFrame, used: dict[str, Spec], key: np.ndarray | None = None
) -> pd.DataFrame:
    """``op`` with the roofline columns (module docs) for its part's device; ``key`` numbers the
    rows' (op, arguments) (:func:`row_codes` of :data:`IDENT`, computed if not given)."""
    out = op.copy()
    n = len(out)
    count = out["count"].to_numpy(np.float64)
    gpu_ns = out["gpu_ns"].to_numpy(np.float64)
    flops = out["flops"].to_numpy(np.float64)
    nbytes = out["bytes"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["tflops"] = np.where(gpu_ns > 0, count * flops / gpu_ns / 1e3, np.nan)
        out["tbps"] = np.where(gpu_ns > 0, count * nbytes / gpu_ns / 1e3, np.nan)
        out["intensity"] = np.where(nbytes > 0, flops / nbytes, np.nan)
    gpu, gpu_text = _row_gpus(out, devices)
    out["gpu"] = gpu_text.array
    peak_t = np.full(n, np.nan)
    peak_b = np.full(n, np.nan)
    if n:
        if key is None:
            key = row_codes(out, IDENT)[0]
        peak_t, peak_b = _peaks_of(out, gpu, key, used)
    out["peak_tflops"] = peak_t
    out["peak_tbps"] = peak_b
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(flops == 0, 0.0, flops / (peak_t * 1e3))  # ns per instance (NaN: no peak)
        memory = nbytes / (peak_b * 1e3)
    unit_vector = (out["unit"] == "vector").to_numpy(bool)
    compute = np.where(np.isnan(compute) & unit_vector & np.isfinite(memory), 0.0, compute)  # int vector ops
    per = np.fmax(compute, memory)
    per = np.where(np.isnan(compute) | np.isnan(memory), np.nan, per)
    roof = per * count
    out["roofline_ns"] = _nullable(roof)
    bound = np.where(np.isnan(per), -1, np.where(compute >= memory, 0, 1))
    out["bound"] = str_column(bound, np.array(["compute", "memory"], object)).array
    with np.errstate(divide="ignore", invalid="ignore"):
        out["roofline_share"] = np.where(gpu_ns > 0, roof / gpu_ns, np.nan)
    out["lost_ns"] = _nullable(np.where(np.isnan(roof), np.nan, np.maximum(gpu_ns - roof, 0.0)))
    out["above_peak"] = np.nan_to_num(roof) > gpu_ns
    return out


def _row_gpus(out: pd.DataFrame, devices: pd.DataFrame) -> tuple[np.ndarray, pd.Series]:
    """Each row's matched GPU name ("" if none), and the same as a text column (missing if none)."""
    n = len(out)
    if not (len(devices) and n):
        return np.full(n, "", dtype=object), str_column(np.full(n, -1), np.empty(0, object))
    dev = devices.drop_duplicates(KEYS)
    at = first_match(
        (dev["rank"].to_numpy(I64), dev["device"].to_numpy(I64)),
        (out["rank"].to_numpy(I64), out["device"].to_numpy(I64)),
    )
    names = dev["gpu"].fillna("").to_numpy(object)
    gpu = np.where(at >= 0, names[np.maximum(at, 0)] if len(names) else "", "").astype(object)
    return gpu, str_column(at, names)


def _peaks_of(
    out: pd.DataFrame, gpu: np.ndarray, key: np.ndarray, used: dict[str, Spec]
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's compute peak (TFLOP/s, for its unit and precision) and memory peak (TB/s) on
    its GPU, looked up once per (GPU, op and arguments); NaN where unknown."""
    codes, _ = dense_codes(pd.factorize(gpu)[0], key)  # unit and precision follow from the op's arguments
    _, first = unique_first(codes)
    units = out["unit"].to_numpy(object)[first]
    precs = out["precision"].to_numpy(object)[first]
    pt, pb = [], []
    for g, unit, prec in zip(gpu[first], units, precs):
        unit = unit if isinstance(unit, str) else ""
        prec = prec if isinstance(prec, str) else ""
        spec = used.get(g)
        pt.append((spec.peak(unit, prec) if unit else None) if spec else None)
        pb.append(spec.hbm_tbps if spec else None)
    peak_t = np.array([np.nan if v is None else v for v in pt], np.float64)[codes]
    peak_b = np.array([np.nan if v is None else v for v in pb], np.float64)[codes]
    return peak_t, peak_b


def _nullable(x: np.ndarray) -> pd.arrays.IntegerArray:
    missing = ~np.isfinite(x)
    return pd.arrays.IntegerArray(np.rint(np.where(missing, 0, x)).astype(np.int64), missing)


def _xrank(op: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """Per (op, arguments) across the parts (``key``: dense codes of the rows' (op, arguments))."""
    if not len(op):
        return empty_frame(XRANK_COLUMNS)
    n = int(key.max()) + 1
    med_ns = op["median_ns"].to_numpy(np.float64)
    count = op["count"].to_numpy(np.int64)
    gpu_ns = op["gpu_ns"].to_numpy(np.int64)
    roof_row = op["roofline_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan)
    # each group's rows by median instance time, longest first (ties: the earlier row first)
    by_med = np.lexsort((np.arange(len(key)), -med_ns, key))
    k_sorted = key[by_med]
    starts = np.flatnonzero(np.r_[True, k_sorted[1:] != k_sorted[:-1]])
    ends = np.r_[starts[1:], len(key)]
    hi_row, lo_row = by_med[starts], by_med[ends - 1]
    parts = (ends - starts).astype(np.int64)
    med = (med_ns[by_med[starts + (parts - 1) // 2]] + med_ns[by_med[starts + parts // 2]]) / 2
    first = unique_first(key)[1]
    out = op.iloc[first][ARG_KEYS].reset_index(drop=True)
    out["parts"] = parts
    out["count"] = np.bincount(key, count, n).astype(np.int64)
    out["gpu_ns"] = np.bincount(key, gpu_ns, n).astype(np.int64)
    out["median_ns"] = med
    out["min_ns"] = med_ns[lo_row]
    out["max_ns"] = med_ns[hi_row]
    out["max_rank"] = op["rank"].to_numpy(np.int32)[hi_row]
    out["max_device"] = op["device"].to_numpy(np.int32)[hi_row]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["spread"] = np.where(med > 0, med_ns[hi_row] / med, np.nan)
    for c in ("flops", "bytes", "unit", "precision", "params"):
        out[c] = op[c].to_numpy()[first]
    gpu_codes = pd.factorize(op["gpu"])[0].astype(np.int64) + 1  # 0: no GPU named
    base = int(gpu_codes.max()) + 1
    pairs = unique(key.astype(np.int64) * base + gpu_codes)  # the distinct (key, GPU) pairs
    n_gpus = np.bincount(pairs // base, minlength=n)
    out["gpu"] = np.where(n_gpus > 1, "mixed", op["gpu"].to_numpy(object)[first]).astype(object)
    flops = op["flops"].to_numpy(np.float64) * count
    nbytes = op["bytes"].to_numpy(np.float64) * count
    total_flops = np.bincount(key, np.nan_to_num(flops), n)
    total_bytes = np.bincount(key, np.nan_to_num(nbytes), n)
    has_flops = np.bincount(key, np.isfinite(flops), n) > 0
    has_bytes = np.bincount(key, np.isfinite(nbytes), n) > 0
    known = np.bincount(key, np.isfinite(roof_row), n) == parts  # every part has a roofline
    roof = np.where(known, np.bincount(key, np.nan_to_num(roof_row), n), np.nan)
    ns = out["gpu_ns"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["tflops"] = np.where((ns > 0) & has_flops, total_flops / ns / 1e3, np.nan)
        out["tbps"] = np.where((ns > 0) & has_bytes, total_bytes / ns / 1e3, np.nan)
        out["intensity"] = np.where(out["bytes"] > 0, out["flops"] / out["bytes"], np.nan)
        out["roofline_share"] = np.where(ns > 0, roof / ns, np.nan)
    out["roofline_ns"] = _nullable(roof)
    out["bound"] = op["bound"].to_numpy(object)[first]
    out["lost_ns"] = _nullable(np.where(np.isnan(roof), np.nan, np.maximum(ns - roof, 0.0)))
    above = op["above_peak"].to_numpy(bool) if "above_peak" in op.columns else np.zeros(len(op), bool)
    out["above_peak"] = np.bincount(key, above, n) > 0
    out = out.sort_values(["lost_ns", "gpu_ns"], ascending=False, kind="stable", na_position="last")
    return out.reset_index(drop=True)


def _families(op: pd.DataFrame) -> pd.DataFrame:
    if not len(op):
        return empty_frame(FAMILY_COLUMNS)
    fam_codes, fams = pd.factorize(op["family"], sort=True)
    phase_codes, phases = pd.factorize(op["phase"].fillna(""), sort=True)
    rank, dev = op["rank"].to_numpy(np.int64), op["device"].to_numpy(np.int64)
    g, n = dense_codes(rank, dev, fam_codes, phase_codes)  # ordered like (rank, device, family, phase)
    first = unique_first(g)[1]
    modelled = op["modelled"].to_numpy(bool)
    count = op["count"].to_numpy(np.int64)
    gpu_ns = op["gpu_ns"].to_numpy(np.int64)
    roof_row = op["roofline_ns"].astype("Float64").to_numpy(np.float64, na_value=np.nan)
    known = np.isfinite(roof_row)
    out = pd.DataFrame(
        {
            "rank": rank[first].astype(np.int32),
            "device": dev[first].astype(np.int32),
            "family": np.asarray(fams, dtype=object)[fam_codes[first]],
            "phase": np.asarray(phases, dtype=object)[phase_codes[first]],
            "ops": np.bincount(g, minlength=n).astype(np.int64),
            "count": np.bincount(g, count, n).astype(np.int64),
            "gpu_ns": np.bincount(g, gpu_ns, n).astype(np.int64),
            "modelled_ns": np.bincount(g, np.where(modelled, gpu_ns, 0), n).astype(np.int64),
        }
    )
    flops = np.bincount(g, np.where(modelled, np.nan_to_num(op["flops"].to_numpy(np.float64)) * count, 0.0), n)
    nbytes = np.bincount(g, np.where(modelled, np.nan_to_num(op["bytes"].to_numpy(np.float64)) * count, 0.0), n)
    roof_sum = np.bincount(g, np.where(known, roof_row, 0.0), n)
    covered = np.bincount(g, np.where(known, gpu_ns, 0), n)
    lost_sum = np.bincount(g, np.where(known, np.maximum(gpu_ns - np.nan_to_num(roof_row), 0.0), 0.0), n)
    part = dense_codes(rank[first], dev[first])[0]
    total = np.bincount(part, out["gpu_ns"].to_numpy(np.float64))[part]
    mod = out["modelled_ns"].to_numpy(np.float64)
    roof = np.where(covered > 0, roof_sum, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["share"] = np.where(total > 0, out["gpu_ns"] / total, 0.0)
        out["flops"] = np.where(mod > 0, flops, np.nan)
        out["bytes"] = np.where(mod > 0, nbytes, np.nan)
        out["tflops"] = np.where(mod > 0, flops / mod / 1e3, np.nan)
        out["tbps"] = np.where(mod > 0, nbytes / mod / 1e3, np.nan)
        out["roofline_share"] = np.where(covered > 0, roof / covered, np.nan)
    out["roofline_ns"] = _nullable(roof)
    out["lost_ns"] = _nullable(np.where(covered > 0, lost_sum, np.nan))
    return out[list(FAMILY_COLUMNS)]


def gpu_slowness(op: pd.DataFrame, parts: pd.DataFrame, key: np.ndarray | None = None) -> pd.DataFrame:
    """Signal (e) per part (module docs): modelled ops against the median part at equal arguments
    (``key``: the rows' (op, arguments) codes, computed if not given)."""
    n = len(parts)
    p_rank, p_dev = parts["rank"].to_numpy(I64), parts["device"].to_numpy(I64)
    base = {
        "gpu_slowdown": np.ones(n),
        "median_slowdown": np.ones(n),
        "min_slowdown": np.ones(n),
        "shapes": np.zeros(n, np.int64),
        "slower_share": np.zeros(n),
        "compared_ns": np.zeros(n, np.int64),
        "worst_op": np.full(n, "", object),
        "worst_ratio": np.full(n, np.nan),
        "worst_excess_ns": np.zeros(n, np.int64),
    }
    # the rows compared, as positions: only the columns used are taken at them (a frame filter
    # copies every column, the texts of tens of thousands of rows at many ranks)
    mine = op["modelled"].to_numpy(bool) & (op["count"].to_numpy() > 0) if len(op) else np.zeros(0, bool)
    sel = np.flatnonzero(mine)
    if len(sel):
        key, n_keys = dense_codes((row_codes(op, IDENT)[0] if key is None else key)[sel])
        shared = np.bincount(key, minlength=n_keys)[key] >= 2  # (op, arguments) at least two parts ran
        sel, key = sel[shared], key[shared]
    if len(sel) and n:
        cnt = op["count"].to_numpy(np.float64)[sel]
        own_mean = op["gpu_ns"].to_numpy(np.float64)[sel] / cnt
        own_med = op["median_ns"].to_numpy(np.float64)[sel]
        ref = pd.Series(own_mean).groupby(key).transform("median").to_numpy()
        ref_med = pd.Series(own_med).groupby(key).transform("median").to_numpy()
        own_min = op["min_ns"].to_numpy(np.float64)[sel]
        ref_min = pd.Series(own_min).groupby(key).transform("median").to_numpy()
        ratio = np.divide(own_mean, ref, out=np.ones(len(sel)), where=ref > 0)
        at = first_match((p_rank, p_dev), (op["rank"].to_numpy(I64)[sel], op["device"].to_numpy(I64)[sel]))
        ok = at >= 0
        at, cnt, own_mean, own_med, ref, ref_med, ratio = (
            at[ok],
            cnt[ok],
            own_mean[ok],
            own_med[ok],
            ref[ok],
            ref_med[ok],
            ratio[ok],
        )
        rows = np.flatnonzero(ok)
        own = np.bincount(at, cnt * own_mean, minlength=n)
        refs = np.bincount(at, cnt * ref, minlength=n)
        meds, ref_meds = np.bincount(at, cnt * own_med, minlength=n), np.bincount(at, cnt * ref_med, minlength=n)
        slower = np.bincount(at, np.where(ratio > 1.0, cnt * ref, 0.0), minlength=n)
        excess = cnt * (own_mean - ref)
        base["gpu_slowdown"] = np.divide(own, refs, out=np.ones(n), where=refs > 0)
        base["median_slowdown"] = np.divide(meds, ref_meds, out=np.ones(n), where=ref_meds > 0)
        mins, ref_mins = np.bincount(at, cnt * own_min, minlength=n), np.bincount(at, cnt * ref_min, minlength=n)
        base["min_slowdown"] = np.divide(mins, ref_mins, out=np.ones(n), where=ref_mins > 0)
        base["shapes"] = np.bincount(at, minlength=n).astype(np.int64)
        base["slower_share"] = np.divide(slower, refs, out=np.zeros(n), where=refs > 0)
        base["compared_ns"] = np.rint(refs).astype(np.int64)
        # the (op, arguments) that loses each part the most time: sort by part, then excess descending
        order = np.lexsort((-excess, at))
        first_of_part = order[np.r_[True, at[order][1:] != at[order][:-1]]] if order.size else order
        worst_at = at[first_of_part]
        has = excess[first_of_part] > 0
        pick = first_of_part[has]
        label_rows = sel[rows[pick]]
        labels = (op["op"].iloc[label_rows].astype(str) + " " + op["shapes"].iloc[label_rows].astype(str)).to_numpy(
            object
        )
        base["worst_op"][worst_at[has]] = labels
        base["worst_ratio"][worst_at[has]] = ratio[pick]
        base["worst_excess_ns"][worst_at[has]] = np.rint(excess[pick]).astype(np.int64)
    out = pd.DataFrame({"rank": p_rank.astype(np.int32), "device": p_dev.astype(np.int32), **base})
    out.insert(3, "gpu_slowdown_z", peer_z(out["gpu_slowdown"].to_numpy(), floor=SLOWDOWN_FLOOR) if n else [])
    return out


def reduce_op_perf(tables: Tables, options: Options) -> Tables:
    """``op_perf`` with the roofline, ``op_perf_xrank``, ``op_family_perf``, ``devices`` with the
    matched GPU, ``gpu_peaks`` and ``gpu_slowness`` (module docs)."""
    op = tables.get("op_perf")
    dev = tables.get("devices")
    if dev is None:
        dev = empty_frame({"rank": "int32", "device": "int32", "name": "object"})
    if op is None:
        return {}
    missing = [c for c in STEP_COLUMNS if c not in op.columns]
    if missing:  # results written before the serving steps were read
        op = op.assign(**{c: str_column(np.full(len(op), -1), np.empty(0, object)).array for c in missing})
    specs = load_specs(options.gpu_spec)
    described = {"name", "vendor", "capability", "sms", "memory_bytes"} <= set(dev.columns)
    dev, used = _device_specs(dev, specs) if described else (dev, {})
    key = row_codes(op, IDENT)[0]
    op = roofline(op, dev, used, key)
    parts = dev[KEYS] if len(dev) else op[KEYS].drop_duplicates()
    return {
        "op_perf": op,
        "op_perf_xrank": _xrank(op, key),
        "op_family_perf": _families(op),
        "devices": dev,
        "gpu_peaks": _peaks(used),
        "gpu_slowness": gpu_slowness(op, parts.drop_duplicates().sort_values(KEYS, kind="stable"), key),
    }

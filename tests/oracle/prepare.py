"""Turn one (rank, device) event frame into the views every per-rank analysis uses.

Built once per part: GPU events with their category, launch time and step; host events;
step windows. Analyses receive a :class:`PartData` and never mutate it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .categories import categorize
from .intervals import clip_stream_overlaps
from dtrace.options import Options

GPU_KINDS = ("kernel", "memcpy", "memset")
STEP_COLUMNS = {"step": "int64", "step_name": "object", "start_ns": "int64", "end_ns": "int64",
                "source": "object"}


FLOAT_US_FORMATS = ("kineto", "jax")


def float_us_end(start_ns: np.ndarray, end_ns: np.ndarray, base_ns: int) -> np.ndarray:
    """End times as a float-µs tool computes them: ``ts + dur`` in float64, then to ns.

    dtrace converts ``ts`` and ``dur`` to ns separately, so a duration never changes by rounding.
    TraceLens adds the float µs values; near 1.7e15 µs a float64 resolves only 0.25 µs, and its
    ends round to that grid. TraceLens mode reproduces this. The float ``ts``/``dur`` are
    recovered exactly from the ns values (integer part and fraction converted separately).
    """
    from dtrace.core.schema import us_to_ns

    rel = start_ns - base_ns
    dur = end_ns - start_ns
    ts = (rel // 1000).astype(np.float64) + (rel % 1000).astype(np.float64) / 1000.0
    d = (dur // 1000).astype(np.float64) + (dur % 1000).astype(np.float64) / 1000.0
    return us_to_ns(ts + d) + base_ns


@dataclass
class PartData:
    """Everything known about one (rank, device) partition."""

    rank: int
    device: int
    fmt: str
    gpu: pd.DataFrame          # GPU events: row, stream, kind, name, start_ns, end_ns, correlation, category, launch_ns, step
    host: pd.DataFrame         # host events (device == -1)
    steps: pd.DataFrame        # step windows: step, step_name, start_ns, end_ns (host or GPU time)
    collectives: pd.DataFrame  # side table keyed by row
    memcpy: pd.DataFrame       # side table keyed by row
    options: Options
    clipped_events: int = 0
    clipped_ns: int = 0
    meta: dict = field(default_factory=dict)


def _str_names(s: pd.Series) -> pd.Series:
    return s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")


def _is_rocm(host: pd.DataFrame, gpu: pd.DataFrame) -> bool:
    """Issue 14 (changed on purpose): a ROCm part has a ``hip*`` runtime call or a
    ``__amd_rocclr_*`` GPU event; only ROCm parts clip every same-stream overlap."""
    rt = host.loc[(host["kind"].astype(str) == "runtime").to_numpy(), "name"].astype(str) if len(host) else []
    return any(n.startswith("hip") for n in rt) or any(str(n).startswith("__amd_rocclr_") for n in gpu["name"])


def _clip_beyond_pdl(gpu: pd.DataFrame) -> tuple[np.ndarray, int, int]:
    """Issue 14 (changed on purpose): outside ROCm, a kernel keeps its overlap with later
    kernels of its stream (programmatic dependent launch) and is cut at the first later
    memcpy/memset; a memcpy/memset is cut at the next event. A plain loop per stream."""
    start, end = gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy().copy()
    kernel = (gpu["kind"].astype(str) == "kernel").to_numpy()
    stream = gpu["stream"].to_numpy()
    old = end.copy()
    for st in pd.unique(stream):
        ks = np.flatnonzero(stream == st)
        ks = ks[np.argsort(start[ks], kind="stable")].tolist()
        nxt, nxt_copy = None, None  # start of the next event, of the next memcpy/memset
        for i in reversed(ks):
            bound = nxt_copy if kernel[i] else nxt
            if bound is not None and end[i] > bound:
                end[i] = max(bound, start[i])
            nxt = start[i]
            if not kernel[i]:
                nxt_copy = start[i]
    return end, int((old != end).sum()), int((old - end).sum())


def prepare(events: pd.DataFrame, collectives: pd.DataFrame, memcpy: pd.DataFrame, *,
            rank: int, device: int, fmt: str, options: Options, base_ns: int = 0) -> PartData:
    """Build the :class:`PartData` of one partition (pure: copies what it changes)."""
    ev = events
    # kind is categorical (dictionary-encoded end to end): compare categories, never per-event strings
    ev_kind = ev["kind"] if len(ev) else pd.Series([], dtype=object)
    ev_device = ev["device"].to_numpy()
    is_gpu = ev_kind.isin(GPU_KINDS).to_numpy() & (ev_device == device) if len(ev) else np.zeros(0, bool)
    host = ev.loc[(ev_device == -1) if len(ev) else np.zeros(0, bool)]
    gpu = ev.loc[is_gpu, ["stream", "kind", "name", "start_ns", "end_ns", "correlation", "external_id"]].copy()
    gpu.insert(0, "row", np.flatnonzero(is_gpu).astype(np.int64))
    gpu["kind"] = gpu["kind"].astype(str)
    gpu["name"] = _str_names(gpu["name"]).cat.remove_unused_categories() if len(gpu) else gpu["name"].astype("category")

    # launch time: the host runtime call with the same correlation id
    host_kind = host["kind"] if len(host) else pd.Series([], dtype=object)
    launches = host.loc[(host_kind == "runtime").to_numpy() & (host["correlation"].to_numpy() >= 0)]
    launches = launches.drop_duplicates("correlation")
    idx = pd.Index(launches["correlation"].to_numpy()).get_indexer(gpu["correlation"].to_numpy())
    lstart = launches["start_ns"].to_numpy()
    gpu["launch_ns"] = np.where(idx >= 0, lstart[np.maximum(idx, 0)] if len(lstart) else 0, -1).astype(np.int64)
    if options.linked_only:
        gpu = gpu.loc[gpu["launch_ns"].to_numpy() >= 0]

    clipped = clipped_ns = 0
    if options.compat == "tracelens" and fmt in FLOAT_US_FORMATS and len(gpu):
        gpu["end_ns"] = float_us_end(gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy(), base_ns)
    if options.compat != "tracelens" and len(gpu):
        if _is_rocm(host, gpu):
            new_end, clipped, clipped_ns = clip_stream_overlaps(
                gpu["start_ns"].to_numpy(), gpu["end_ns"].to_numpy(), gpu["stream"].to_numpy())
        else:
            new_end, clipped, clipped_ns = _clip_beyond_pdl(gpu)
        gpu["end_ns"] = new_end
    gpu["category"] = pd.Categorical(
        categorize(gpu["name"], gpu["kind"], compat=options.compat, fmt=fmt),
        categories=["compute", "comm", "memcpy", "memset"])

    steps = find_steps(host, ev.loc[ev_kind.eq("gpu_annotation").to_numpy() & (ev_device == device)]
                       if len(ev) else ev, options.step_pattern)
    gpu["step"] = assign_steps(gpu, steps)
    if options.step is not None:
        gpu = gpu.loc[gpu["step"].to_numpy() == options.step]
        steps = steps.loc[steps["step"].to_numpy() == options.step]
    rows = gpu["row"].to_numpy()
    coll = collectives.loc[collectives["row"].isin(rows)] if len(collectives) else collectives
    mem = memcpy.loc[memcpy["row"].isin(rows)] if len(memcpy) else memcpy
    return PartData(rank=rank, device=device, fmt=fmt, gpu=gpu.reset_index(drop=True), host=host,
                    steps=steps.reset_index(drop=True), collectives=coll, memcpy=mem, options=options,
                    clipped_events=clipped, clipped_ns=clipped_ns)


def find_steps(host: pd.DataFrame, gpu_annotations: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """Step windows: host annotations matching ``pattern``, else GPU-side ones (never both)."""
    rx = re.compile(pattern)
    for frame, kinds, source in ((host, ("annotation",), "host"), (gpu_annotations, ("gpu_annotation",), "gpu")):
        if not len(frame):
            continue
        f = frame.loc[frame["kind"].isin(kinds).to_numpy()]
        if not len(f):
            continue
        names = f["name"].astype(str)
        uniq = pd.unique(names)
        nums = {}
        for u in uniq:
            m = rx.search(u)
            if m:
                nums[u] = int(m.group(1)) if m.groups() and m.group(1) is not None else -1
        if not nums:
            continue
        sel = names.isin(list(nums)).to_numpy()
        out = pd.DataFrame({
            "step": names[sel].map(nums).to_numpy(np.int64),
            "step_name": names[sel].to_numpy(object),
            "start_ns": f["start_ns"].to_numpy()[sel],
            "end_ns": f["end_ns"].to_numpy()[sel],
            "source": source,
        })
        out = out.sort_values("start_ns", kind="stable").reset_index(drop=True)
        unnumbered = out["step"].to_numpy() < 0  # e.g. one NVTX iteration tag, repeated: number by time
        out.loc[unnumbered, "step"] = np.arange(int(unnumbered.sum()), dtype=np.int64)
        return out.drop_duplicates("step").reset_index(drop=True)
    return pd.DataFrame({k: pd.Series([], dtype=v) for k, v in STEP_COLUMNS.items()})


def assign_steps(gpu: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step of each GPU event: the window containing its launch, else its own start; -1 if none."""
    if not len(gpu) or not len(steps):
        return np.full(len(gpu), -1, np.int64)
    t = gpu["start_ns"].to_numpy()
    if (steps["source"] == "host").all():
        t = np.where(gpu["launch_ns"].to_numpy() >= 0, gpu["launch_ns"].to_numpy(), t)
    s = steps["start_ns"].to_numpy()
    e = steps["end_ns"].to_numpy()
    j = np.searchsorted(s, t, side="right") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (t < e[jj])
    return np.where(ok, steps["step"].to_numpy()[jj], -1).astype(np.int64)

"""A partition of many (rank, device) parts, prepared once for every per-partition analysis.

A Dask partition holds whole (rank, device) parts — one large rank alone, or hundreds of small
ones together — so every analysis computes all of its parts in one vectorised pass, grouped by
``part``. :func:`prepare` builds the views the analyses share from the partition's concatenated
event table: the GPU events with their category, launch time and step; the host events; the
step windows; and the side tables. It runs a fixed number of numpy/pandas operations whatever
the number of parts: no Python loop over parts or events.

Columns (all frames are plain pandas; names and kinds are categoricals; never mutate them):

``parts``
    one row per part: ``part`` (0..P-1), ``rank``, ``device``, ``format``, ``base_ns``,
    ``rocm`` (a ROCm trace), ``mtia`` (an MTIA trace), ``clipped_events``, ``clipped_ns``, ``steps`` (step windows found);
    ``session_start_ns``/``session_end_ns`` (the profiling session a reader recorded, -1 if
    none) where the loader gives them.
``gpu``
    GPU events (kernel, memcpy, memset on the part's device) in part order, each part's events in
    its table's order: ``part``, ``rank``, ``device``, ``row`` (the event's row in its part's
    table), ``stream``, ``kind``, ``name``, ``start_ns``, ``end_ns``, ``correlation``,
    ``external_id``, ``launch_ns`` (start of the launching runtime call, -1 unknown),
    ``launch_end_ns`` (end of that call, -1 unknown), ``category`` (compute, comm, memcpy, memset), ``step`` (-1 none).
``host``
    host events (device -1 in the trace): ``part``, ``rank``, ``device`` (the part's GPU),
    ``row``, ``pid``, ``tid``, ``kind``, ``name``, ``start_ns``, ``end_ns``, ``correlation``,
    ``external_id``, ``seq``.
``steps``
    step windows: ``part``, ``rank``, ``device``, ``step``, ``step_name``, ``start_ns``,
    ``end_ns``, ``source`` (``host`` or ``gpu``), sorted by (part, start).
``collectives``, ``memcpy``
    the readers' side tables with ``part`` (``row`` is the event's row within its part), limited
    to the GPU events kept.
``side``
    every side table of :data:`~dtrace.core.schema.SIDE_SCHEMAS` by name (``collectives`` and
    ``memcpy`` as above; the others whole, with ``part``): :meth:`Batch.side_table`.

:meth:`Batch.derived` keeps views that several analyses derive alike (computed once per batch).

Semantics of the preparation (they match the definitions in the README): a GPU event's launch
is the host runtime call with the same correlation id in the same part (first one wins);
``linked_only`` keeps linked events only; TraceLens mode recomputes float-µs ends for Kineto and
JAX; otherwise same-stream overlap is clipped where it is an artefact (see below; counted per
part); steps come from host annotations matching ``step_pattern``,
else — per part, never both — from GPU annotations; an event belongs to the step whose window
contains its launch (host steps) or its own start.

Same-stream overlap. A stream runs its work in order, so two events of one stream overlap only
when (a) the timestamps are wrong or (b) CUDA's programmatic dependent launch (PDL, Hopper and
later: a kernel launched with ``cudaLaunchAttributeProgrammaticStreamSerialization`` starts
while its predecessor's last blocks still run, e.g. the ``bmm_*`` pairs of B200 MoE layers) lets
a kernel start early. ROCm tracers overrun kernel ends (a known artefact; HIP has no dependent
launch), so in a ROCm part (:func:`rocm_parts`: a ``hip*`` runtime call or a
``__amd_rocclr_*`` copy kernel) every event that runs past the next event's start on its stream
is cut at that start. In any other part only overlap PDL cannot produce is cut: kernels keep
their overlap with later kernels and are cut at the first later memcpy/memset of the stream,
and a memcpy/memset is cut at the next event. So measured per-kernel durations of CUDA traces
are never shortened by a legitimate overlap, while a ROCm overrun is never double-counted.
An MTIA part (:func:`mtia_parts`: a ``runFunction`` launch call) is never clipped: its device
track holds the DMA engines' requests beside the kernels that issued them, and both run at once.
The part's ``clipped_events``/``clipped_ns`` count what was cut; ``rocm`` and ``mtia`` say which
rule ran.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar, cast

import numpy as np
import pandas as pd

from ..core.constants import GPU_KINDS, KINDS
from ..core.dtypes import empty_frame
from ..knowledge.categories import CATEGORIES, categorize_names
from ..options import Options
from ..vector.groups import (
    I64,
    count_by,
    cumcount,
    dense_codes,
    first_match,
    joint_keys,
    lexsort_ints,
    member,
    shared_codes,
    sum_by,
    unique,
    unique_inverse,
)
from ..vector.intervals import clip_stream_overlaps

FLOAT_US_FORMATS = ("kineto", "jax")
PART_COLUMNS = {"part": "int32", "rank": "int32", "device": "int32", "format": "object", "base_ns": "int64"}
STEP_COLUMNS = {
    "part": "int32",
    "rank": "int32",
    "device": "int32",
    "step": "int64",
    "step_name": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "source": "object",
}
_GPU_KIND_CODES = np.array([KINDS.index(k) for k in GPU_KINDS], np.int8)
T = TypeVar("T")


@dataclass
class Batch:
    """Everything the per-partition analyses read about the parts of one partition."""

    parts: pd.DataFrame
    gpu: pd.DataFrame
    host: pd.DataFrame
    steps: pd.DataFrame
    collectives: pd.DataFrame
    memcpy: pd.DataFrame
    options: Options
    meta: dict[str, Any] = field(default_factory=dict)
    side: dict[str, pd.DataFrame] = field(default_factory=dict)
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def derived(self, key: str, fn: Callable[["Batch"], T]) -> T:
        """``fn(self)``, computed once per batch and kept: a view that several analyses derive
        alike (the launch links, the launch queues) is shared instead of recomputed. ``fn`` must
        be a pure function of the batch, and ``key`` name it (``"module.view"``)."""
        if key not in self._derived:
            self._derived[key] = fn(self)
        return cast(T, self._derived[key])  # what fn computed: ``key`` names it

    def side_table(self, name: str) -> pd.DataFrame:
        """The side table ``name`` of every part (its columns, then ``part``), empty with those columns
        if no part has it."""
        from ..core.schema import SIDE_SCHEMAS

        if name in self.side:
            return self.side[name]
        schema = SIDE_SCHEMAS[name]  # an unregistered name is a KeyError
        return empty_frame({**{f.name: _pandas_dtype(f.type) for f in schema}, "part": "int32"})

    @property
    def n_parts(self) -> int:
        return len(self.parts)

    @property
    def rank(self) -> int:
        """The rank of a batch of one part (the first part's otherwise)."""
        return int(self.parts["rank"].iloc[0])

    @property
    def device(self) -> int:
        """The device of a batch of one part (the first part's otherwise)."""
        return int(self.parts["device"].iloc[0])

    def keys(self, part: np.ndarray) -> dict[str, np.ndarray]:
        """``rank`` and ``device`` columns for rows of the given parts."""
        part = np.asarray(part, I64)
        return {
            "rank": self.parts["rank"].to_numpy(np.int32)[part],
            "device": self.parts["device"].to_numpy(np.int32)[part],
        }

    def iterations(self) -> np.ndarray:
        """Per part, the divisor of per-iteration figures: ``iters``, else steps found, else 1."""
        if self.options.iters:
            return np.full(self.n_parts, int(self.options.iters), I64)
        return cast(np.ndarray, np.maximum(self.parts["steps"].to_numpy(I64), 1))


def launch_rows(batch: Batch) -> np.ndarray:
    """Per GPU event, the position in ``batch.host`` of its launch: the first runtime call with its
    correlation id in its part (-1 without one). Computed once per batch (several analyses
    follow the link)."""
    return batch.derived("batch.launch_rows", _launch_rows)


def _launch_rows(batch: Batch) -> np.ndarray:
    g, h = batch.gpu, batch.host
    if not len(g) or not len(h):
        return np.full(len(g), -1, I64)
    hcorr = h["correlation"].to_numpy(I64)
    rt = np.flatnonzero((kind_codes(h["kind"]) == KINDS.index("runtime")) & (hcorr >= 0))
    idx = first_match(
        (h["part"].to_numpy(I64)[rt], hcorr[rt]), (g["part"].to_numpy(I64), g["correlation"].to_numpy(I64))
    )
    return np.where(idx >= 0, rt[np.maximum(idx, 0)] if rt.size else -1, -1).astype(I64)


def float_us_end(start_ns: np.ndarray, end_ns: np.ndarray, base_ns: np.ndarray | int) -> np.ndarray:
    """End times as a float-µs tool computes them: ``ts + dur`` in float64, then to ns.

    dtrace converts ``ts`` and ``dur`` to ns separately, so a duration never changes by rounding.
    TraceLens adds the float µs values; near 1.7e15 µs a float64 resolves only 0.25 µs, and its
    ends round to that grid. TraceLens mode reproduces this. The float ``ts``/``dur`` are
    recovered exactly from the ns values (integer part and fraction converted separately).
    """
    from ..core.schema import us_to_ns

    rel = start_ns - base_ns
    dur = end_ns - start_ns
    ts = (rel // 1000).astype(np.float64) + (rel % 1000).astype(np.float64) / 1000.0
    d = (dur // 1000).astype(np.float64) + (dur % 1000).astype(np.float64) / 1000.0
    return us_to_ns(ts + d) + base_ns


def kind_codes(kind: pd.Series) -> np.ndarray:
    """Index into :data:`dtrace.core.schema.KINDS` of each event's kind (compares categories, not strings)."""
    if isinstance(kind.dtype, pd.CategoricalDtype):
        lut = np.array(
            [KINDS.index(str(c)) if str(c) in KINDS else KINDS.index("other") for c in kind.cat.categories]
            + [KINDS.index("other")],
            np.int8,
        )
        codes: np.ndarray = lut[kind.cat.codes.to_numpy()]  # a missing kind (code -1): the last entry, "other"
        return codes
    uniq, inv = np.unique(kind.astype(str).to_numpy(object), return_inverse=True)
    lut = np.array([KINDS.index(u) if u in KINDS else KINDS.index("other") for u in uniq], np.int8)
    return lut[inv.reshape(-1)] if len(uniq) else np.empty(0, np.int8)


def _names(col: pd.Series) -> pd.Series:
    return col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")


def _pandas_dtype(t: Any) -> Any:
    import pyarrow as pa

    return object if pa.types.is_dictionary(t) or pa.types.is_string(t) else t.to_pandas_dtype()


def prepare(events: pd.DataFrame, side: Mapping[str, pd.DataFrame], parts: pd.DataFrame, options: Options) -> Batch:
    """Build the :class:`Batch` of one partition (pure: copies what it changes).

    Parameters
    ----------
    events
        The event tables of the partition's parts concatenated, with ``part`` (index into
        ``parts``) and ``row`` (the event's row within its part's table).
    side
        The side tables by name, each with ``part`` (and ``row`` where it describes events);
        ``collectives`` and ``memcpy`` are required.
    parts
        One row per part with :data:`PART_COLUMNS`.
    options
        The analysis settings.
    """
    parts = parts.reset_index(drop=True).copy()
    n_parts = len(parts)
    p_dev = parts["device"].to_numpy(I64)
    ev = events
    part = ev["part"].to_numpy(I64)
    kc = kind_codes(ev["kind"]) if len(ev) else np.empty(0, np.int8)
    device = ev["device"].to_numpy(I64)
    is_gpu = np.isin(kc, _GPU_KIND_CODES) & (device == p_dev[part]) if len(ev) else np.zeros(0, bool)
    is_host = device == -1

    host = _host_frame(ev, is_host, parts)
    gi = np.flatnonzero(is_gpu)
    gpart = part[gi]
    gkind = pd.Categorical.from_codes(
        np.searchsorted(_GPU_KIND_CODES, kc[gi]).astype(np.int8), categories=list(GPU_KINDS)
    )
    names = _names(ev["name"]) if len(ev) else pd.Series([], dtype="category")
    start = ev["start_ns"].to_numpy(I64)[gi]
    end = ev["end_ns"].to_numpy(I64)[gi]
    corr = ev["correlation"].to_numpy(I64)[gi]

    hk = kind_codes(host["kind"]) if len(host) else np.empty(0, np.int8)
    launch, launch_end = _launch_times(host, hk, gpart, corr)

    keep = launch >= 0 if options.linked_only else None
    fmt = parts["format"].astype(str).to_numpy(object)
    if options.compat == "tracelens" and len(gi):
        end = _tracelens_ends(parts, fmt, gpart, start, end)

    gpu = pd.DataFrame(
        {
            "part": gpart.astype(np.int32),
            "rank": parts["rank"].to_numpy(np.int32)[gpart],
            "device": p_dev.astype(np.int32)[gpart],
            "row": ev["row"].to_numpy(I64)[gi],
            "stream": ev["stream"].to_numpy(I64)[gi],
            "kind": gkind,
            "name": pd.Categorical.from_codes(names.cat.codes.to_numpy()[gi], dtype=names.dtype),
            "start_ns": start,
            "end_ns": end,
            "correlation": corr,
            "external_id": ev["external_id"].to_numpy(I64)[gi],
            "launch_ns": launch,
            "launch_end_ns": launch_end,
        }
    )
    if keep is not None:
        gpu = gpu.loc[keep].reset_index(drop=True)

    clipped = np.zeros(n_parts, I64)
    clipped_ns = np.zeros(n_parts, I64)
    rocm = rocm_parts(host, hk, gpu, n_parts)
    mtia = mtia_parts(host, hk, n_parts)
    if options.compat != "tracelens" and len(gpu):
        clipped, clipped_ns = _clip_overlaps(gpu, rocm, mtia, n_parts)
    gpu["category"] = _categories(gpu, fmt, options)

    gpu_ann = _gpu_annotations(ev, kc, device, part, p_dev)
    gpu, steps = _with_steps(gpu, host, gpu_ann, parts, options)

    parts["rocm"] = rocm
    parts["mtia"] = mtia
    parts["clipped_events"] = clipped
    parts["clipped_ns"] = clipped_ns
    parts["steps"] = count_by(steps["part"].to_numpy(I64), n_parts)
    kept = (gpu["part"].to_numpy(I64), gpu["row"].to_numpy(I64))
    on_gpu = {k: _side_rows(side[k], kept) for k in ("collectives", "memcpy")}
    return Batch(
        parts=parts,
        gpu=gpu,
        host=host,
        steps=steps,
        collectives=on_gpu["collectives"],
        memcpy=on_gpu["memcpy"],
        options=options,
        side={**side, **on_gpu},
    )


def _with_steps(
    gpu: pd.DataFrame, host: pd.DataFrame, gpu_ann: pd.DataFrame, parts: pd.DataFrame, options: Options
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The GPU events with their step (only the chosen step's, with ``options.step``) and the
    steps found."""
    steps = find_steps(host, gpu_ann, options.step_pattern, parts)
    gpu["step"] = assign_steps(gpu, steps)
    if options.step is not None:
        gpu = gpu.loc[gpu["step"].to_numpy() == options.step].reset_index(drop=True)
        steps = steps.loc[steps["step"].to_numpy() == options.step].reset_index(drop=True)
    gpu["name"] = gpu["name"].cat.remove_unused_categories()
    return gpu, steps


def _launch_times(
    host: pd.DataFrame, hk: np.ndarray, gpart: np.ndarray, corr: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of each GPU event's launch: the host runtime call with the same correlation
    id in the same part (-1 without one); ``hk``: the host events' kind codes."""
    hcorr = host["correlation"].to_numpy(I64)
    is_launch = (hk == KINDS.index("runtime")) & (hcorr >= 0)
    lpart = host["part"].to_numpy(I64)[is_launch]
    lidx = first_match((lpart, hcorr[is_launch]), (gpart, corr))
    lstart = host["start_ns"].to_numpy(I64)[is_launch]
    lend = host["end_ns"].to_numpy(I64)[is_launch]
    launch = np.where(lidx >= 0, lstart[np.maximum(lidx, 0)] if lstart.size else 0, -1).astype(I64)
    launch_end = np.where(lidx >= 0, lend[np.maximum(lidx, 0)] if lend.size else 0, -1).astype(I64)
    return launch, launch_end


def _tracelens_ends(
    parts: pd.DataFrame, fmt: np.ndarray, gpart: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """GPU events' ends as TraceLens computes them from float microseconds (formats that state
    times so); the others' unchanged."""
    float_fmt = np.isin(fmt, FLOAT_US_FORMATS)[gpart]
    if not float_fmt.any():
        return end
    base = parts["base_ns"].to_numpy(I64)[gpart]
    return np.where(float_fmt, float_us_end(start, end, base), end)


def _clip_overlaps(
    gpu: pd.DataFrame, rocm: np.ndarray, mtia: np.ndarray, n_parts: int
) -> tuple[np.ndarray, np.ndarray]:
    """Clip the GPU events that overlap the next one on their stream (in ``gpu``, in place); the
    events clipped and the ns cut, per part."""
    gp = gpu["part"].to_numpy(I64)
    stream_key, _ = dense_codes(gp, gpu["stream"].to_numpy(I64))
    s, e = gpu["start_ns"].to_numpy(I64), gpu["end_ns"].to_numpy(I64)
    # CUDA kernels may overlap each other on a stream (programmatic dependent launch)
    pdl = ~rocm[gp] & (gpu["kind"].cat.codes.to_numpy() == GPU_KINDS.index("kernel"))
    new_end, _, _ = clip_stream_overlaps(s, e, stream_key, keep=pdl)
    new_end = np.where(mtia[gp], e, new_end)  # DMA requests run beside the kernels that issued them
    cut = e - new_end
    gpu["end_ns"] = new_end
    return count_by(gp[cut > 0], n_parts), sum_by(gp, cut, n_parts)


ROCM_RUNTIME_PREFIX = "hip"
ROCM_GPU_PREFIX = "__amd_rocclr_"
MTIA_RUNTIME_PREFIX = "runFunction"


def rocm_parts(host: pd.DataFrame, host_kinds: np.ndarray, gpu: pd.DataFrame, n_parts: int) -> np.ndarray:
    """Which parts come from ROCm: a runtime call named ``hip*`` (``hipLaunchKernel``,
    ``hipExtModuleLaunchKernel``, ``hipMemcpyAsync``, ...) or a GPU event named
    ``__amd_rocclr_*`` (the HIP runtime's copy kernels). Decided once per distinct name."""
    return _parts_named(
        n_parts, (host, host_kinds == KINDS.index("runtime"), ROCM_RUNTIME_PREFIX), (gpu, None, ROCM_GPU_PREFIX)
    )


def mtia_parts(host: pd.DataFrame, host_kinds: np.ndarray, n_parts: int) -> np.ndarray:
    """Which parts come from Meta's MTIA: a launch call named ``runFunction*`` (the MTIA
    runtime's ``runFunction - job_prep_and_submit_for_execution``)."""
    return _parts_named(n_parts, (host, host_kinds == KINDS.index("runtime"), MTIA_RUNTIME_PREFIX))


def _parts_named(n_parts: int, *where: tuple[pd.DataFrame, np.ndarray | None, str]) -> np.ndarray:
    """Parts with an event whose name starts with a prefix: ``(frame, row selection or None,
    prefix)`` per frame, matched once per distinct name."""
    out = np.zeros(n_parts, bool)
    for frame, sel, prefix in where:
        if not len(frame):
            continue
        names = _names(frame["name"])
        hit = np.append(pd.Index(names.cat.categories).astype(str).str.startswith(prefix), False)
        codes = names.cat.codes.to_numpy()
        rows = hit[np.where(codes < 0, len(hit) - 1, codes)]
        if sel is not None:
            rows &= sel
        out[frame["part"].to_numpy(I64)[rows]] = True
    return out


def take(ev: pd.DataFrame, rows: np.ndarray, columns: list[str]) -> dict[str, Any]:
    """``columns`` of ``ev`` at positions ``rows`` as arrays (categoricals keep their categories)."""
    out: dict[str, Any] = {}
    for c in columns:
        col = ev[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            out[c] = pd.Categorical.from_codes(col.cat.codes.to_numpy()[rows], dtype=col.dtype)
        else:
            out[c] = col.to_numpy()[rows]
    return out


def _host_frame(ev: pd.DataFrame, is_host: np.ndarray, parts: pd.DataFrame) -> pd.DataFrame:
    rows = np.flatnonzero(is_host)
    hp = ev["part"].to_numpy(I64)[rows]
    h = {
        "part": hp.astype(np.int32),
        "rank": parts["rank"].to_numpy(np.int32)[hp],
        "device": parts["device"].to_numpy(np.int32)[hp],
        **take(ev, rows, ["row", "pid", "tid", "kind", "name", "start_ns", "end_ns", "correlation", "external_id"]),
    }
    h["seq"] = ev["seq"].to_numpy(I64)[rows] if "seq" in ev.columns else np.full(rows.size, -1, I64)
    # the arrays are this function's own: the frame takes them as they are (copy=True would stack the
    # int64 columns into one block, a transient copy of them all at the run's peak of memory)
    return pd.DataFrame(h, copy=False)


def _gpu_annotations(
    ev: pd.DataFrame, kc: np.ndarray, device: np.ndarray, part: np.ndarray, p_dev: np.ndarray
) -> pd.DataFrame:
    if not len(ev):
        return ev.iloc[:0]
    sel = (kc == KINDS.index("gpu_annotation")) & (device == p_dev[part])
    return ev.loc[sel, ["part", "kind", "name", "start_ns", "end_ns"]]


def _categories(gpu: pd.DataFrame, fmt: np.ndarray, options: Options) -> pd.Categorical:
    """GPU category of each event: distinct (name, kind) pairs classified once per input format,
    their category codes broadcast to the events (no string per event)."""
    n = len(gpu)
    codes = np.full(n, -1, np.int8)
    if n:
        name, kind = gpu["name"].array, gpu["kind"].array
        # a missing name is classified as the text "nan", as a factorized NaN is
        name_labels = np.append(np.asarray(name.categories, dtype=object), np.nan)
        kind_labels = np.asarray(kind.categories, dtype=object)
        ncode = np.asarray(name.codes, I64)
        pair = np.where(ncode < 0, len(name_labels) - 1, ncode) * len(kind_labels) + np.asarray(kind.codes, I64)
        index = {c: i for i, c in enumerate(CATEGORIES)}
        fcode, formats = pd.factorize(fmt)  # per part
        gfmt = fcode[gpu["part"].to_numpy(I64)]
        for i, f in enumerate(formats):  # a loop over the (one or two) formats of the partition
            rows = np.flatnonzero(gfmt == i)
            upair, inv = unique_inverse(pair[rows])
            cats = categorize_names(
                [str(x) for x in name_labels[upair // len(kind_labels)]],
                [str(x) for x in kind_labels[upair % len(kind_labels)]],
                compat=options.compat,
                fmt=str(f),
            )
            codes[rows] = np.array([index.get(c, -1) for c in cats], np.int8)[inv]
    return pd.Categorical.from_codes(codes, categories=list(CATEGORIES))


def find_steps(host: pd.DataFrame, gpu_annotations: pd.DataFrame, pattern: str, parts: pd.DataFrame) -> pd.DataFrame:
    """Step windows of every part: host annotations matching ``pattern``, else GPU-side ones.

    Per part the host annotations win when any of them matches (never both sources). Group 1
    of ``pattern`` is the step number; matches without a number (one NVTX tag repeated) are
    numbered in time order. A step number seen twice in a part keeps its first window.
    """
    rx = re.compile(pattern)
    found = [_step_matches(host, "annotation", rx, "host"), _step_matches(gpu_annotations, "gpu_annotation", rx, "gpu")]
    h, g = found
    if len(h) and len(g):
        g = g.loc[~np.isin(g["part"].to_numpy(), h["part"].to_numpy())]
    out = pd.concat([f for f in (h, g) if len(f)], ignore_index=True) if (len(h) or len(g)) else None
    if out is None:
        return empty_frame(STEP_COLUMNS)
    p = out["part"].to_numpy(I64)
    order = lexsort_ints((out["start_ns"].to_numpy(I64), p))  # stable: time order within each part
    out = out.iloc[order].reset_index(drop=True)
    p = out["part"].to_numpy(I64)
    step = out["step"].to_numpy(I64).copy()
    unnumbered = step < 0
    step[unnumbered] = cumcount(p[unnumbered])
    out["step"] = step
    first = ~pd.DataFrame({"p": p, "s": step}).duplicated().to_numpy()
    out = out.loc[first].reset_index(drop=True)
    p = out["part"].to_numpy(I64)
    out.insert(1, "rank", parts["rank"].to_numpy(np.int32)[p])
    out.insert(2, "device", parts["device"].to_numpy(np.int32)[p])
    out["part"] = p.astype(np.int32)
    return out[list(STEP_COLUMNS)]


def _step_matches(frame: pd.DataFrame, kind: str, rx: re.Pattern[str], source: str) -> pd.DataFrame:
    """The rows of ``frame`` of ``kind`` whose name matches ``rx`` (regex run once per distinct name)."""
    empty = empty_frame(
        {
            "part": "int64",
            "step": "int64",
            "step_name": object,
            "start_ns": "int64",
            "end_ns": "int64",
            "source": object,
        }
    )
    if not len(frame):
        return empty
    rows = np.flatnonzero((frame["kind"] == kind).to_numpy(bool))  # the columns read, not the frame, taken
    if not rows.size:
        return empty
    names = _names(frame["name"].iloc[rows])
    cats = np.asarray(names.cat.categories, dtype=object)
    codes = names.cat.codes.to_numpy()
    num = np.full(len(cats) + 1, -2, I64)  # -2: no match; -1: a match without a number
    for i in unique(codes[codes >= 0]).tolist():  # each distinct annotation name once
        m = rx.search(str(cats[i]))
        if m:
            num[i] = int(m.group(1)) if m.groups() and m.group(1) is not None else -1
    nums = num[np.where(codes < 0, len(cats), codes)]
    sel = nums > -2
    if not sel.any():
        return empty
    return pd.DataFrame(
        {
            "part": frame["part"].to_numpy(I64)[rows[sel]],
            "step": nums[sel],
            "step_name": cats[codes[sel]].astype(str).astype(object),
            "start_ns": frame["start_ns"].to_numpy(I64)[rows[sel]],
            "end_ns": frame["end_ns"].to_numpy(I64)[rows[sel]],
            "source": source,
        }
    )


def assign_steps(gpu: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step of each GPU event: its part's window containing its launch (host steps) or its own
    start (GPU steps); -1 if none."""
    n = len(gpu)
    if not n or not len(steps):
        return np.full(n, -1, I64)
    gp = gpu["part"].to_numpy(I64)
    sp = steps["part"].to_numpy(I64)
    host_parts = np.zeros(int(max(gp.max(), sp.max())) + 1, bool)
    host_parts[sp[(steps["source"] == "host").to_numpy()]] = True
    t = gpu["start_ns"].to_numpy(I64)
    launch = gpu["launch_ns"].to_numpy(I64)
    t = np.where(host_parts[gp] & (launch >= 0), launch, t)
    s = steps["start_ns"].to_numpy(I64)
    e = steps["end_ns"].to_numpy(I64)
    # windows are sorted by (part, start): find, per event, the last window of its part starting
    # at or before it — a search on (part, time) pairs ranked together
    joint = joint_keys((sp, s), (gp, t))
    wkey, tkey = joint if joint is not None else shared_codes((sp, s), (gp, t))
    j = np.searchsorted(wkey, tkey, side="right") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (sp[jj] == gp) & (t < e[jj])
    return np.where(ok, steps["step"].to_numpy(I64)[jj], -1).astype(I64)


def _side_rows(side: pd.DataFrame, kept: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """The side-table rows of the kept GPU events."""
    if not len(side):
        return side
    keys = (side["part"].to_numpy(I64), side["row"].to_numpy(I64))
    joint = joint_keys(keys, kept) if len(kept[0]) else None
    a, b = joint if joint is not None else shared_codes(keys, kept)
    return side.loc[member(a, b)].reset_index(drop=True)


def prepare_part(
    events: pd.DataFrame,
    collectives: pd.DataFrame,
    memcpy: pd.DataFrame,
    *,
    rank: int,
    device: int,
    fmt: str,
    options: Options,
    base_ns: int = 0,
    side: Mapping[str, pd.DataFrame] | None = None,
    session_ns: tuple[int, int] = (-1, -1),
) -> Batch:
    """The :class:`Batch` of a single (rank, device) part given as pandas frames (tests, quick views).

    ``events`` follows the event schema (its ``rank`` column is ignored); the side tables
    (``collectives``, ``memcpy`` and the further ones in ``side``) are keyed by the event's row
    in ``events``; ``session_ns`` is the profiling session a reader recorded (rocprofv3),
    ``(-1, -1)`` if none.
    """
    ev = events.reset_index(drop=True).copy()
    ev["part"] = np.zeros(len(ev), np.int32)
    ev["row"] = np.arange(len(ev), dtype=I64)
    tables = {**(side or {}), "collectives": collectives, "memcpy": memcpy}
    side_frames = {k: t.assign(part=np.zeros(len(t), np.int32)) for k, t in tables.items()}
    parts = pd.DataFrame(
        {
            "part": np.zeros(1, np.int32),
            "rank": np.array([rank], np.int32),
            "device": np.array([device], np.int32),
            "format": np.array([fmt], dtype=object),
            "base_ns": np.array([base_ns], I64),
            "session_start_ns": np.array([session_ns[0]], I64),
            "session_end_ns": np.array([session_ns[1]], I64),
        }
    )
    return prepare(ev, side_frames, parts, options)

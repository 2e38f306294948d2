"""One step of the chosen ranks on one clock: a Chrome / Perfetto trace (``dtrace timeline``).

:func:`timeline` picks a time window (default: the slowest step) and a few ranks (default: the
flagged stragglers, the fastest and the median rank), reads only those ranks' cached events
(:func:`read_parts`, only inside the window when one is given), removes each host's clock
offset (the ``clock_offsets`` table) and returns a Chrome trace-event document that Perfetto UI
and ``chrome://tracing`` open:

- one process per (rank, device), named ``rank 37 · host 4 · straggler`` and sorted stragglers
  first; its GPU streams as threads (``stream 7``, ``stream 52 · comm``) and, with
  ``host=True``, its host threads;
- every GPU activity as a complete event (``ph: X``) with its kernel arguments; communication
  kernels also carry the matched collective (instance, group, op, wait, transfer, whether this
  rank arrived last) from ``collectives``;
- each collective instance with two or more exported members joined by a flow (``s`` → ``t``
  → ``f``, in arrival order, so the arrow ends at the last rank to arrive);
- the wait at each collective as a counter track per rank (``collective wait (µs)``);
- the straggler evidence as a process label and an instant event with the full text;
- with ``critical_path=True`` (the default), each part's ``critical path`` track first: the
  path ``step_bounds`` splits, of the step shown (or the steps a window overlaps, cut to it),
  one slice per interval named and coloured by what the path waited on, with flow arrows to the
  GPU events where it hops between host and GPU (:mod:`dtrace.explore.pathtrack`).

Time stamps are µs since the job's first GPU event (clock-corrected) with three decimals, so
dtrace's own Kineto reader reads the same nanoseconds back (``baseTimeNanoseconds`` is that
origin); ``otherData`` records the step, window, ranks, roles and offsets. The size depends on
the chosen ranks and the window only, never on the job's size.
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .._version import __version__
from ..analyses.batch import Batch, prepare_part
from ..core.fileio import open_regular
from ..errors import ResultsError, UsageError
from ..options import Options
from ..results import Results, cache_of, load
from .pathtrack import path_track

KEYS = ["rank", "device"]
ROLES = ("straggler", "peer", "slowest", "fastest", "median")
HOST_KIND_CAT = {
    "cpu_op": "cpu_op",
    "runtime": "cuda_runtime",
    "annotation": "user_annotation",
    "python": "python_function",
    "other": "other",
}
GPU_KIND_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
MAX_WINDOW_NS = 10**17
"""The farthest a ``--window`` bound may lie from the job's first GPU event (3.2 years)."""
WINDOW_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


# -- reading the cache -----------------------------------------------------------------------


@dataclass(frozen=True)
class CachedPart:
    """The cached events of one (rank, device) and its side tables (``row`` = position in events)."""

    rank: int
    device: int
    fmt: str
    base_ns: int
    events: pd.DataFrame
    collectives: pd.DataFrame
    memcpy: pd.DataFrame


def read_parts(
    results: Results,
    parts: Iterable[tuple[int, int]],
    windows: Mapping[tuple[int, int], tuple[int, int]] | None = None,
    *,
    cache: str | None = None,
) -> dict[tuple[int, int], CachedPart]:
    """Read the cached events of these (rank, device) parts, each only inside its window if given.

    ``windows`` maps a part to ``(lo, hi)`` ns on that part's own clock: only events that
    overlap it are kept (side-table rows are renumbered to match). The events come from
    ``cache`` (default ``OUT/cache``; never from where the manifest says). Nothing of any other
    part is read (:func:`dtrace.explore.events.part_specs` opens only their inputs' cache entries).
    Raises :class:`UsageError` when a part is not in the results or its cached events are gone.
    """
    from ..ingest.cache import read_part_tables
    from .events import part_specs

    if cache is None:
        if results.path is None:
            raise UsageError("results held in memory: give the cache folder of their events (cache=DIR)")
        cache = cache_of(results.path)
    wanted = {(int(k[0]), int(k[1])) for k in parts}
    specs = {(s.rank, s.device): s for s in part_specs(results.record, cache, wanted)}
    out = {}
    for key in sorted(wanted):
        if key not in specs:
            raise UsageError(f"{results.path}: no analysed input for rank {key[0]} device {key[1]}")
        spec = specs[key]
        tables = read_part_tables(spec, only=("collectives", "memcpy"))
        ev, coll, mem = (t.to_pandas() for t in (tables.events, tables.side["collectives"], tables.side["memcpy"]))
        if windows is not None and key in windows:
            lo, hi = windows[key]
            keep = np.flatnonzero((ev["end_ns"].to_numpy() >= lo) & (ev["start_ns"].to_numpy() <= hi))
            ev = ev.iloc[keep].reset_index(drop=True)
            coll, mem = (_renumber(t, keep) for t in (coll, mem))
        out[key] = CachedPart(key[0], key[1], spec.format, spec.base_ns, ev, coll, mem)
    return out


def _renumber(side: pd.DataFrame, kept: np.ndarray) -> pd.DataFrame:
    """The side-table rows of the events ``kept`` (positions), numbered by their new positions."""
    if not len(side) or not len(kept):  # nothing kept: a window outside this part's events
        return side.iloc[:0]
    pos = np.searchsorted(kept, side["row"].to_numpy())
    ok = (pos < len(kept)) & (kept[np.minimum(pos, len(kept) - 1)] == side["row"].to_numpy())
    return side.loc[ok].assign(row=pos[ok]).reset_index(drop=True)


# -- what to show ----------------------------------------------------------------------------


@dataclass
class Selection:
    """The chosen window and tracks: ``parts`` has rank, device, role, host, offset_ns, pid."""

    parts: pd.DataFrame
    step: int | None
    window: tuple[int, int] | None  # clock-corrected ns, when chosen by time
    origin: int  # clock-corrected ns of the job's first GPU event


def parse_window(text: str) -> tuple[int, int]:
    """``START:END`` with units (default ms) → ns since the job's first GPU event.

    Examples
    --------
    >>> parse_window("12.5:14")
    (12500000, 14000000)
    >>> parse_window("900us:1.2ms")
    (900000, 1200000)
    """
    parts = str(text).split(":")
    if len(parts) != 2:
        raise UsageError(
            f"--window {text!r}: expected START:END (ms since the job's first GPU event, or with "
            f"a unit: {', '.join(WINDOW_UNITS)})"
        )
    vals = []
    for p in parts:
        m = re.fullmatch(r"\s*([-+]?\d+(?:\.\d*)?|[-+]?\.\d+)\s*(ns|us|µs|ms|s)?\s*", p)
        if not m:
            raise UsageError(f"--window {text!r}: {p!r} is not a time (e.g. 12.5, 12500us, 0.0125s)")
        ns = float(m.group(1)) * WINDOW_UNITS[m.group(2) or "ms"]
        if not abs(ns) <= MAX_WINDOW_NS:  # 1e400 digits: inf; beyond int64 once an offset is added
            raise UsageError(f"--window {text!r}: {p.strip()!r} is beyond {MAX_WINDOW_NS / 1e9 / 86400:,.0f} days")
        vals.append(int(round(ns)))
    if vals[1] <= vals[0]:
        raise UsageError(f"--window {text!r}: END must be after START")
    return vals[0], vals[1]


def _offsets(res: Results, parts: pd.DataFrame) -> pd.DataFrame:
    gph = int(res.record.options.get("gpus_per_host", 8) or 0)
    out = parts[KEYS].copy()
    out["host"] = out["rank"].to_numpy(np.int64) // gph if gph > 0 else out["rank"].to_numpy(np.int64)
    out["offset_ns"] = np.zeros(len(out), np.int64)
    if "clock_offsets" in res.table_names:
        co = res.clock_offsets
        if len(co):
            c = co.set_index(KEYS)
            idx = pd.MultiIndex.from_frame(out[KEYS])
            out["host"] = c["host"].reindex(idx).fillna(pd.Series(out["host"].to_numpy(), index=idx)).to_numpy(np.int64)
            out["offset_ns"] = c["offset_ns"].reindex(idx).fillna(0).to_numpy(np.int64)
    return out


def choose(
    results: Results,
    *,
    ranks: Sequence[int] | None = None,
    step: int | None = None,
    window: tuple[int, int] | str | None = None,
) -> Selection:
    """Pick the window and the ranks (see :func:`timeline`)."""
    if step is not None and window is not None:
        raise UsageError("give either a step or a window, not both")
    if "breakdown" not in results.table_names or not len(results.breakdown):
        raise UsageError(f"{results.path}: no breakdown table: nothing analysed to export")
    bd = results.breakdown
    allp = _offsets(results, bd[KEYS].drop_duplicates().reset_index(drop=True))
    first = bd.set_index(KEYS)["first_ns"].reindex(pd.MultiIndex.from_frame(allp[KEYS])).to_numpy(np.int64)
    origin = int((first - allp["offset_ns"].to_numpy(np.int64)).min())
    steps = results.steps if "steps" in results.table_names else None
    win: tuple[int, int] | None
    if window is not None:
        win, step, per = _given_window(bd, allp, origin, window), None, bd
    elif (steps is None or not len(steps)) and step is None:  # no steps: the whole trace
        win, step, per = (origin, _last_end(bd, allp)), None, bd
    else:
        win, (step, per) = None, _chosen_step(results, steps, step)
    roles = _roles(results, per, ranks is None)
    keys = list(dict.fromkeys(_parts_of(results, allp, ranks) if ranks is not None else list(roles)))
    return Selection(parts=_ordered(allp, keys, roles), step=step, window=win, origin=origin)


def _last_end(bd: pd.DataFrame, allp: pd.DataFrame) -> int:
    """The last GPU event's end over all parts, on the common clock."""
    last = bd.set_index(KEYS)["last_ns"].reindex(pd.MultiIndex.from_frame(allp[KEYS])).to_numpy(np.int64)
    return int((last - allp["offset_ns"].to_numpy(np.int64)).max())


def _given_window(bd: pd.DataFrame, allp: pd.DataFrame, origin: int, window: tuple[int, int] | str) -> tuple[int, int]:
    """The window asked for (ns after the first GPU event) on the common clock; one that holds
    no GPU event is an error."""
    lo, hi = parse_window(window) if isinstance(window, str) else (int(window[0]), int(window[1]))
    span = _last_end(bd, allp) - origin
    if hi < 0 or lo > span:
        raise UsageError(
            f"the window {lo / 1e6:g}:{hi / 1e6:g} ms holds no GPU event: the job's GPU events span "
            f"0:{span / 1e6:g} ms since its first one"
        )
    return (origin + lo, origin + hi)


def _chosen_step(results: Results, steps: pd.DataFrame | None, step: int | None) -> tuple[int, pd.DataFrame]:
    """The step asked for, else the one with the longest median time over the ranks, and its rows."""
    if steps is None or not len(steps):
        raise UsageError(f"{results.path}: the traces have no steps; give a window (--window START:END)")
    have = sorted(int(s) for s in steps["step"].unique())
    if step is None:
        med = steps.groupby("step")["step_ns"].median()
        step = int(med.idxmax())
    elif int(step) not in have:
        raise UsageError(f"no step {step}; steps: {_span(have)}")
    step = int(step)
    return step, steps.loc[steps["step"].to_numpy() == step]


def _roles(results: Results, per: pd.DataFrame, with_peers: bool) -> dict[tuple[int, int], str]:
    """The parts worth showing and why: the flagged stragglers, the slowest (when none is
    flagged), fastest and median computation in the window, and (``with_peers``) a peer of each
    straggler."""
    comp = per.groupby(KEYS)["computation_ns"].sum() if "computation_ns" in per.columns else pd.Series(dtype=np.int64)
    flagged: list[tuple[int, int]] = []
    if "stragglers" in results.table_names and len(results.stragglers):
        sg = results.stragglers
        flagged = [(int(r), int(d)) for r, d in sg.loc[sg["flagged"].astype(bool), KEYS].itertuples(index=False)]
    roles: dict[tuple[int, int], str] = {k: "straggler" for k in flagged}
    others = comp.drop(index=[k for k in flagged if k in comp.index]).sort_values(kind="stable")
    if len(others):
        if not flagged:
            roles.setdefault(_key(others.index[-1]), "slowest")
        roles.setdefault(_key(others.index[0]), "fastest")
        roles.setdefault(_key(others.index[(len(others) - 1) // 2]), "median")
    if with_peers:
        for key in flagged:  # a flow arrow reaches a straggler only from a rank of its groups
            peer = _peer(results, key, comp, roles)
            if peer is not None:
                roles.setdefault(peer, "peer")
    return roles


def _parts_of(results: Results, allp: pd.DataFrame, ranks: Sequence[int]) -> list[tuple[int, int]]:
    """Every (rank, device) of the ranks asked for; a rank not in the results is an error."""
    keys: list[tuple[int, int]] = []
    known = allp.set_index("rank")
    for r in ranks:
        if int(r) not in known.index:
            raise UsageError(f"no rank {r} in {results.path}; ranks: {_span(sorted(allp['rank'].unique()))}")
        keys += [(int(r), int(d)) for d in np.atleast_1d(known.loc[int(r), "device"])]
    return keys


def _ordered(allp: pd.DataFrame, keys: list[tuple[int, int]], roles: Mapping[tuple[int, int], str]) -> pd.DataFrame:
    """The chosen parts with their roles, by role then rank and device, and their process ids
    (the rank, or rank * 1000 + device when a rank has several parts)."""
    chosen = allp.set_index(KEYS).loc[keys].reset_index()
    chosen["role"] = [roles.get(k, "") for k in keys]
    order = {r: i for i, r in enumerate(ROLES + ("",))}
    chosen = chosen.iloc[np.lexsort((chosen["device"], chosen["rank"], chosen["role"].map(order)))]
    chosen = chosen.reset_index(drop=True)
    unique_ranks = not chosen["rank"].duplicated().any()
    chosen["pid"] = chosen["rank"] if unique_ranks else chosen["rank"] * 1000 + chosen["device"]
    return chosen


def _peer(
    results: Results, straggler: tuple[int, int], comp: pd.Series, roles: Mapping[tuple[int, int], str]
) -> tuple[int, int] | None:
    """A part sharing a process group with ``straggler`` when none of the parts chosen so far
    does: of the group members, the one with the median computation in the window (None when a
    chosen part already shares a group, or the straggler has no collectives)."""
    members = _group_members(results, straggler[0])
    if not members or any(k[0] in members for k in roles if k != straggler):
        return None
    cand = [k for k in map(_key, comp.index) if k[0] in members and k not in roles]
    if not cand:
        return None
    vals = comp.reindex(pd.MultiIndex.from_tuples(cand)).to_numpy(np.float64)
    order = np.argsort(vals, kind="stable")
    return cand[int(order[(len(order) - 1) // 2])]


def _group_members(results: Results, rank: int) -> set[int]:
    """The other ranks of the process groups ``rank``'s collectives ran in (``collectives`` table)."""
    if "collectives" not in results.table_names:
        return set()
    path = os.path.join(results.path, "collectives.parquet") if results.path else None
    run_id = results.record.run_id
    if path and os.path.exists(path):
        mine = _read_rows(path, [rank], run_id, columns=["group", "rank"])
        groups = sorted(set(mine["group"].dropna().astype(str)))
        rows = _read_rows(path, groups, run_id, column="group", columns=["group", "rank"]) if groups else mine
    else:
        c = results.collectives
        groups = sorted(set(c.loc[c["rank"] == rank, "group"].dropna().astype(str)))
        rows = c.loc[c["group"].astype(str).isin(groups)]
    return {int(r) for r in rows["rank"].unique()} - {int(rank)}


def _key(label: Any) -> tuple[int, int]:
    """A (rank, device) index label as Python ints."""
    rank, device = label
    return int(rank), int(device)


def _span(values: Sequence[int]) -> str:
    v = list(values)
    return ", ".join(map(str, v)) if len(v) <= 8 else f"{v[0]}..{v[-1]} ({len(v)})"


# -- building the trace ----------------------------------------------------------------------


def _options(results: Results) -> Options:
    o = results.record.options
    keep = {k: o[k] for k in ("compat", "linked_only", "step_pattern", "queue_limit") if k in o}
    return Options.from_kwargs(**keep)


def _ts(ns: np.ndarray) -> list[float]:
    """ns → µs floats whose shortest repr has three decimals (exact for dtrace's reader)."""
    return (np.asarray(ns, np.int64) / 1000.0).tolist()


def _collective_rows(results: Results, parts: pd.DataFrame) -> pd.DataFrame:
    """The matched ``collectives`` rows of the chosen parts (read with a rank filter)."""
    if "collectives" not in results.table_names:
        return pd.DataFrame()
    ranks = sorted(int(r) for r in parts["rank"].unique())
    path = os.path.join(results.path, "collectives.parquet") if results.path else None
    if path and os.path.exists(path):
        rows = _read_rows(path, ranks, results.record.run_id)
    else:
        rows = results.collectives
        rows = rows.loc[rows["rank"].isin(ranks)]
    if not len(rows) or "collective" not in rows.columns:
        return pd.DataFrame()
    key = pd.MultiIndex.from_frame(rows[KEYS])
    return rows.loc[key.isin(pd.MultiIndex.from_frame(parts[KEYS]))].reset_index(drop=True)


def _read_rows(
    path: str, values: list[Any], run_id: object, *, column: str = "rank", columns: list[str] | None = None
) -> pd.DataFrame:
    """The rows of a results table whose ``column`` is one of ``values`` (only ``columns`` if
    given), from a regular file of this run; one-line errors."""
    try:
        with open_regular(path) as f:  # a FIFO planted in OUT is refused, never waited on
            t = pq.read_table(f, columns=columns, filters=[(column, "in", values)])
    except (OSError, pa.ArrowException) as exc:
        raise ResultsError(
            f"{path}: cannot read results table: {exc.strerror if isinstance(exc, OSError) else exc}"
        ) from None
    got = (t.schema.metadata or {}).get(b"dtrace.run_id", b"").decode(errors="replace")
    if isinstance(run_id, str) and run_id and got != run_id:
        raise ResultsError(
            f"{path}: table is from another run ({got}) than the manifest ({run_id}); re-run dtrace analyze"
        )
    return t.to_pandas()


def build(
    results: Results, sel: Selection, *, host: bool = False, cache: str | None = None, critical_path: bool = True
) -> dict[str, Any]:
    """The Chrome trace-event document of a :class:`Selection` (see the module docstring)."""
    parts = sel.parts
    off = dict(zip(map(tuple, parts[KEYS].to_numpy().tolist()), parts["offset_ns"].tolist()))
    keys = [tuple(k) for k in parts[KEYS].to_numpy().tolist()]
    windows = None
    if sel.window is not None:
        windows = {k: (sel.window[0] + off[k], sel.window[1] + off[k]) for k in keys}
    cached = read_parts(results, keys, _step_spans(results, windows) if critical_path else windows, cache=cache)
    opts = _options(results)
    coll = _collective_rows(results, parts)
    if len(coll):
        coll = coll.assign(raw_start=coll["start_ns"].to_numpy(np.int64) + coll["clock_offset_ns"].to_numpy(np.int64))
    evidence = _evidence(results)
    several = bool(parts["rank"].duplicated(keep=False).any())
    events: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    flows: list[pd.DataFrame] = []
    tracks = []
    span_all: tuple[int, int] | None = None  # the GPU events' span over all parts
    for sort_index, row in enumerate(parts.itertuples(index=False)):
        key = (int(row.rank), int(row.device))
        p_ev, p_meta, g_flow, span, track = _export_part(
            row, key, _prepared(cached[key], key, opts), sel, coll, (host, critical_path), evidence, several, sort_index
        )
        events += p_ev
        meta += p_meta
        if len(g_flow):
            flows.append(g_flow)
        if span is not None:
            span_all = span if span_all is None else (min(span_all[0], span[0]), max(span_all[1], span[1]))
        tracks.append(track)
    events += _flow_events(pd.concat(flows, ignore_index=True) if flows else pd.DataFrame())
    window = (
        sel.window
        if sel.window is not None
        else ((sel.origin + span_all[0], sel.origin + span_all[1]) if span_all is not None else None)
    )
    return {  # otherData first: its generator tells dtrace this file is its own output, not a trace
        "otherData": {
            "generator": f"dtrace {__version__} timeline",
            "results": str(results.path or ""),
            "step": sel.step,
            "window_ns": list(window) if window else None,
            "time_axis": "µs since the job's first GPU event, host clock offsets removed (clock_offsets)",
            "tracks": tracks,
        },
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": int(sel.origin),
    }


def _step_spans(
    results: Results, windows: Mapping[tuple[int, int], tuple[int, int]] | None
) -> dict[tuple[int, int], tuple[int, int]] | None:
    """Each part's window (own clock) widened to the whole of every step it overlaps (the spans of
    ``step_bounds``), so that the critical path of those steps is walked on all their events;
    unchanged without a ``step_bounds`` table (the path then sees the window's events only)."""
    if windows is None or "step_bounds" not in results.table_names:
        return None if windows is None else dict(windows)
    cols = ["rank", "device", "step", "start_ns", "span_ns"]
    ranks = sorted({k[0] for k in windows})
    path = os.path.join(results.path, "step_bounds.parquet") if results.path else None
    if path and os.path.exists(path):
        sb = _read_rows(path, ranks, results.record.run_id, columns=cols)
    else:
        sb = results.step_bounds[cols]
        sb = sb.loc[sb["rank"].isin(ranks)]
    sb = sb.loc[sb["step"].notna()]
    out = dict(windows)
    for (rank, device), g in sb.groupby(KEYS):
        key = (int(rank), int(device))
        if key not in out:
            continue
        lo, hi = out[key]
        a = g["start_ns"].to_numpy(np.int64)
        b = a + g["span_ns"].to_numpy(np.int64)
        hit = (b >= lo) & (a <= hi)
        if hit.any():
            out[key] = (min(lo, int(a[hit].min())), max(hi, int(b[hit].max())))
    return out


def _prepared(cp: Any, key: tuple[int, int], opts: Options) -> Batch:
    """The shared views of one cached part."""
    return prepare_part(
        cp.events,
        cp.collectives,
        cp.memcpy,
        rank=key[0],
        device=key[1],
        fmt=cp.fmt,
        options=opts,
        base_ns=cp.base_ns,
    )


def _export_part(
    row: Any,
    key: tuple[int, int],
    part: Batch,
    sel: Selection,
    coll: pd.DataFrame,
    tracks: tuple[bool, bool],
    evidence: Mapping[tuple[int, int], tuple[str, float]],
    several: bool,
    sort_index: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], pd.DataFrame, tuple[int, int] | None, dict[str, Any]]:
    """One part's events, metadata, collective flows, GPU span and track entry; ``tracks``:
    whether to export its host threads and its critical path."""
    host, critical_path = tracks
    gpu, hst = _select(part, sel, int(row.offset_ns), host)
    pid = int(row.pid)
    shift = int(row.offset_ns) + sel.origin  # own clock → exported axis
    role = str(row.role)
    said = evidence.get(key) if role == "straggler" else None
    meta = _process_meta(pid, _process_label(key, int(row.host), role, several), sort_index, said)
    events, g_meta, flow, span = _gpu_events(gpu, coll, key, pid, shift)
    meta += g_meta
    if host and len(hst):
        h_ev, h_meta = _host_events(hst, pid, shift, set(gpu["stream"].unique().tolist()))
        events += h_ev
        meta += h_meta
    if span is not None and said is not None:
        events.append(_evidence_marker(pid, span[0], *said))
    track = _track(pid, key, row, role, len(gpu), int(len(hst)) if host else 0)
    if critical_path:
        offset = int(row.offset_ns)
        own = (sel.window[0] + offset, sel.window[1] + offset) if sel.window is not None else None
        p_ev, p_meta, n = path_track(
            part, step=sel.step, window=own, exported=_gpu_rows(part, sel, offset), pid=pid, shift=shift
        )
        events += p_ev
        meta += p_meta
        track["critical_path_slices"] = n
    return events, meta, flow, span, track


def _evidence(results: Results) -> dict[tuple[int, int], tuple[str, float]]:
    """(rank, device) -> the straggler evidence in words and the score."""
    if "stragglers" not in results.table_names or not len(results.stragglers):
        return {}
    sg = results.stragglers
    return {
        (int(r), int(d)): (str(e), float(s)) for r, d, e, s in sg[KEYS + ["evidence", "score"]].itertuples(index=False)
    }


def _process_label(key: tuple[int, int], host: int, role: str, several: bool) -> str:
    """``rank 3 · dev 1 · host 0 · straggler`` (the device only when a rank has several parts)."""
    return (
        f"rank {key[0]}" + (f" · dev {key[1]}" if several else "") + f" · host {host}" + (f" · {role}" if role else "")
    )


def _process_meta(pid: int, label: str, sort_index: int, said: tuple[str, float] | None) -> list[dict[str, Any]]:
    """The process's name and place, and a straggler's evidence as its label."""
    meta: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": label}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0, "args": {"sort_index": sort_index}},
    ]
    if said is not None:
        text, score = said
        meta.append(
            {
                "ph": "M",
                "name": "process_labels",
                "pid": pid,
                "tid": 0,
                "ts": 0,
                "args": {"labels": f"straggler (score {score:.2f}): {first_clause(text)}"},
            }
        )
    return meta


def first_clause(text: str, limit: int = 120) -> str:
    """The evidence's first clause, for a track label (the whole of it is the marker's): up to the
    first ``;`` or ``:`` outside parentheses, cut at a word within ``limit`` characters, never mid-word.

    Examples
    --------
    >>> first_clause("rank 5 held the others back 5.81 ms per step (42 % of it; 17 ms in all): it waited 0 ns")
    'rank 5 held the others back 5.81 ms per step (42 % of it; 17 ms in all)'
    >>> first_clause("a b c d e f", limit=8)
    'a b c d…'
    """
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in ";:":
            text = text[:i]
            break
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit - 1].rstrip(" ,(") + "…"


def _evidence_marker(pid: int, first_ns: int, text: str, score: float) -> dict[str, Any]:
    """An instant event at the part's first GPU event holding the straggler evidence."""
    return {
        "ph": "i",
        "s": "p",
        "name": "straggler evidence",
        "cat": "dtrace",
        "pid": pid,
        "tid": 0,
        "ts": first_ns / 1000.0,
        "args": {"score": round(score, 3), "evidence": text},
    }


def _track(pid: int, key: tuple[int, int], row: Any, role: str, gpu_events: int, host_events: int) -> dict[str, Any]:
    """One exported part, as listed in ``otherData.tracks``."""
    return {
        "pid": pid,
        "rank": key[0],
        "device": key[1],
        "host": int(row.host),
        "role": role,
        "clock_offset_ns": int(row.offset_ns),
        "gpu_events": int(gpu_events),
        "host_events": host_events,
    }


def _gpu_rows(part: Batch, sel: Selection, offset: int) -> np.ndarray:
    """Which of the part's GPU events the step or window holds (own clock)."""
    g = part.gpu
    if sel.step is not None:
        return np.asarray(g["step"].to_numpy() == sel.step, bool)
    if sel.window is not None:
        lo, hi = sel.window[0] + offset, sel.window[1] + offset
        return np.asarray((g["end_ns"].to_numpy() >= lo) & (g["start_ns"].to_numpy() <= hi), bool)
    return np.ones(len(g), bool)


def _select(part: Batch, sel: Selection, offset: int, host: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The part's GPU (and host) events of the step or window (own clock)."""
    g = part.gpu.loc[_gpu_rows(part, sel, offset)]
    h = part.host
    if sel.step is not None:
        if host and len(h):
            w = part.steps.loc[part.steps["step"].to_numpy() == sel.step]
            if len(w):
                lo, hi = int(w["start_ns"].min()), int(w["end_ns"].max())
                h = h.loc[(h["end_ns"].to_numpy() >= lo) & (h["start_ns"].to_numpy() <= hi)]
            else:
                h = h.iloc[:0]
    elif sel.window is not None:
        lo, hi = sel.window[0] + offset, sel.window[1] + offset
        h = h.loc[(h["end_ns"].to_numpy() >= lo) & (h["start_ns"].to_numpy() <= hi)] if len(h) else h
    return g.reset_index(drop=True), (h.reset_index(drop=True) if host else h.iloc[:0])


def _gpu_events(
    gpu: pd.DataFrame, coll: pd.DataFrame, key: tuple[int, int], pid: int, shift: int
) -> tuple[list[dict], list[dict], pd.DataFrame, tuple[int, int] | None]:
    if not len(gpu):
        return [], [], pd.DataFrame(), None
    start = gpu["start_ns"].to_numpy(np.int64)
    end = gpu["end_ns"].to_numpy(np.int64)
    stream = gpu["stream"].to_numpy(np.int64)
    cat = gpu["category"].astype(str).to_numpy(object)
    kinds = gpu["kind"].astype(str).to_numpy(object)
    names = gpu["name"].astype(str).to_numpy(object)
    corr = gpu["correlation"].to_numpy(np.int64)
    rel = start - shift
    ts, dur = _ts(rel), _ts(end - start)
    # the matched collective of each comm kernel
    match = np.full(len(gpu), -1, np.int64)
    mine = coll.loc[(coll["rank"].to_numpy() == key[0]) & (coll["device"].to_numpy() == key[1])] if len(coll) else coll
    if len(mine):
        idx = pd.MultiIndex.from_arrays([mine["stream"].to_numpy(np.int64), mine["raw_start"].to_numpy(np.int64)])
        match = idx.get_indexer(pd.MultiIndex.from_arrays([stream, start]))
    extra: list[dict[str, Any]] = [{} for _ in range(len(gpu))]
    hit = match >= 0
    if hit.any():
        c = mine.iloc[match[hit]]
        cols = {
            "collective instance": c["collective"].to_numpy(np.int64).tolist(),
            "group": c["group"].astype(str).tolist(),
            "Collective name": c["op"].astype(str).tolist(),
            "wait (µs)": (c["wait_ns"].to_numpy(np.int64) / 1000.0).tolist(),
            "transfer (µs)": (c["transfer_ns"].to_numpy(np.int64) / 1000.0).tolist(),
            "arrived last": c["last"].astype(bool).tolist(),
            "ranks in instance": c["ranks"].astype(int).tolist(),
            "start skew (µs)": (c["start_skew_ns"].to_numpy(np.int64) / 1000.0).tolist(),
        }
        for pos, vals in zip(np.flatnonzero(hit).tolist(), zip(*cols.values())):
            extra[pos] = dict(zip(cols, vals))
    gcat = [GPU_KIND_CAT.get(k, "kernel") for k in kinds]
    events = [
        {
            "ph": "X",
            "cat": gc,
            "name": nm,
            "pid": pid,
            "tid": s,
            "ts": t,
            "dur": d,
            "args": {"device": pid, "stream": s, "correlation": cr, "rank": key[0], "dtrace category": ct, **x},
        }
        for gc, nm, s, t, d, cr, ct, x in zip(
            gcat, names.tolist(), stream.tolist(), ts, dur, corr.tolist(), cat.tolist(), extra
        )
    ]
    meta = _stream_meta(pid, stream, set(stream[cat == "comm"].tolist()))
    flow = pd.DataFrame()
    if hit.any():
        s_rel = rel[hit]
        events += _wait_counter(pid, s_rel, (end - shift)[hit], c["wait_ns"].to_numpy(np.int64) / 1000.0)
        flow = pd.DataFrame(
            {
                "collective": c["collective"].to_numpy(np.int64),
                "pid": pid,
                "tid": stream[hit],
                "ts_ns": s_rel,
                "op": c["op"].astype(str).to_numpy(object),
                "group": c["group"].astype(str).to_numpy(object),
                "corrected_start": c["start_ns"].to_numpy(np.int64),
            }
        )
    return events, meta, flow, (int(rel.min()), int((end - shift).max()))


def _stream_meta(pid: int, stream: np.ndarray, comm_streams: set[int]) -> list[dict[str, Any]]:
    """A named thread per stream, the communication streams last."""
    meta: list[dict[str, Any]] = []
    for k, s in enumerate(sorted(set(stream.tolist()), key=lambda s: (s in comm_streams, s))):
        meta.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": pid,
                "tid": int(s),
                "ts": 0,
                "args": {"name": f"stream {s}" + (" · comm" if s in comm_streams else "")},
            }
        )
        meta.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": int(s), "ts": 0, "args": {"sort_index": k}}
        )
    return meta


def _wait_counter(pid: int, starts: np.ndarray, ends: np.ndarray, wait_us: np.ndarray) -> list[dict[str, Any]]:
    """The ``collective wait (µs)`` counter: each matched comm kernel's wait from its start, 0 from its end."""
    counter = [
        {"ph": "C", "name": "collective wait (µs)", "pid": pid, "tid": 0, "ts": t / 1000.0, "args": {"wait": w}}
        for t, w in zip(starts.tolist(), wait_us.tolist())
    ]
    counter += [
        {"ph": "C", "name": "collective wait (µs)", "pid": pid, "tid": 0, "ts": t / 1000.0, "args": {"wait": 0}}
        for t in ends.tolist()
    ]
    return sorted(counter, key=lambda e: e["ts"])


def _flow_events(flow: pd.DataFrame) -> list[dict[str, Any]]:
    """``s`` → ``t`` → ``f`` per collective instance over its exported members, in arrival order."""
    if not len(flow):
        return []
    f = flow.loc[flow.groupby("collective")["pid"].transform("size").to_numpy() >= 2]
    f = f.sort_values(["collective", "corrected_start", "pid"], kind="stable")
    inst = f["collective"].to_numpy()
    first = np.r_[True, inst[1:] != inst[:-1]]
    last = np.r_[inst[1:] != inst[:-1], True]
    ph = np.where(first, "s", np.where(last, "f", "t"))
    out = []
    for p, i, pid, tid, ts, op, grp in zip(ph, inst, f["pid"], f["tid"], f["ts_ns"], f["op"], f["group"]):
        e = {
            "ph": str(p),
            "cat": "collective",
            "name": f"{op} · group {grp}",
            "id": int(i) + 1,
            "pid": int(pid),
            "tid": int(tid),
            "ts": int(ts) / 1000.0,
        }
        if p != "s":
            e["bp"] = "e"
        out.append(e)
    return out


def _host_events(h: pd.DataFrame, pid: int, shift: int, streams: set[int]) -> tuple[list[dict], list[dict]]:
    tids = h["tid"].to_numpy(np.int64)
    clash = set(np.unique(tids).tolist()) & streams
    tids = np.where(np.isin(tids, list(clash)), tids + (1 << 32), tids) if clash else tids
    start = h["start_ns"].to_numpy(np.int64)
    ts, dur = _ts(start - shift), _ts(h["end_ns"].to_numpy(np.int64) - start)
    kinds = h["kind"].astype(str).to_numpy(object)
    names = h["name"].astype(str).to_numpy(object)
    corr = h["correlation"].to_numpy(np.int64)
    ext = h["external_id"].to_numpy(np.int64)
    events = [
        {
            "ph": "X",
            "cat": HOST_KIND_CAT.get(kinds[i], "other"),
            "name": names[i],
            "pid": pid,
            "tid": int(tids[i]),
            "ts": ts[i],
            "dur": dur[i],
            "args": {"correlation": int(corr[i]), "External id": int(ext[i])},
        }
        for i in range(len(h))
    ]
    meta = [
        {
            "ph": "M",
            "name": "thread_name",
            "pid": pid,
            "tid": int(t),
            "ts": 0,
            "args": {"name": f"host thread {int(t) & 0xFFFFFFFF}"},
        }
        for t in np.unique(tids).tolist()
    ]
    meta += [
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": int(t), "ts": 0, "args": {"sort_index": 1000 + k}}
        for k, t in enumerate(np.unique(tids).tolist())
    ]
    return events, meta


# -- API -------------------------------------------------------------------------------------


def encode(trace: dict[str, Any], path: str) -> bytes:
    """The trace as JSON bytes, gzip-compressed when ``path`` ends in ``.gz`` (pure: writes nothing)."""
    import msgspec

    data = msgspec.json.encode(trace)
    return gzip.compress(data, 6, mtime=0) if path.endswith(".gz") else data


def timeline(
    results: Results | str | os.PathLike[str],
    *,
    ranks: Sequence[int] | None = None,
    step: int | None = None,
    window: tuple[int, int] | str | None = None,
    host: bool = False,
    cache: str | os.PathLike[str] | None = None,
    critical_path: bool = True,
) -> dict[str, Any]:
    """The chosen ranks during one step (or window) as a Chrome / Perfetto trace, on one clock.

    Parameters
    ----------
    results
        A results directory of ``dtrace analyze -o`` (its ingest cache holds the events) or
        ``dtrace.load(OUT)``.
    ranks
        Ranks to show (every device of each). Default: the flagged stragglers, the fastest and
        the median rank of the step (by computation time; the slowest too when none is flagged).
    step
        The step to show (default: the slowest, by the median step time over ranks; the whole
        trace when the traces have no steps).
    window
        Instead of a step: ``(start_ns, end_ns)`` since the job's first GPU event, or the CLI's
        ``"START:END"`` text (ms by default, units ns/us/ms/s).
    host
        Also export the host threads (ops, launches, annotations) of the window.
    cache
        The ingest cache holding the events (default ``OUT/cache``; give it for a run made with
        ``--cache DIR``).
    critical_path
        Draw each part's critical path (the walk ``step_bounds`` splits) as its first track,
        ``critical path``, with flow arrows to the GPU events where it hops between host and GPU
        (:mod:`dtrace.explore.pathtrack`). With a window, the events of the steps it overlaps are
        read whole to walk their paths, which are then cut to the window.

    Returns
    -------
    dict
        The trace-event document (``traceEvents``, ``otherData`` with the tracks, step, window);
        :func:`encode` turns it into the bytes of a ``.json`` or ``.json.gz`` file.

    Examples
    --------
    >>> trace = dtrace.timeline("run42/results")                              # doctest: +SKIP
    >>> [t["role"] for t in trace["otherData"]["tracks"]]                     # doctest: +SKIP
    ['straggler', 'fastest', 'median']
    >>> from dtrace.explore.timeline import encode                             # doctest: +SKIP
    >>> open("slow-step.json.gz", "wb").write(encode(trace, "slow-step.json.gz"))   # doctest: +SKIP
    """
    res = results if isinstance(results, Results) else load(results)
    sel = choose(res, ranks=ranks, step=step, window=window)
    return build(
        res, sel, host=host, cache=os.fspath(cache) if cache is not None else None, critical_path=critical_path
    )


__all__ = ["timeline", "read_parts", "choose", "build", "encode", "parse_window", "CachedPart", "Selection"]

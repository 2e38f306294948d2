"""Cross-rank reduce: functions of the small per-rank tables, run on the client.

Each reducer takes the dict of concatenated per-rank tables (plus the options) and returns
new tables. Every reducer is registered in :data:`REDUCERS` as a :class:`Reducer`: its name,
its function, the tables it reads (``requires``: per-rank tables of the analyses or tables of
other reducers) and the tables it makes with their declared columns (``produces``). The run
order (:data:`ORDER`) is derived from those declarations (a reducer runs after every other
reducer that makes a table it reads) and checked when this module is imported: a cycle or a
table that nothing makes is an error. The declared columns are cast by the same
:func:`~dtrace.core.dtypes.conform` as the per-part tables. Adding a reducer is one module and one
entry in :data:`REDUCERS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from ..analyses import ANALYSES
from ..analyses import opperf as _op_columns
from ..core.dtypes import conform
from ..core.memory import release_memory
from ..errors import UsageError
from ..options import Options
from . import collectives as _coll
from . import host_xrank as _hx
from . import kernels_xrank as _kx
from . import opperf as _opperf
from . import ops_xrank as _ox
from . import ranks as _ranks
from . import sequences as _seq
from . import step_bounds as _sb
from . import stragglers as _strag
from . import whatif as _whatif

Tables = dict[str, pd.DataFrame]
ReduceFunc = Callable[[Tables, Options], Tables]


@dataclass(frozen=True)
class Reducer:
    """One cross-rank reducer.

    Parameters
    ----------
    name
        The reducer's name.
    func
        ``func(tables, options) -> tables``: reads the tables named in ``requires`` (any of them
        may be absent: an analysis left out by ``only``) and returns the tables in ``produces``.
    requires
        The tables it reads: per-rank tables of the analyses or tables made by other reducers. A
        table it both reads and makes is the per-rank table it replaces (``collectives``).
    produces
        Each table it makes and its declared columns (name -> dtype; ``None``: not declared, as
        ``ranks`` with a column per metric present).
    """

    name: str
    func: ReduceFunc
    requires: tuple[str, ...]
    produces: Mapping[str, Mapping[str, object] | None]


REDUCERS: list[Reducer] = [
    Reducer(
        "kernels_xrank",
        _kx.kernels_xrank,
        ("kernels", "classes"),
        {"kernels_xrank": _kx.KERNELS_XRANK_COLUMNS, "classes_xrank": _kx.CLASSES_XRANK_COLUMNS},
    ),
    Reducer("ops_xrank", _ox.ops_xrank, ("ops",), {"ops_xrank": _ox.XRANK_COLUMNS, "op_outliers": _ox.OUTLIER_COLUMNS}),
    Reducer(
        "kernel_sequences_xrank",
        _seq.kernel_sequences_xrank,
        ("kernel_sequences",),
        {"kernel_sequences_xrank": _seq.XRANK_COLUMNS},
    ),
    Reducer(
        "host_xrank",
        _hx.host_xrank,
        ("launch_stats", "queues", "memory"),
        {"launch_stats_xrank": _hx.LAUNCH_XRANK_COLUMNS, "memory_xrank": _hx.MEMORY_XRANK_COLUMNS},
    ),
    Reducer(
        "op_perf",
        _opperf.reduce_op_perf,
        ("op_perf", "devices"),
        {
            "op_perf": {**_op_columns.COLUMNS, **_opperf.ROOFLINE_COLUMNS},
            "op_perf_xrank": _opperf.XRANK_COLUMNS,
            "op_family_perf": _opperf.FAMILY_COLUMNS,
            "devices": {**_op_columns.DEVICE_COLUMNS, **_opperf.DEVICE_EXTRA},
            "gpu_peaks": _opperf.PEAK_COLUMNS,
            "gpu_slowness": _opperf.SLOW_COLUMNS,
        },
    ),
    Reducer(
        "collectives",
        _coll.reduce_collectives,
        ("collectives",),
        {
            "collectives": _coll.ROW_COLUMNS,
            "collective_instances": _coll.INSTANCE_COLUMNS,
            "clock_offsets": _coll.CLOCK_COLUMNS,
        },
    ),
    Reducer(
        "ranks",
        _ranks.reduce_ranks,
        ("breakdown", "steps", "device_gaps", "collectives", "classes"),
        {"ranks": None, "rank_stats": _ranks.STATS_COLUMNS},
    ),
    Reducer(
        "stragglers",
        _strag.reduce_stragglers,
        (
            "ranks",
            "breakdown",
            "collectives",
            "collective_instances",
            "kernels",
            "gpu_slowness",
            "op_outliers",
            "step_bounds",
            "device_gaps",
        ),
        {"stragglers": _strag.OUTPUT_COLUMNS},
    ),
    Reducer(
        "whatif",
        _whatif.reduce_whatif,
        ("segments", "collectives", "clock_offsets", "kernels", "stragglers"),
        {"whatif": _whatif.COLUMNS},
    ),
    Reducer("step_bounds_xrank", _sb.reduce_step_bounds, ("step_bounds",), {"step_bounds_xrank": _sb.COLUMNS}),
]


def reducer_order(reducers: Sequence[Reducer], per_rank: Iterable[str]) -> list[Reducer]:
    """The reducers in an order where each runs after every other reducer making a table it reads
    (a stable topological order: ties keep the order of ``reducers``).

    Raises
    ------
    UsageError
        Two reducers with one name or making one table, a reducer reading a table that neither an
        analysis (``per_rank``) nor a reducer makes, or reducers that need each other (a cycle).

    Examples
    --------
    >>> noop = lambda tables, options: {}
    >>> [r.name for r in reducer_order([Reducer("b", noop, ("a",), {"b": None}),
    ...                                 Reducer("a", noop, ("x",), {"a": None})], ["x"])]
    ['a', 'b']
    >>> reducer_order([Reducer("b", noop, ("y",), {"b": None})], ["x"])
    Traceback (most recent call last):
    dtrace.errors.UsageError: reducer 'b' requires table 'y', which no analysis or reducer makes
    """
    maker = _makers(reducers)
    known = set(per_rank) | set(maker)
    after: dict[str, set[str]] = {}
    for r in reducers:
        for t in r.requires:
            if t not in known:
                raise UsageError(f"reducer {r.name!r} requires table {t!r}, which no analysis or reducer makes")
        after[r.name] = {maker[t] for t in r.requires if t in maker and maker[t] != r.name}
    order: list[Reducer] = []
    done: set[str] = set()
    while len(order) < len(reducers):
        ready = [r for r in reducers if r.name not in done and after[r.name] <= done]
        if not ready:
            raise UsageError(
                f"reducers need each other (each reads a table of the next): {' -> '.join(_cycle(after, done))}"
            )
        order.append(ready[0])
        done.add(ready[0].name)
    return order


def _makers(reducers: Sequence[Reducer]) -> dict[str, str]:
    """Each table made by a reducer -> that reducer's name (one reducer per table and name)."""
    names = [r.name for r in reducers]
    if len(set(names)) < len(names):
        raise UsageError(f"reducer names repeated: {sorted({n for n in names if names.count(n) > 1})}")
    maker: dict[str, str] = {}
    for r in reducers:
        for t in r.produces:
            if t in maker:
                raise UsageError(f"table {t!r} is made by two reducers: {maker[t]!r} and {r.name!r}")
            maker[t] = r.name
    return maker


def _cycle(after: Mapping[str, set[str]], done: set[str]) -> list[str]:
    """One cycle among the reducers not yet ordered, as names (the first repeated at the end)."""
    path = [min(n for n in after if n not in done)]
    while path.count(path[-1]) < 2:
        path.append(min(after[path[-1]] - done))
    return path[path.index(path[-1]) :]


ORDER: list[Reducer] = reducer_order(REDUCERS, (a.table for a in ANALYSES))
"""The reducers in their run order."""

REDUCED: frozenset[str] = frozenset(t for r in REDUCERS for t in r.produces)
"""Every table a reducer makes, the per-rank tables it replaces included (``collectives``,
``op_perf``, ``devices``): the other tables pass through :func:`run_reducers` as they are."""

READ: frozenset[str] = frozenset(t for r in REDUCERS for t in r.requires) | REDUCED
"""The tables the reducers read or replace: the only per-rank tables a run's client needs in
memory (the others go from the workers to the results files, :mod:`dtrace.core.spill`)."""

DECLARED: dict[str, Mapping[str, object]] = {
    t: cols for r in REDUCERS for t, cols in r.produces.items() if cols is not None
}
"""The declared columns (name → dtype) of the reduced tables (``ranks`` has a column per metric
present and is not declared)."""


def run_reducers(
    tables: Tables,
    options: Options,
    *,
    on_reduced: Callable[[Tables], None] | None = None,
    drop: Iterable[str] = (),
    load: Mapping[str, Callable[[], pd.DataFrame]] | None = None,
) -> Tables:
    """Every reducer in :data:`ORDER`, each seeing the tables of those before it; a declared table
    is conformed to its columns (extra columns kept). ``on_reduced`` gets the tables of each
    reducer as it ends (final: no other reducer makes them), e.g. to write them meanwhile.

    A table may also come from ``load`` (name -> a function reading it): it is read when a reducer
    needs it, never once a reducer made a table of that name. The tables named in ``drop`` (kept
    elsewhere: written already, or in ``load``) are let go as soon as the next reducer does not
    read them (read again if a later one does), and are not returned: the client holds the
    inputs of one reducer at a time."""
    out = dict(tables)
    drop = set(drop)
    loaders = dict(load or {})
    _let_go(out, drop, set())
    for i, r in enumerate(ORDER):
        for t in r.requires:
            if t not in out and t in loaders:
                out[t] = loaders[t]()
        made = {t: conform(df, DECLARED[t], t) if t in DECLARED else df for t, df in r.func(out, options).items()}
        out.update(made)
        for t in made:
            loaders.pop(t, None)  # replaced: the per-rank table is never read again
            drop.discard(t)
        if on_reduced is not None:
            on_reduced(made)
        _let_go(out, drop, set(ORDER[i + 1].requires) if i + 1 < len(ORDER) else set())
        release_memory()  # a reducer's temporaries freed: its pages back before the next one's
    return out


def _let_go(tables: Tables, drop: set[str], next_reads: set[str]) -> None:
    """Remove from ``tables`` those in ``drop`` that the next reducer does not read."""
    for t in [t for t in tables if t in drop and t not in next_reads]:
        del tables[t]

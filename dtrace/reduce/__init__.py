"""Cross-rank reduce: functions of the small per-rank tables, run on the client.

Each reducer takes the dict of concatenated per-rank tables (plus the options) and returns
new tables. Adding one is one module and one line in :data:`REDUCERS`; the tables it makes
declare their columns in :data:`DECLARED` and are cast to them by the same
:func:`~dtrace.dtypes.conform` as the per-part tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import pandas as pd

from ..analyses import opperf as _op_columns
from ..dtypes import conform
from ..options import Options
from . import collectives as _coll
from . import host_xrank as _hx
from . import kernels_xrank as _kx
from . import opperf as _opperf
from . import ops_xrank as _ox
from . import ranks as _ranks
from . import step_bounds as _sb
from . import stragglers as _strag
from . import whatif as _whatif

Tables = dict[str, pd.DataFrame]
Reducer = Callable[[Tables, Options], Tables]

REDUCERS: list[tuple[str, Reducer]] = [
    ("kernels_xrank", _kx.kernels_xrank),  # kernels_xrank, classes_xrank
    ("ops_xrank", _ox.ops_xrank),  # ops_xrank, op_outliers
    ("host_xrank", _hx.host_xrank),  # launch_stats_xrank, memory_xrank
    (
        "op_perf",
        _opperf.reduce_op_perf,
    ),  # op_perf (roofline), op_perf_xrank, op_family_perf, devices, gpu_peaks, gpu_slowness
    ("collectives", _coll.reduce_collectives),  # collectives (matched), collective_instances, clock_offsets
    ("ranks", _ranks.reduce_ranks),  # ranks, rank_stats (after collectives)
    ("stragglers", _strag.reduce_stragglers),  # stragglers (after ranks and op_outliers)
    ("whatif", _whatif.reduce_whatif),  # whatif (after collectives and stragglers)
    ("step_bounds_xrank", _sb.reduce_step_bounds),  # step_bounds_xrank
]

DECLARED: dict[str, Mapping[str, object]] = {
    "kernels_xrank": _kx.KERNELS_XRANK_COLUMNS,
    "classes_xrank": _kx.CLASSES_XRANK_COLUMNS,
    "ops_xrank": _ox.XRANK_COLUMNS,
    "op_outliers": _ox.OUTLIER_COLUMNS,
    "launch_stats_xrank": _hx.LAUNCH_XRANK_COLUMNS,
    "memory_xrank": _hx.MEMORY_XRANK_COLUMNS,
    "op_perf": {**_op_columns.COLUMNS, **_opperf.ROOFLINE_COLUMNS},
    "op_perf_xrank": _opperf.XRANK_COLUMNS,
    "op_family_perf": _opperf.FAMILY_COLUMNS,
    "devices": {**_op_columns.DEVICE_COLUMNS, **_opperf.DEVICE_EXTRA},
    "gpu_peaks": _opperf.PEAK_COLUMNS,
    "gpu_slowness": _opperf.SLOW_COLUMNS,
    "collectives": _coll.ROW_COLUMNS,
    "collective_instances": _coll.INSTANCE_COLUMNS,
    "clock_offsets": _coll.CLOCK_COLUMNS,
    "rank_stats": _ranks.STATS_COLUMNS,
    "stragglers": _strag.OUTPUT_COLUMNS,
    "whatif": _whatif.COLUMNS,
    "step_bounds_xrank": _sb.COLUMNS,
}
"""The declared columns (name → dtype) of the reduced tables (``ranks`` has a column per metric
present and is not declared)."""


def run_reducers(tables: Tables, options: Options) -> Tables:
    """Every reducer in order, each seeing the tables of those before it; a declared table is
    conformed to its columns (extra columns kept)."""
    out = dict(tables)
    for _name, fn in REDUCERS:
        out.update({t: conform(df, DECLARED[t], t) if t in DECLARED else df for t, df in fn(out, options).items()})
    return out

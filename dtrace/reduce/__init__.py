"""Cross-rank reduce: functions of the small per-rank tables, run on the client.

Each reducer takes the dict of concatenated per-rank tables (plus the options) and returns
new tables. Adding one is one module and one line in :data:`REDUCERS`.
"""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..options import Options
from . import collectives as _coll
from . import kernels_xrank as _kx
from . import ops_xrank as _ox
from . import ranks as _ranks
from . import stragglers as _strag
from . import whatif as _whatif

Tables = dict[str, pd.DataFrame]
Reducer = Callable[[Tables, Options], Tables]

REDUCERS: list[tuple[str, Reducer]] = [
    ("kernels_xrank", _kx.kernels_xrank),  # kernels_xrank, classes_xrank
    ("ops_xrank", _ox.ops_xrank),  # ops_xrank, op_outliers
    ("collectives", _coll.reduce_collectives),  # collectives (matched), collective_instances, clock_offsets
    ("ranks", _ranks.reduce_ranks),  # ranks, rank_stats (after collectives)
    ("stragglers", _strag.reduce_stragglers),  # stragglers (after ranks and op_outliers)
    ("whatif", _whatif.reduce_whatif),  # whatif (after collectives and stragglers)
]


def run_reducers(tables: Tables, options: Options) -> Tables:
    out = dict(tables)
    for _name, fn in REDUCERS:
        out.update(fn(out, options))
    return out

"""Cross-rank reduce: functions of the small per-rank tables, run on the client.

Each reducer takes the dict of concatenated per-rank tables (plus the options) and returns
new tables. Adding one is one module and one line in :data:`REDUCERS`.
"""
from __future__ import annotations

from typing import Callable

import pandas as pd

from ..options import Options

Tables = dict[str, pd.DataFrame]
Reducer = Callable[[Tables, Options], Tables]

REDUCERS: list[tuple[str, Reducer]] = [
]


def run_reducers(tables: Tables, options: Options) -> Tables:
    out = dict(tables)
    for _name, fn in REDUCERS:
        out.update(fn(out, options))
    return out

"""Analyse a generated job cheaply for the straggler tests: the same reader, ``prepare``, per-rank
analyses and cross-rank reducers as ``dtrace.analyze``, minus Dask and the Parquet cache, and only
the per-rank tables the cross-rank reduce reads. Many 64-rank jobs then fit the test budget; one
test runs the full ``dtrace.analyze`` path on a generated job."""
from __future__ import annotations

import glob
import os

import pandas as pd

from dtrace.analyses import run_part_analyses
from dtrace.api import combine
from dtrace.options import Options
from dtrace.prepare import prepare
from dtrace.readers import detect
from dtrace.reduce import REDUCERS

NEED = {"breakdown", "steps", "kernels", "collectives"}
MINE = ("collectives", "ranks", "stragglers")


def per_rank_tables(path: str, options: Options, need: set[str] = NEED) -> dict[str, pd.DataFrame]:
    per = []
    for f in sorted(glob.glob(os.path.join(path, "rank-*.json*"))):
        tf = detect(f).read(f)
        p = tf.parts[0]
        ev = p.events.to_pandas()
        ev["rank"] = tf.rank_hint
        part = prepare(ev, p.collectives.to_pandas(), p.memcpy.to_pandas(), rank=tf.rank_hint, device=p.device,
                       fmt=tf.format, options=options)
        per.append(run_part_analyses(part, only=need))
    return combine(per)


def reduce(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    out = dict(tables)
    for name, fn in REDUCERS:
        if name in MINE:
            out.update(fn(out, options))
    return out


def analyse(path: str, **options) -> dict[str, pd.DataFrame]:
    opts = Options(**options)
    return reduce(per_rank_tables(path, opts), opts)

"""Analyse a generated job cheaply for the straggler tests: the same reader, ``prepare``, per-partition
analyses and cross-rank reducers as ``dtrace.analyze``, minus Dask and the Parquet cache, and only
the per-rank tables the cross-rank reduce reads, all ranks in one partition. Many 64-rank jobs then
fit the test budget; one test runs the full ``dtrace.analyze`` path on a generated job."""

from __future__ import annotations

import glob
import os

import numpy as np
import pandas as pd

from dtrace.analyses import run_analyses
from dtrace.analyses.batch import Batch, prepare
from dtrace.execution.tasks import concat_parts
from dtrace.options import Options
from dtrace.readers import detect
from dtrace.reduce import ORDER

NEED = {"breakdown", "steps", "kernels", "collectives", "step_bounds", "device_gaps"}
MINE = ("collectives", "ranks", "stragglers")


def read_batch(paths: list[str], options: Options | None = None) -> Batch:
    """One batch of every part of these traces (as ``dtrace analyze`` partitions them); a part
    whose trace states no rank is numbered by its place."""
    tables, meta = [], []
    for f in paths:
        tf = detect(f).read(f)
        for p in tf.parts:
            tables.append(p.tables())
            meta.append((tf.rank_hint if tf.rank_hint is not None else len(meta), p.device, tf.format))
    ev, side = concat_parts(tables)
    parts = pd.DataFrame(
        {
            "part": np.arange(len(meta), dtype=np.int32),
            "rank": np.array([m[0] for m in meta], np.int32),
            "device": np.array([m[1] for m in meta], np.int32),
            "format": [m[2] for m in meta],
            "base_ns": np.zeros(len(meta), np.int64),
        }
    )
    return prepare(ev, side, parts, options or Options())


def per_rank_tables(path: str, options: Options, need: set[str] = NEED) -> dict[str, pd.DataFrame]:
    batch = read_batch(sorted(glob.glob(os.path.join(path, "rank-*.json*"))), options)
    return run_analyses(batch, only=need)


def reduce(tables: dict[str, pd.DataFrame], options: Options) -> dict[str, pd.DataFrame]:
    out = dict(tables)
    for r in ORDER:
        if r.name in MINE:
            out.update(r.func(out, options))
    return out


def analyse(path: str, **options) -> dict[str, pd.DataFrame]:
    opts = Options(**options)
    return reduce(per_rank_tables(path, opts), opts)

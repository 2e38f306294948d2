"""Every table of a partition of many parts equals the per-part reference computation.

The reference is dtrace's previous per-(rank, device) implementation, frozen in
``tests/oracle/`` (validated then against TraceLens and HTA). Here the same parts — real traces
from ``../shared/traces``, a generated multi-rank job, JAX and Nsight Systems files — are
analysed once all together in one batch (the vectorised code under test) and once part by part
with the oracle, under several settings; every row of every table must match. Tables newer than
the oracle (``segments``) are checked against the same analysis run on each part alone: many
parts in one batch must give what each part gives by itself.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from oracle.analyses import ANALYSES as ORACLE
from oracle.analyses import run_part_analyses as oracle_run
from oracle.prepare import prepare as oracle_prepare
from testpaths import shared

from dtrace.analyses import ANALYSES, run_analyses
from dtrace.analyses.batch import prepare
from dtrace.execution.tasks import concat_parts
from dtrace.options import Options
from dtrace.readers import detect

ORACLE_TABLES = {a.table for a in ORACLE}
KINETO = [
    "single/a100_nccl_collectives.json.gz",
    "single/mi300_resnet_rccl_rank0.json.gz",
    "single/b200_vllm_eager_rank0.json.gz",
    "single/mi250_rocm62.json.gz",
    "single/mi210_gpu_only.json.gz",
    "hta-2rank/sampled_rank-0.json.gz",
    "hta-2rank/sampled_rank-1.json.gz",
    "edge/old_capitalized_categories_rank_1.json.gz",
    "edge/arg_above_int64_rank-70.json.gz",
]


def _parts_of(path: str, first_rank: int):
    tf = detect(path).read(path)
    out = []
    for p in tf.parts:
        rank = first_rank + (p.local_index if tf.rank_per_device else 0)
        out.append(
            {
                "rank": rank,
                "device": p.device,
                "format": tf.format,
                "base_ns": int(tf.meta.get("base_time_ns") or 0),
                "tables": p.tables(),
            }
        )
    return out


def _as_today(df: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """The oracle's table under today's dtype rules (issue 14, changed on purpose): a float
    column now declared an integer is rounded half to even (histogram bin edges: up to the next
    whole ns, the same integer gaps); a -1 in a column now declared nullable ``Int64`` is
    ``NA``. Everything else is compared as the oracle computes it."""
    out = {}
    for c in df.columns:
        col, want = df[c], columns.get(c)
        if want in ("int64", "Int64") and col.dtype == np.float64:
            v = col.to_numpy()
            ints = (np.ceil(v) if c in ("lo_ns", "hi_ns") else np.rint(np.nan_to_num(v))).astype(np.int64)
            col = pd.Series(pd.arrays.IntegerArray(ints, np.isnan(v)) if want == "Int64" else ints)
        if want == "Int64":
            v = col.to_numpy(np.int64, na_value=-1)
            col = pd.Series(pd.arrays.IntegerArray(np.maximum(v, 0), v < 0))
        out[c] = col.to_numpy() if not isinstance(col.dtype, pd.Int64Dtype) else col.array
    if "comm_overlap_share" in columns and "comm_ns" in df.columns:  # newer than the oracle: from its columns
        comm, exposed = df["comm_ns"].to_numpy(np.float64), df["exposed_comm_ns"].to_numpy(np.float64)
        out["comm_overlap_share"] = np.divide(comm - exposed, comm, out=np.full(len(df), np.nan), where=comm > 0)
    return pd.DataFrame(out, columns=[c for c in columns if c in out] or list(df.columns))


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in one order whatever order the code produced (ties in a table's sort order)."""
    if not len(df):
        return df.reset_index(drop=True)
    key = df.astype({c: str for c in df.columns if df[c].dtype == object})
    low = np.iinfo(np.int64).min  # NA sorts first
    cols = [
        key[c].to_numpy(np.int64, na_value=low) if isinstance(key[c].dtype, pd.Int64Dtype) else key[c].to_numpy()
        for c in reversed(list(key.columns))
    ]
    return df.iloc[np.lexsort(cols)].reset_index(drop=True)


def _check(parts: list[dict], options: Options) -> None:
    tables = [p["tables"] for p in parts]
    ev, side = concat_parts(tables)
    meta = pd.DataFrame(
        {
            "part": np.arange(len(parts), dtype=np.int32),
            "rank": np.array([p["rank"] for p in parts], np.int32),
            "device": np.array([p["device"] for p in parts], np.int32),
            "format": [p["format"] for p in parts],
            "base_ns": np.array([p["base_ns"] for p in parts], np.int64),
        }
    )
    got = run_analyses(prepare(ev, side, meta, options))
    want: dict[str, list[pd.DataFrame]] = {}
    newer = [a for a in ANALYSES if a.table not in ORACLE_TABLES]
    for i, p in enumerate(parts):  # tables the oracle does not have: each part alone
        e, s = concat_parts([p["tables"]])
        alone = run_analyses(prepare(e, s, meta.iloc[[i]].assign(part=np.int32(0)), options), newer)
        for name, df in alone.items():
            want.setdefault(name, []).append(df)
    for p in parts:
        t = p["tables"]
        e, c, m = (x.to_pandas() for x in (t.events, t.side["collectives"], t.side["memcpy"]))
        e["rank"] = np.full(len(e), p["rank"], np.int32)
        part = oracle_prepare(
            e, c, m, rank=p["rank"], device=p["device"], fmt=p["format"], options=options, base_ns=p["base_ns"]
        )
        declared = {a.table: a.columns for a in ANALYSES}
        for name, df in oracle_run(part).items():
            want.setdefault(name, []).append(_as_today(df, declared.get(name, {})))
    for a in ANALYSES:
        w = pd.concat([d for d in want[a.table] if len(d)] or [want[a.table][0]], ignore_index=True)
        g = got[a.table]
        assert list(g.columns) == list(w.columns), a.table
        g, w = _canonical(g), _canonical(w)
        assert len(g) == len(w), (a.table, len(g), len(w))
        for col in w.columns:
            if w[col].dtype == np.float64:
                np.testing.assert_allclose(
                    g[col].to_numpy(np.float64),
                    w[col].to_numpy(np.float64),
                    rtol=1e-12,
                    atol=1e-9,
                    equal_nan=True,
                    err_msg=f"{a.table}.{col}",
                )
            else:
                assert (g[col].isna().to_numpy() == w[col].isna().to_numpy()).all(), f"{a.table}.{col}"
                known = g[col].notna().to_numpy()
                assert (g[col].to_numpy()[known] == w[col].to_numpy()[known]).all(), f"{a.table}.{col}"
                assert g[col].dtype == w[col].dtype, (a.table, col, g[col].dtype, w[col].dtype)


@pytest.fixture(scope="module")
def kineto_parts():
    parts = []
    for i, rel in enumerate(KINETO):
        parts += _parts_of(shared("kineto", *rel.split("/")), first_rank=10 * i)
    return parts


OPTIONS = [
    {},
    {"compat": "tracelens"},
    {"linked_only": True},
    {"step": 4},
    {"iters": 3, "hist_bins": 7, "hist_log": True, "hist_min_ns": 500, "kernel_wait_ns": 5_000},
    {"hist_min_ns": 2_000, "hist_max_ns": 90_000},
]


@pytest.mark.parametrize("kw", OPTIONS, ids=[",".join(k) or "default" for k in OPTIONS])
def test_kineto_traces_in_one_batch(kineto_parts, kw):
    _check(kineto_parts, Options(**kw))


def test_class_maps_in_one_batch(kineto_parts):
    _check(
        kineto_parts[:6],
        Options(classmap=shared("classmaps", "vllm_engine_model.json"), classmap_engine="vllm", classmap_model="llama"),
    )
    _check(kineto_parts[:6], Options(classmap={"gemm": "gemm", "elementwise": "ew", "nccl": "comm"}))


def test_jax_and_nsys_in_one_batch(kineto_parts):
    parts = _parts_of(shared("jax", "mi300x8_conv.trace.json.gz"), first_rank=200)
    parts += _parts_of(shared("nsys", "rtx4060ti_4streams.sqlite"), first_rank=300)
    _check(parts + kineto_parts[5:7], Options())
    _check(parts, Options(compat="tracelens"))


def test_generated_job_in_one_batch(tmp_path):
    from dtrace.generate.synth import generate

    # two hosts of four: the 16-rank job of the benchmarks in a smaller block
    generate(str(tmp_path), ranks=8, gpus_per_host=4, steps=3, seed=3, faults=["compute:rank=5:slow=0.2"])
    parts = []
    for f in sorted(os.listdir(tmp_path)):
        if f.startswith("rank-"):
            parts += _parts_of(str(tmp_path / f), first_rank=int(f.split("-")[1].split(".")[0]))
    _check(parts, Options())
    _check(parts, Options(step=1))


def test_one_part_and_empty_parts(kineto_parts):
    _check(kineto_parts[:1], Options())
    _check([kineto_parts[0], kineto_parts[3]], Options(step=999))  # every GPU event filtered out

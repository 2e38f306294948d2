"""Renderers and diff accept missing values as pandas NA (nullable Int64/Float64) as well as the
older -1 (issue 14: bytes, seq, explained_by, ... become NA). Every table of a real 64-rank run is
rendered in every format, with NA injected, and the report, diff, compare and quick views run."""

import json
import re

import numpy as np
import pandas as pd
import pytest

import dtrace
from dtrace.explore.diff import diff
from dtrace.render.compare import category_csv, compare
from dtrace.render.html import SECTIONS, report
from dtrace.render.summary import summary, summary_document
from dtrace.render.text import FORMATS, render
from dtrace.render.views import gaps_text, kernels_text
from dtrace.results import Results

MISSING = (
    "bytes",
    "seq",
    "explained_by",
    "group_size",
    "last_rank",
    "max_rank",
    "computation_ns",
    "late_ns",
    "algbw_gbps",
    "busbw_gbps",
    "link_ratio",
    "median_gpu_ns",
    "ratio",
    "z",
    "mean_ns",
    "std_ns",
)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from dtrace.generate import synth

    d = tmp_path_factory.mktemp("na")
    synth.generate(d / "traces", ranks=16, steps=2, seed=3, kernels_per_step=12, faults=["compute:rank=5:slow=0.3"])
    return dtrace.analyze(str(d / "traces"), str(d / "res"), scheduler="sync")


KEYS = ("rank", "device", "stream", "step", "collective", "bin", "host")
TEXT = ("evidence", "signals", "group", "match", "method")  # text that may be missing
#: the per-part duration statistics that dtrace.reduce.kernels_xrank.pool combines: a kernel or a
#: kernel pair always has them (pool is the lead's reduce code, not a renderer)
POOLED = {
    "kernels": ("count", "total_ns", "mean_ns", "std_ns", "min_ns", "max_ns"),
    "transitions": ("count", "total_ns", "mean_ns", "std_ns", "min_ns", "max_ns"),
}


def with_na(res: Results, everywhere: bool = False) -> Results:
    """Every integer column nullable (Int64), floats Float64; the MISSING columns NA on every other
    row, or (``everywhere``) every non-key numeric column NA on the second row."""
    tables = {}
    for name in res.table_names:
        df = res.table(name).copy()
        for c in df.columns:
            col = df[c]
            if everywhere and len(df) > 1 and (pd.api.types.is_bool_dtype(col) or c in TEXT):
                df[c] = col.astype("boolean" if pd.api.types.is_bool_dtype(col) else object)
                df.loc[df.index[1], c] = pd.NA
                continue
            if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
                continue
            if pd.api.types.is_integer_dtype(col):
                df[c] = col.astype("Int64")
            elif pd.api.types.is_float_dtype(col):
                df[c] = col.astype("Float64")
            if c in KEYS or not len(df) or c in POOLED.get(name, ()):
                continue
            if everywhere and len(df) > 1:
                df.loc[df.index[1], c] = pd.NA
            elif not everywhere and c in MISSING:
                df.loc[df.index[::2], c] = pd.NA
        tables[name] = df
    return Results(tables, dict(res.manifest), None)


@pytest.mark.parametrize("everywhere", [False, True])
def test_every_table_in_every_format(job, everywhere):
    na = with_na(job, everywhere)
    for name in na.table_names:
        df = na.table(name)
        for fmt in FORMATS:
            text = render(df, fmt, title=name, max_rows=30, width=120)
            assert isinstance(text, str) and text
            assert "<NA>" not in text and not re.search(r"\bnan\b", text), (name, fmt)  # missing shows as missing
            if fmt == "json":
                rows = json.loads(text)
                assert len(rows) == min(len(df), 30)
                for c in df.columns:  # NA is null in JSON, never -1 or NaN
                    if len(df) and pd.isna(df[c].iloc[0]):
                        assert rows[0][c] is None, (name, c)


@pytest.mark.parametrize("everywhere", [False, True])
def test_report_summary_and_quick_views(job, everywhere):
    na = with_na(job, everywhere)
    html = report(na)
    assert html.count("<section") == len(SECTIONS) and "&lt;NA&gt;" not in html and not re.search(r">-?nan\b", html)
    text = summary(na)
    assert "computation" in text and summary_document(na)["breakdown"]
    for fmt in ("table", "markdown"):
        text += kernels_text(na, sort="total", top=10, rank=None, fmt=fmt)
        text += gaps_text(na, sort="mean", top=10, rank=None, stream=None, fmt=fmt)
        assert "kernel classes" in text and "Total gaps found" in text
    assert "<NA>" not in text and not re.search(r"\bnan\b", text)
    memops = kernels_text(na, sort="total", top=10, rank=None, fmt="table")
    assert "memory operations" in memops


@pytest.mark.parametrize("everywhere", [False, True])
def test_diff_and_compare_with_na(job, everywhere):
    na = with_na(job, everywhere)
    d = diff(job, na)
    assert len(d) and "<html" in compare([("a", job), ("b", na)]) and category_csv([("a", job), ("b", na)])
    if not everywhere:  # only computation_ns of the time columns diff reads lost values: every other GPU's
        bd = job.breakdown
        lost = -np.rint(bd["computation_ns"].iloc[::2].sum() / len(bd))
        comp = d.loc[(d["level"] == "breakdown") & (d["key"] == "computation"), "time_delta_ns"]
        assert comp.tolist() == [lost]
        assert (d.loc[d["key"] != "computation", "time_delta_ns"] == 0).all()


def test_bytes_na_and_minus_one_mean_unknown(job):
    """A memory operation whose bytes are unknown (-1 before, NA now) counts as unknown in both spellings."""
    mem = job.table("memops").copy()
    minus = mem.assign(bytes=np.int64(-1))
    nulls = mem.assign(bytes=pd.array([pd.NA] * len(mem), dtype="Int64"))
    texts = []
    for frame in (minus, nulls):
        r = Results({**{n: job.table(n) for n in job.table_names}, "memops": frame}, dict(job.manifest), None)
        texts.append(kernels_text(r, sort="total", top=5, rank=None, fmt="table"))
    assert texts[0] == texts[1]

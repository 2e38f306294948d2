"""Per-name statistics for the report, from ``nsys stats`` CSVs or from a report's events.

Both paths give the same three frames:

- ``kernels``: ``name``, ``count``, ``total_ns`` (every kernel, NCCL included);
- ``memops``: the same for memory operations, named as ``nsys stats`` names them;
- ``nvtx``: ``name``, ``count``, ``total_ns`` of the projected NVTX ranges.

From CSVs they are read as written. From an Nsight Systems report (``.sqlite``, or
``.nsys-rep`` through ``nsys export``) the report is analysed like any trace
(:func:`dtrace.analyze`) and the ``kernels`` and ``nvtx_ranges`` tables are summed over its
(process, device) parts.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import UsageError
from ..knowledge.classify import Classifier, SubstringMap, load_classmap
from ..readers._stats_csv import kernel_summary, memop_summary, nvtx_projection
from .config import StatsConfig, StatsInput, is_config, load_config
from .report import StatsReport, build_report


@dataclass
class NameStats:
    kernels: pd.DataFrame
    memops: pd.DataFrame | None
    nvtx: pd.DataFrame | None
    parts: int = 1


def nvtx_by_name(proj: pd.DataFrame) -> pd.DataFrame:
    """Projected NVTX ranges (one row each) → ``name``, ``count``, ``total_ns``; ranges without
    a projection (``None``) are not counted."""
    has = ~np.isnan(proj["proj_dur_ns"].to_numpy(np.float64))
    p = proj.loc[has]
    grp = p.groupby("name", sort=True)["proj_dur_ns"]
    return pd.DataFrame(
        {
            "name": grp.size().index.to_numpy(dtype=object),
            "count": grp.size().to_numpy(np.int64),
            "total_ns": grp.sum().round().to_numpy(np.int64),
        }
    )


def from_csv(inp: StatsInput) -> NameStats:
    """The statistics of a ``csv`` input (kernel sum required, the others optional)."""
    assert inp.kernel_sum is not None
    kern = kernel_summary(inp.kernel_sum)[["name", "count", "total_ns"]]
    mem = memop_summary(inp.mem_time_sum)[["name", "count", "total_ns"]] if inp.mem_time_sum else None
    nvtx = nvtx_by_name(nvtx_projection(inp.nvtx_proj_trace)) if inp.nvtx_proj_trace else None
    return NameStats(kern, mem, nvtx)


def from_report(path: str, *, with_mem: bool = True, with_nvtx: bool = True) -> NameStats:
    """The statistics of an Nsight Systems report, computed from its events."""
    from ..api import analyze
    from ..errors import InputError

    with tempfile.TemporaryDirectory(prefix="dtrace-nsys-stats-") as cache:
        res = analyze([path], cache=cache, scheduler="sync", format="nsys")
        if res.errors:
            err = res.errors[0]
            raise InputError(path, err.split(": ", 1)[1] if err.startswith(os.path.abspath(path)) else err)
        k = res.kernels
        parts = int(res.manifest.get("n_parts", 1)) or 1
        ranges = res.table("nvtx_ranges")

    def by_name(df: pd.DataFrame) -> pd.DataFrame:
        grp = df.groupby("name", sort=False)
        return pd.DataFrame({"count": grp["count"].sum(), "total_ns": grp["total_ns"].sum()}).reset_index()

    kind = k["kind"].astype(str)
    kern = by_name(k.loc[kind == "kernel"])
    mem = by_name(k.loc[kind.isin(["memcpy", "memset"])]) if with_mem else None
    nvtx = None
    if with_nvtx:
        grp = ranges.groupby("name", sort=True)
        nvtx = pd.DataFrame({"count": grp["with_gpu"].sum(), "total_ns": grp["proj_ns"].sum()}).reset_index()
    return NameStats(kern, mem, nvtx, parts)


def stats_of(inp: StatsInput) -> NameStats:
    if inp.format == "csv":
        return from_csv(inp)
    assert inp.report is not None
    return from_report(inp.report, with_mem=inp.with_mem, with_nvtx=inp.with_nvtx)


def classifier_of(
    config: StatsConfig, classmap: object = None, engine: str | None = None, model: str | None = None
) -> Classifier:
    """The config's ``kernel_to_class_map`` (or ``classmap``, a file or dict: of a regex class map
    ``{engine: {model: ...}}``, the ``engine`` and ``model`` chosen); built-in without either."""
    if isinstance(classmap, str) and is_config(classmap):  # a tool config (comments allowed) holding the map
        inner = load_config(classmap).kernel_to_class_map
        if inner is None:
            raise UsageError(f"class map {classmap}: the config has no 'kernel_to_class_map'")
        return SubstringMap(inner)
    if classmap is not None:
        return load_classmap(classmap, engine, model)
    if config.kernel_to_class_map is not None:
        return SubstringMap(config.kernel_to_class_map)
    return load_classmap(None)


def run_config(config: StatsConfig, classmap: object = None) -> list[StatsReport]:
    """One report per input of the config."""
    classifier = classifier_of(config, classmap)
    out = []
    for inp in config.inputs:
        st = stats_of(inp)
        gpus = inp.gpus if inp.gpus is not None else st.parts
        out.append(
            build_report(
                st.kernels,
                st.memops,
                st.nvtx,
                title=inp.title,
                iters=inp.iters,
                gpus=gpus,
                nvtx_tag=inp.nvtx_tag,
                classifier=classifier,
            )
        )
    return out

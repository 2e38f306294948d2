"""The GPU Performance Analyser report: per-iteration kernel, NCCL, memory-op and NVTX figures.

Inputs are per-name statistics (``name``, ``count``, ``total_ns``), from ``nsys stats`` CSVs
or computed from an Nsight Systems report's events, plus the projected NVTX ranges. As in
that tool:

- every per-iteration figure is a total divided by ``iters × gpus``;
- *kernel* figures and the class table cover the non-NCCL kernels (NCCL kernels — class
  ``nccl`` of a ``kernel_to_class_map``, otherwise communication kernels — have their own
  table, by collective: ``ncclDevKernel_AllGather_...`` → ``AllGather``);
- the NVTX figures count the ranges named ``nvtx_tag_of_iter`` and sum their projected
  durations;
- the estimated non-hidden NCCL, mem-op and bubble time per range is the average range time
  minus the non-NCCL kernel time per iteration; its total is that times the range count.

:func:`build_report` computes a :class:`StatsReport` (numbers in ns); :func:`render_report`
writes the tool's text; :meth:`StatsReport.tables` gives the same figures as DataFrames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..core.dtypes import empty_frame
from ..knowledge.categories import categorize_names
from ..knowledge.classify import Classifier, collective_label


@dataclass
class StatsReport:
    """The figures of one input (times in ns)."""

    title: str
    iters: int
    gpus: int
    kernel_total_ns: int
    kernel_instances: int
    classes: pd.DataFrame  # class, total_ns, instances, time_per_iter_ns, instances_per_iter, share_pct
    nccl_total_ns: int
    nccl_instances: int
    nccl: pd.DataFrame  # collective, total_ns, instances, time_per_iter_ns, instances_per_iter
    memops: pd.DataFrame | None  # operation, total_ns, instances, time_per_iter_ns, instances_per_iter
    nvtx_tag: str | None = None
    nvtx_count: int = 0
    nvtx_total_ns: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def divisor(self) -> int:
        return self.iters * self.gpus

    @property
    def kernel_per_iter_ns(self) -> float:
        return self.kernel_total_ns / self.divisor

    @property
    def nvtx_avg_ns(self) -> float:
        return self.nvtx_total_ns / self.nvtx_count if self.nvtx_count else float("nan")

    @property
    def nonhidden_per_range_ns(self) -> float:
        """Average NVTX range time minus the non-NCCL kernel time per iteration."""
        return self.nvtx_avg_ns - self.kernel_per_iter_ns if self.nvtx_count else float("nan")

    @property
    def nonhidden_total_ns(self) -> float:
        return self.nonhidden_per_range_ns * self.nvtx_count if self.nvtx_count else float("nan")

    def summary_row(self) -> dict[str, object]:
        d = self.divisor
        return {
            "title": self.title,
            "iters": self.iters,
            "gpus": self.gpus,
            "kernel_per_iter_ns": self.kernel_total_ns / d,
            "kernel_instances_per_iter": self.kernel_instances / d,
            "kernel_total_ns": self.kernel_total_ns,
            "kernel_instances": self.kernel_instances,
            "nccl_per_iter_ns": self.nccl_total_ns / d,
            "nccl_instances_per_iter": self.nccl_instances / d,
            "nccl_total_ns": self.nccl_total_ns,
            "nccl_instances": self.nccl_instances,
            "nvtx_tag": self.nvtx_tag or "",
            "nvtx_count": self.nvtx_count,
            "nvtx_avg_ns": self.nvtx_avg_ns,
            "nvtx_total_ns": self.nvtx_total_ns,
            "nonhidden_per_range_ns": self.nonhidden_per_range_ns,
            "nonhidden_pct": _pct(self.nonhidden_per_range_ns, self.nvtx_avg_ns),
            "nonhidden_total_ns": self.nonhidden_total_ns,
        }

    def tables(self) -> dict[str, pd.DataFrame]:
        """``stats_summary`` (one row), ``stats_classes``, ``stats_nccl``, ``stats_memops``."""

        def tag(df: pd.DataFrame | None) -> pd.DataFrame:
            df = df if df is not None else pd.DataFrame()
            return df.assign(title=self.title)[["title", *df.columns]] if len(df.columns) else empty_frame(["title"])

        return {
            "stats_summary": pd.DataFrame([self.summary_row()]),
            "stats_classes": tag(self.classes),
            "stats_nccl": tag(self.nccl),
            "stats_memops": tag(self.memops),
        }


def _pct(a: float, b: float) -> float:
    return 100.0 * a / b if b and not np.isnan(b) else float("nan")


def _per_iter(df: pd.DataFrame, key: str, divisor: int) -> pd.DataFrame:
    grp = df.groupby(key, sort=False)
    out = pd.DataFrame({"total_ns": grp["total_ns"].sum(), "instances": grp["count"].sum()}).reset_index()
    out = out.sort_values(["total_ns", key], ascending=[False, True], kind="stable").reset_index(drop=True)
    out["time_per_iter_ns"] = out["total_ns"] / divisor
    out["instances_per_iter"] = out["instances"] / divisor
    return out


def build_report(
    kernels: pd.DataFrame,
    memops: pd.DataFrame | None,
    nvtx: pd.DataFrame | None,
    *,
    title: str,
    iters: int,
    gpus: int,
    nvtx_tag: str | None,
    classifier: Classifier,
) -> StatsReport:
    """Compute the report of one input.

    Parameters
    ----------
    kernels
        One row per kernel name: ``name``, ``count``, ``total_ns`` (NCCL kernels included).
    memops
        One row per memory operation (``[CUDA memcpy Host-to-Device]``, ``[CUDA memset]``), or None.
    nvtx
        One row per NVTX range name: ``name``, ``count``, ``total_ns`` (projected), or None.
    iters, gpus
        Per-iteration figures divide totals by ``iters × gpus``.
    nvtx_tag
        The name of the NVTX range that marks one iteration.
    classifier
        Kernel classes (a ``kernel_to_class_map`` :class:`~dtrace.knowledge.classify.SubstringMap`, or
        the built-in classifier).
    """
    if iters < 1 or gpus < 1:
        raise ValueError("iters and gpus must be >= 1")
    divisor = iters * gpus
    k = kernels.groupby("name", sort=False)[["count", "total_ns"]].sum().reset_index()
    names = k["name"].astype(str).tolist()
    cats = categorize_names(names, ["kernel"] * len(names))
    classes = np.asarray(classifier.classify(names, ["kernel"] * len(names), cats), dtype=object)
    nccl = classifier.is_nccl(classes, np.asarray(cats, dtype=object))
    k = k.assign(**{"class": classes})
    comp = k.loc[~nccl]
    comm = k.loc[nccl]
    cls = _per_iter(comp, "class", divisor)
    total = int(comp["total_ns"].sum())
    cls["share_pct"] = 100.0 * cls["total_ns"] / total if total else 0.0
    coll = comm.assign(collective=[collective_label(n) for n in comm["name"].astype(str)])
    nccl_t = _per_iter(coll, "collective", divisor)
    mem_t = None
    if memops is not None:
        mem_t = _per_iter(memops.rename(columns={"name": "operation"}), "operation", divisor)
    rep = StatsReport(
        title=title,
        iters=iters,
        gpus=gpus,
        kernel_total_ns=total,
        kernel_instances=int(comp["count"].sum()),
        classes=cls,
        nccl_total_ns=int(comm["total_ns"].sum()),
        nccl_instances=int(comm["count"].sum()),
        nccl=nccl_t,
        memops=mem_t,
        nvtx_tag=nvtx_tag,
    )
    if nvtx_tag and nvtx is not None:
        sel = nvtx.loc[nvtx["name"].astype(str) == nvtx_tag]
        rep.nvtx_count = int(sel["count"].sum())
        rep.nvtx_total_ns = int(sel["total_ns"].sum())
        if not rep.nvtx_count:
            rep.notes.append(
                f"no NVTX range named {nvtx_tag!r} "
                f"({len(nvtx)} range names; e.g. {', '.join(map(str, nvtx['name'].head(3)))})"
            )
    elif nvtx_tag and nvtx is None:
        rep.notes.append("nvtx_tag_of_iter given but no NVTX projection (nvtx_proj_trace) to measure it in")
    return rep


# -- rendering ---------------------------------------------------------------------------
def _ms(ns: float, digits: int = 3) -> str:
    return f"{ns / 1e6:.{digits}f}"


def _inst(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def _table(df: pd.DataFrame, key: str, header: str, with_share: bool) -> list[str]:
    cols = [header, "TimePerIter(ms)", "InstancePerIter"]
    cols += ["TimePerIter(%)"] if with_share else []
    cols += ["TotalTime(ms)", "TotalInstance"] + (["TotalTime(%)"] if with_share else [])
    width = max([len(header), *(len(str(v)) for v in df[key])]) + 2
    lines = [f"{cols[0]:<{width}}" + "".join(f"{c:>17}" for c in cols[1:])]
    keys = df[key].astype(str).tolist()
    tpi, ipi = df["time_per_iter_ns"].tolist(), df["instances_per_iter"].tolist()
    tot, inst = df["total_ns"].tolist(), df["instances"].tolist()
    share = df["share_pct"].tolist() if with_share else [0.0] * len(df)
    for i, name in enumerate(keys):
        cells = [_ms(tpi[i], 2), _inst(ipi[i])]
        cells += [f"{share[i]:.2f}"] if with_share else []
        cells += [_ms(tot[i], 2), f"{int(inst[i])}"] + ([f"{share[i]:.2f}"] if with_share else [])
        lines.append(f"{name:<{width}}" + "".join(f"{c:>17}" for c in cells))
    return lines


def render_report(rep: StatsReport) -> str:
    """The report as the GPU Performance Analyser prints it (ms, 3 decimals)."""
    d = rep.divisor
    out = [
        f"===== {rep.title} =====",
        f"Kernel time per iteration: {_ms(rep.kernel_total_ns / d)} (ms)",
        f"Kernel instances per iteration: {_inst(rep.kernel_instances / d)}",
        f"Kernel total time: {_ms(rep.kernel_total_ns)} (ms)",
        f"Kernel total instances: {rep.kernel_instances}",
        "Kernel Statistic:",
    ]
    out += _table(rep.classes, "class", "Class", True)
    out += [
        "",
        f"NCCL time per iteration: {_ms(rep.nccl_total_ns / d)} (ms)",
        f"NCCL instances per iteration: {_inst(rep.nccl_instances / d)}",
        f"NCCL total time: {_ms(rep.nccl_total_ns)} (ms)",
        f"NCCL total instances: {rep.nccl_instances}",
        "NCCL Statistic:",
    ]
    out += _table(rep.nccl, "collective", "Class", False)
    if rep.memops is not None:
        out += ["", "Mem Ops Statistic:"]
        out += _table(rep.memops, "operation", "Class", False)
    if rep.nvtx_count:
        pct = _pct(rep.nonhidden_per_range_ns, rep.nvtx_avg_ns)
        out += [
            "",
            f"NVTX range count: {rep.nvtx_count}",
            f"NVTX average range time: {_ms(rep.nvtx_avg_ns)} (ms)",
            f"NVTX total range time: {_ms(rep.nvtx_total_ns)} (ms)",
            "",
            f"Estimated non-hidden NCCL, mem ops and bubble time per range: {_ms(rep.nonhidden_per_range_ns)} (ms)",
            f"Estimated non-hidden NCCL, mem ops and bubble time per range: {pct:.2f} (%)",
            f"Estimated non-hidden NCCL, mem ops and bubble total time: {_ms(rep.nonhidden_total_ns)} (ms)",
            f"Estimated non-hidden NCCL, mem ops and bubble total time: "
            f"{_pct(rep.nonhidden_total_ns, rep.nvtx_total_ns):.2f} (%)",
        ]
    for note in rep.notes:
        out += ["", f"note: {note}"]
    return "\n".join(out) + "\n"

"""Several runs side by side (gputrc2graph's "analyze multiple profiles"), as one HTML page.

Every run's kernels fall into the same categories: with a class map (a
:class:`~dtrace.knowledge.classify.Classifier`, e.g. the vLLM ``{engine: {model: {regex: category}}}``
file) all runs are classified again by it; without one, each run's ``kernels.class`` (else
``kernels.category``) is used. Values are means per GPU ((rank, device) part), so runs of
different sizes compare.

When the user gives a run's wall time measured without the profiler, its bars gain a
``non-GPU`` segment as in gputrc2graph: ``wall − GPU kernel time`` in the category chart
(kernels overlapping on several streams count fully there, as in that tool) and
``wall − GPU busy time`` in the breakdown chart (busy = union of all GPU activity). A
negative remainder is shown as zero and said so.
"""

from __future__ import annotations

import os
import time
from html import escape
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .._version import __version__
from ..core.dtypes import empty_frame
from ..explore.diff import diff as diff_runs
from ..explore.diff import n_parts
from ..results import Results
from . import charts as ch
from .escape import to_csv
from .page import na, note, page, table
from .sections import BREAKDOWN_PARTS

MAX_CATEGORIES = 12
CATEGORY_COLUMNS = ("run", "category", "name", "count", "total_ns", "per_gpu_ns", "gpus")


def run_labels(paths: Sequence[str]) -> list[str]:
    """Short unique labels for result directories: their base names, numbered if repeated.

    Examples
    --------
    >>> run_labels(["a/results", "b/results", "c/run2"])
    ['results', 'results#2', 'run2']
    """
    out: list[str] = []
    seen: dict[str, int] = {}
    for p in paths:
        base = os.path.basename(os.path.normpath(str(p))) or str(p)
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out


def category_table(runs: Sequence[tuple[str, Results]], classifier: Any = None) -> pd.DataFrame:
    """The kernel → category map of every run: one row per (run, category, kernel name).

    Columns :data:`CATEGORY_COLUMNS`: launch count and GPU time summed over the run's GPUs,
    the time per GPU, and how many GPUs ran the kernel. Sorted by run, category time, kernel
    time. Runs without a ``kernels`` table contribute no rows.
    """
    frames = []
    for label, res in runs:
        if "kernels" not in res.table_names:
            continue
        k = res.table("kernels")
        if not len(k):
            continue
        if classifier is not None:
            kinds = k["kind"].astype(str).to_numpy() if "kind" in k.columns else np.full(len(k), "kernel", object)
            cats = (
                k["category"].astype(str).to_numpy() if "category" in k.columns else np.full(len(k), "compute", object)
            )
            cat = _classify(classifier, k["name"].astype(str).to_numpy(object), kinds, cats)
        else:
            col = "class" if "class" in k.columns else "category"
            cat = k[col].astype(str).to_numpy()
        g = (
            k.assign(_cat=cat, _name=k["name"].astype(str))
            .groupby(["_cat", "_name"], sort=False)
            .agg(count=("count", "sum"), total_ns=("total_ns", "sum"), gpus=("total_ns", "size"))
            .reset_index()
        )
        g = g.rename(columns={"_cat": "category", "_name": "name"})
        g.insert(0, "run", label)
        g["per_gpu_ns"] = np.rint(g["total_ns"] / max(n_parts(res), 1)).astype(np.int64)
        g["_cat_total"] = g.groupby("category")["total_ns"].transform("sum")
        frames.append(
            g.sort_values(["_cat_total", "category", "total_ns"], ascending=[False, True, False], kind="stable").drop(
                columns="_cat_total"
            )
        )
    if not frames:
        return empty_frame({c: object if c in ("run", "category", "name") else np.int64 for c in CATEGORY_COLUMNS})
    out = pd.concat(frames, ignore_index=True)
    return out[list(CATEGORY_COLUMNS)].astype({"count": np.int64, "total_ns": np.int64, "gpus": np.int64})


def _classify(classifier: Any, names: np.ndarray, kinds: np.ndarray, cats: np.ndarray) -> np.ndarray:
    """Class of every row: each distinct (name, kind, category) is classified once, then broadcast."""
    frame = pd.DataFrame({"n": names, "k": np.asarray(kinds, dtype=object), "c": np.asarray(cats, dtype=object)})
    codes, uniq = pd.MultiIndex.from_frame(frame).factorize()
    labels = classifier.classify(
        list(uniq.get_level_values(0)), list(uniq.get_level_values(1)), list(uniq.get_level_values(2))
    )
    return np.asarray(labels, dtype=object)[codes]


def category_csv(runs: Sequence[tuple[str, Results]], classifier: Any = None) -> str:
    """:func:`category_table` as CSV text (the comparison tools' ``result.csv``; formula cells neutralised)."""
    return to_csv(category_table(runs, classifier))


def _breakdown_means(res: Results) -> dict[str, float] | None:
    if "breakdown" not in res.table_names:
        return None
    bd = res.table("breakdown")
    if not len(bd):
        return None
    out = {lab: float(bd[col].mean()) for lab, col in BREAKDOWN_PARTS if col in bd.columns}
    out["busy"] = (
        float(bd["busy_ns"].mean())
        if "busy_ns" in bd.columns
        else float(sum(out.get(k, 0.0) for k in ("computation", "exposed comm", "exposed memcpy")))
    )
    out["total"] = float(bd["total_ns"].mean())
    return out


def compare(
    runs: Sequence[tuple[str, Results]],
    *,
    wall_time_s: Mapping[str, float] | None = None,
    classifier: Any = None,
    title: str | None = None,
    max_categories: int = MAX_CATEGORIES,
) -> str:
    """The comparison page of several runs, as one self-contained HTML string.

    Parameters
    ----------
    runs
        ``(label, results)`` per run, in display order (the first is the baseline of the
        kernel differences).
    wall_time_s
        ``{label: seconds}``: each run's elapsed time measured without the profiler; adds the
        ``non-GPU`` segments.
    classifier
        A :class:`~dtrace.knowledge.classify.Classifier` applied to every run's kernel names (default:
        each run's own classes).
    title
        Page title.
    max_categories
        Categories drawn separately; the rest are pooled.
    """
    walls = {k: float(v) for k, v in (wall_time_s or {}).items()}
    unknown = sorted(set(walls) - {lab for lab, _ in runs})
    if unknown:
        from ..errors import UsageError

        raise UsageError(
            f"wall time given for unknown run(s) {', '.join(unknown)}; runs: {', '.join(lab for lab, _ in runs)}"
        )
    labels = [lab for lab, _ in runs]
    sections = [
        ("runs", "Runs", _sec_runs(runs, walls)),
        ("breakdown", "GPU time breakdown per run", _sec_breakdown(runs, walls)),
        ("categories", "GPU time by category per run", _sec_categories(runs, walls, classifier, max_categories)),
        ("differences", "Biggest kernel differences", _sec_diff(runs)),
        ("mapping", "Kernel → category map", _sec_mapping(runs, classifier)),
    ]
    title = title or f"dtrace comparison: {' vs '.join(labels)}"
    sub = f"{len(runs)} runs · generated {time.strftime('%Y-%m-%d %H:%M')} by dtrace {__version__}"
    return page(title, sub, sections)


def _sec_runs(runs: Sequence[tuple[str, Results]], walls: Mapping[str, float]) -> str:
    rows = []
    for label, res in runs:
        inputs = res.record.inputs
        bm = _breakdown_means(res)
        rows.append(
            {
                "run": label,
                "path": str(res.path or "(in memory)"),
                "gpus": n_parts(res),
                "failed": sum(1 for i in inputs if i.status == "error"),
                "timeline": bm["total"] if bm else np.nan,
                "busy": bm["busy"] if bm else np.nan,
                "wall": walls[label] * 1e9 if label in walls else np.nan,
            }
        )
    df = pd.DataFrame(rows)
    df["non_gpu"] = (df["wall"] - df["busy"]).clip(lower=0)
    html = [
        note(
            "Values per GPU (mean over the run's (rank, device) parts). Wall time: the run's elapsed time "
            "without the profiler, when given (--wall-time LABEL=SECONDS)."
        )
    ]
    html.append(
        table(
            df,
            [
                ("run", "run", "text"),
                ("path", "results", "text"),
                ("gpus", "GPUs", "num"),
                ("failed", "failed inputs", "num"),
                ("timeline", "GPU timeline / GPU", "time"),
                ("busy", "GPU busy / GPU", "time"),
                ("wall", "wall time", "time"),
                ("non_gpu", "non-GPU (wall − busy)", "time"),
            ],
        )
    )
    return "".join(html)


def _sec_breakdown(runs: Sequence[tuple[str, Results]], walls: Mapping[str, float]) -> str:
    labels: list[str] = []
    missing: list[str] = []
    series: dict[str, list[float]] = {lab: [] for lab, _ in BREAKDOWN_PARTS}
    series["non-GPU"] = []
    clamped = []
    for label, res in runs:
        bm = _breakdown_means(res)
        if bm is None:
            missing.append(label)
            continue
        labels.append(label)
        for lab, _ in BREAKDOWN_PARTS[:3]:
            series[lab].append(bm.get(lab, 0.0))
        if label in walls:
            rest = walls[label] * 1e9 - bm["busy"]
            if rest < 0:
                clamped.append(label)
            series["idle"].append(0.0)
            series["non-GPU"].append(max(rest, 0.0))
        else:
            series["idle"].append(bm.get("idle", 0.0))
            series["non-GPU"].append(0.0)
    html = []
    if missing:
        html.append(na("breakdown", f"table breakdown absent in run(s) {', '.join(missing)}"))
    if not labels:
        return "".join(html)
    if not any(series["non-GPU"]):
        series.pop("non-GPU")
    html.append(
        note(
            "Mean per GPU. With a wall time, non-GPU = wall − GPU busy time replaces the profiled idle "
            "time; without one, idle is the idle time inside the profiled GPU timeline."
        )
    )
    if clamped:
        html.append(note(f"GPU busy time exceeds the given wall time for {', '.join(clamped)}: non-GPU shown as 0."))
    html.append(ch.stacked_hbars("compare-breakdown", labels, series, ch.BREAKDOWN_COLORS, label_width=170))
    return "".join(html)


def _sec_categories(
    runs: Sequence[tuple[str, Results]], walls: Mapping[str, float], classifier: Any, max_categories: int
) -> str:
    cat = category_table(runs, classifier)
    missing = [lab for lab, res in runs if "kernels" not in res.table_names]
    html = []
    if missing:
        html.append(na("kernels", f"table kernels absent in run(s) {', '.join(missing)}"))
    if not len(cat):
        return "".join(html) or na("kernels")
    per = cat.groupby(["run", "category"], sort=False)["per_gpu_ns"].sum().unstack(fill_value=0)
    order = per.sum(axis=0).sort_values(ascending=False).index.tolist()
    labels = [lab for lab, _ in runs if lab in per.index]
    per = per.reindex(labels)
    series = _top_categories(per, order, max_categories)
    # the colour each class has in every report; non-GPU keeps its own
    colors = ch.class_colors(order + ["(other categories)"], avoid=[ch.BREAKDOWN_COLORS["non-GPU"]])
    clamped = []
    if any(lab in walls for lab in labels):
        rem = _non_gpu(runs, walls, labels, per)
        clamped = [lab for lab, r in zip(labels, rem) if r < 0]
        series["non-GPU"] = np.clip(rem, 0.0, None)
        colors["non-GPU"] = ch.BREAKDOWN_COLORS["non-GPU"]
    src = "the given class map" if classifier is not None else "each run's kernel classes"
    html.append(
        note(
            f"GPU kernel time per category, mean per GPU (categories from {src}; the same categories "
            "for every run). non-GPU = wall time − GPU busy time, when a wall time is given (as in the "
            "runs table and the breakdown; kernels overlapping on several streams count fully in their "
            "categories, so a bar may be longer than the wall time)."
        )
    )
    if clamped:
        html.append(note(f"GPU busy time exceeds the wall time for {', '.join(clamped)}: non-GPU shown as 0."))
    html.append(ch.stacked_hbars("compare-categories", labels, series, colors, label_width=170))
    html.append("<h3>Data</h3>")
    html.append(_category_data(series, labels))
    return "".join(html)


def _top_categories(per: pd.DataFrame, order: list, max_categories: int) -> dict[str, Any]:
    """Per category (``order``: most time first), each run's time; past ``max_categories`` the
    rest summed as ``(other categories)``."""
    top, rest = order[:max_categories], order[max_categories:]
    series = {c: per[c].to_numpy(np.float64) for c in top}
    if rest:
        series["(other categories)"] = per[rest].sum(axis=1).to_numpy(np.float64)
    return series


def _non_gpu(
    runs: Sequence[tuple[str, Results]], walls: Mapping[str, float], labels: list[str], per: pd.DataFrame
) -> np.ndarray:
    """Per run, wall time − GPU busy time (0 without a wall time), the same as in the runs table
    and the breakdown; the busy time is the kernel time for a run without breakdown."""
    busy = dict(zip(labels, per.sum(axis=1).to_numpy(np.float64)))
    for lab, res in runs:
        bm = _breakdown_means(res)
        if bm is not None and lab in busy:
            busy[lab] = bm["busy"]
    return np.array([walls[lab] * 1e9 - busy[lab] if lab in walls else 0.0 for lab in labels])


def _category_data(series: Mapping[str, np.ndarray], labels: list[str]) -> str:
    """The bars' data: a row per category, a column per run."""
    data = pd.DataFrame({"category": list(series)})
    for i, lab in enumerate(labels):
        data[lab] = [float(series[c][i]) for c in series]
    return table(data, [("category", "category", "text"), *((lab, lab, "time") for lab in labels)])


def _sec_diff(runs: Sequence[tuple[str, Results]]) -> str:
    if len(runs) < 2:
        return na("kernels", "only one run given")
    base_label, base = runs[0]
    html = []
    for label, res in runs[1:]:
        d = diff_runs(base, res, levels=("kernel",))
        html.append(f"<h3>{escape(label)} vs {escape(base_label)}</h3>")
        if not len(d):
            html.append(na("kernels", f"table kernels absent in {base_label} or {label}"))
            continue
        d = d.head(15)
        html.append(
            table(
                d,
                [
                    ("key", "kernel", "name"),
                    ("presence", "in", "text"),
                    ("time_a_ns", f"{base_label} / GPU", "time"),
                    ("time_b_ns", f"{label} / GPU", "time"),
                    ("time_delta_ns", "Δ time", "time"),
                    ("time_ratio", "ratio", "ratio"),
                    ("count_delta", "Δ launches", "num"),
                ],
            )
        )
    return note("Per GPU, sorted by the absolute time difference (dtrace diff gives every level).") + "".join(html)


def _sec_mapping(runs: Sequence[tuple[str, Results]], classifier: Any) -> str:
    cat = category_table(runs, classifier)
    if not len(cat):
        return na("kernels")
    html = [
        note(
            "Which kernels make up each category (the full map: --category-csv FILE). Top 60 rows by GPU time per GPU."
        )
    ]
    top = cat.sort_values("per_gpu_ns", ascending=False, kind="stable").head(60)
    html.append(
        table(
            top,
            [
                ("run", "run", "text"),
                ("category", "category", "text"),
                ("name", "kernel", "name"),
                ("count", "launches", "num"),
                ("per_gpu_ns", "time / GPU", "time"),
                ("gpus", "GPUs", "num"),
            ],
        )
    )
    return "".join(html)

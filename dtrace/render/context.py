"""What every report section needs: the results, the GPUs, their labels, flagged stragglers,
and how a per-GPU bar chart picks its GPUs when there are too many to draw."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ..results import Results
from .page import na
from .text import flags

MAX_BARS = 64


class Context:
    """The results plus what every section needs: GPU keys, labels, flagged stragglers, and the
    exported timeline the report links (``timeline``: its path relative to the report, or None)."""

    def __init__(self, results: Results, max_bars: int = MAX_BARS, timeline: str | None = None) -> None:
        self.results = results
        self.max_bars = max(int(max_bars), 4)
        self.timeline = timeline
        self.names = set(results.table_names)
        self._cache: dict[str, pd.DataFrame] = {}
        self.parts = self._parts()
        self.multi_device = bool(len(self.parts)) and bool(self.parts.duplicated("rank").any())
        self.flagged = self._flagged()

    def get(self, name: str, need: Sequence[str] = ()) -> tuple[pd.DataFrame | None, str]:
        """``(frame, "")`` or ``(None, the notice to show)``."""
        if name not in self.names:
            return None, na(name)
        if name not in self._cache:
            self._cache[name] = self.results.table(name)
        df = self._cache[name]
        missing = [c for c in need if c not in df.columns]
        if missing:
            return None, na(name, f"table {name} lacks column(s) {', '.join(missing)}")
        if not len(df):
            why = self.results.record.absent_tables.get(name)
            return None, na(name, f"table {name} is empty" + (f": {why}" if why else ""))
        return df, ""

    def _parts(self) -> pd.DataFrame:
        for name in ("breakdown", "kernels", "steps", "classes", "gaps", "ops", "ranks"):
            if name in self.names:
                t = self.results.table(name)
                if {"rank", "device"} <= set(t.columns) and len(t):
                    return (
                        t[["rank", "device"]]
                        .drop_duplicates()
                        .sort_values(["rank", "device"])
                        .reset_index(drop=True)
                        .astype(np.int64)
                    )
        return pd.DataFrame({"rank": np.array([], np.int64), "device": np.array([], np.int64)})

    def _flagged(self) -> set[int]:
        df, _ = self.get("stragglers", ("rank", "flagged"))
        if df is None:
            return set()
        return set(df.loc[flags(df["flagged"]), "rank"].astype(int).tolist())

    @property
    def colors(self) -> dict[str, str]:
        """One colour per kernel class (and category) for every chart of the report
        (:func:`~dtrace.render.charts.class_colors`), names ranked by their GPU time."""
        if "_colors" not in self.__dict__:
            from ..explore.diff import class_source
            from .charts import class_colors

            names: list[str] = []
            src = class_source(self.results)
            if src is not None and len(src[0]):
                tot = src[0].groupby(src[0]["class"].astype(str))["total_ns"].sum()
                names += tot.sort_values(ascending=False, kind="stable").index.tolist()
            k, _ = self.get("kernels", ("total_ns",))
            for col in ("class", "category"):
                if k is not None and col in k.columns:
                    tot = k.groupby(k[col].astype(str))["total_ns"].sum()
                    names += tot.sort_values(ascending=False, kind="stable").index.tolist()
            self._colors = class_colors(names)
        return self._colors

    @property
    def n_parts(self) -> int:
        return max(len(self.parts), 1)

    def label(self, rank: int, device: int | None = None) -> str:
        if self.multi_device and device is not None:
            return f"rank {int(rank)} · dev {int(device)}"
        return f"rank {int(rank)}"

    def labels(self, df: pd.DataFrame) -> list[str]:
        dev = df["device"].to_numpy() if "device" in df.columns else [None] * len(df)
        return [self.label(r, d) for r, d in zip(df["rank"].to_numpy(), dev)]

    def select(
        self, metric: np.ndarray, ranks: np.ndarray, what: str, *, high: str = "highest", low: str = "lowest"
    ) -> tuple[np.ndarray, str]:
        """Rows to draw in a per-GPU bar chart, and a note saying how they were chosen.

        All rows (in the given order) up to ``max_bars``; else the flagged stragglers, the
        rows with the highest and lowest ``metric`` and the median row, sorted by ``metric``.
        ``high`` and ``low`` name those ends in the note (``metric`` may be a negated value:
        the highest of ``-wait`` are the GPUs that wait least).
        """
        n = len(metric)
        if n <= self.max_bars:
            return np.arange(n), ""
        order = np.argsort(-np.asarray(metric, dtype=np.float64), kind="stable")
        flagged = [int(i) for i in order if int(ranks[i]) in self.flagged][: self.max_bars // 4]
        fl = set(flagged)
        rest = [int(i) for i in order if int(i) not in fl]
        median = rest[len(rest) // 2]
        rest = [i for i in rest if i != median]
        budget = self.max_bars - len(flagged) - 1
        top = budget // 2
        chosen = [*flagged, *rest[:top], median, *rest[len(rest) - (budget - top) :]]
        chosen.sort(key=lambda i: (-metric[i], i))
        parts = [f"the {top} {high}", "the median", f"the {budget - top} {low}"]
        if flagged:
            parts.insert(0, f"{len(flagged)} flagged straggler(s)")
        return np.array(chosen, dtype=np.int64), (
            f"Showing {len(chosen)} of {n} GPUs by {what}: "
            + ", ".join(parts)
            + "; the box plots below cover all of them."
        )

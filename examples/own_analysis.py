"""Your own analyses on every rank: a per-partition table dtrace runs, caches and writes for you,
and the events of all ranks as one Dask DataFrame.

Run: python examples/own_analysis.py [OUT]

1. ``long_kernels`` is an analysis with the same interface as the built-in ones: a module-level
   function of a :class:`dtrace.Batch` (any number of (rank, device) parts, computed in one
   vectorised pass) with declared output columns. ``dtrace.analyze(..., analyses=[...])`` runs it
   on every partition, stores its result with the others (a re-run with the same code, inputs
   and settings reuses it) and writes ``OUT/long_kernels.parquet``.
2. ``dtrace.events(OUT)`` opens the cached events of the analysis as a Dask DataFrame indexed
   by rank; ``map_partitions`` and ``groupby`` run on it with any Dask scheduler.
"""

import os
import sys

import numpy as np
import pandas as pd

import dtrace

HERE = os.path.dirname(os.path.abspath(__file__))
LONG_NS = 1_000_000  # 1 ms


def long_kernels(batch: dtrace.Batch) -> pd.DataFrame:
    """Per (rank, device): kernels longer than 1 ms, their time, and the longest one's name."""
    g = batch.gpu
    dur = (g["end_ns"] - g["start_ns"]).to_numpy()
    part = g["part"].to_numpy()
    long = (g["kind"] == "kernel").to_numpy() & (dur > LONG_NS)
    n = batch.n_parts
    count = np.bincount(part[long], minlength=n)
    total = np.bincount(part[long], weights=dur[long], minlength=n).astype(np.int64)
    # the longest kernel of each part: sort by (part, duration), take each part's last row
    order = np.lexsort((dur, part))
    last = order[np.r_[np.flatnonzero(np.diff(part[order])), len(order) - 1]] if len(order) else order
    longest = np.full(n, "", dtype=object)
    longest[part[last]] = g["name"].astype(str).to_numpy()[last]
    return pd.DataFrame(
        {**batch.keys(np.arange(n)), "long_kernels": count, "long_ns": total, "longest_kernel": longest}
    )


LONG_KERNELS = dtrace.Analysis(
    "long_kernels",
    long_kernels,
    {"rank": "int32", "device": "int32", "long_kernels": "int64", "long_ns": "int64", "longest_kernel": "object"},
)


def main(out: str) -> None:
    res = dtrace.analyze(os.path.join(HERE, "traces"), out, analyses=[LONG_KERNELS])
    print(res.long_kernels.to_string(index=False))

    ev = dtrace.events(out)  # lazy: one Dask partition per dtrace partition, divisions by rank
    print(
        f"\nevents: {ev.npartitions} partition(s), ranks {ev.divisions[0]}..{ev.divisions[-1]}, "
        f"columns {list(ev.columns)}"
    )
    # a groupby across every rank: host runtime calls and their total time per rank
    runtime = ev[ev.kind == "runtime"]
    per_rank = (
        runtime.assign(dur_ns=runtime.end_ns - runtime.start_ns).groupby("rank").dur_ns.agg(["count", "sum"]).compute()
    )
    print("\nruntime calls per rank:\n" + per_rank.to_string())

    # your own per-partition function: the busiest GPU stream of each rank
    def busiest(df: pd.DataFrame) -> pd.DataFrame:
        gpu = df[df.is_gpu]
        busy = (gpu.end_ns - gpu.start_ns).groupby([gpu.index, gpu.stream]).sum()
        top = busy.groupby(level=0).idxmax()
        return pd.DataFrame(
            {"stream": [s for _, s in top], "busy_ns": busy[top].to_numpy()}, index=pd.Index(top.index, name="rank")
        )

    meta = pd.DataFrame(
        {"stream": pd.Series([], dtype="int64"), "busy_ns": pd.Series([], dtype="int64")},
        index=pd.Index([], dtype="int32", name="rank"),
    )
    print("\nbusiest stream per rank:\n" + ev.map_partitions(busiest, meta=meta).compute().to_string())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "results"))

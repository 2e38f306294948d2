"""HTA 0.5.0's launch statistics and launch queues on the shared traces → reference CSVs for the tests.

Run with HTA's own interpreter (the HTA venv holds only HTA and its dependencies; see
``bench/README.md``)::

    HTA_DISABLE_NS_ROUNDING=1 /work/venv-hta/bin/python bench/hta_launch_stats.py tests/data/hta

It imports nothing from dtrace. Each trace is copied alone into a temporary folder (HTA reads a
folder, one file per rank) and loaded with ``TraceAnalysis(trace_dir=...,
include_last_profiler_step=True)``; ``HTA_DISABLE_NS_ROUNDING=1`` keeps HTA from rounding
float-µs timestamps to whole µs. What it writes into OUTDIR (CI has no HTA; the tests read
these files):

``launches.csv.gz``
    ``get_cuda_kernel_launch_stats(ranks, visualize=False)``: one row per (launch call, GPU
    event) pair HTA joins — ``trace``, ``rank``, ``correlation``, ``cpu_duration``,
    ``gpu_duration``, ``launch_delay`` (float µs exactly as HTA returns them; ``launch_delay`` is
    clipped at 0 by HTA).
``queue_summary.csv``
    ``get_queue_length_summary(ranks)``: per (trace, rank, stream) the ``describe()`` of the
    queue length at each change point (``count``, ``mean``, ``std``, ``min``, ``25%``,
    ``50%``, ``75%``, ``max``).
``queue_blocked.csv``
    ``get_time_spent_blocked_on_full_queue(get_queue_length_time_series(ranks),
    max_queue_length=LIMIT)`` for LIMIT in :data:`LIMITS` (``limit``, ``rank``, ``stream``,
    ``duration_at_max_queue_length`` in µs, ``relative_duration_at_max_queue_length``).
    HTA reports one stream per rank (the last stream with blocked time it visits).
``queue_series.csv.gz``
    ``get_queue_length_time_series(ranks)``: ``trace``, ``rank``, ``stream``, ``ts`` (µs,
    relative to HTA's zero), ``queue_length`` — the change points, for tracing differences.
``meta.json``
    the HTA version, the traces and HTA's time zero per trace (``min_ts`` in µs, to place
    ``ts`` back on the trace's clock).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.environ.get("DTRACE_SHARED", os.path.join(ROOT, "..", "shared"))
K = os.path.join(SHARED, "traces", "kineto")

#: name → trace files (one run of HTA each; several files are the ranks of one job)
TRACES = {
    "hta-2rank": [os.path.join(K, "hta-2rank", f"sampled_rank-{r}.json.gz") for r in (0, 1)],
    "a100_nccl_collectives": [os.path.join(K, "single", "a100_nccl_collectives.json.gz")],
    "a100_5streams_sendrecv_rank0": [os.path.join(K, "single", "a100_5streams_sendrecv_rank0.json.gz")],
    "v100_ns_resolution_rank-0": [os.path.join(K, "single", "v100_ns_resolution_rank-0.json.gz")],
    "h100_owlv2": [os.path.join(K, "single", "h100_owlv2.json.gz")],
    "b200_vllm_eager_rank0": [os.path.join(K, "single", "b200_vllm_eager_rank0.json.gz")],
    "mi300_resnet_rccl_rank0": [os.path.join(K, "single", "mi300_resnet_rccl_rank0.json.gz")],
    "h200_host_rank0": [os.path.join(ROOT, "tests", "data", "h200", "host_rank0.pt.trace.json.gz")],
    "h200_queue_full_rank0": [os.path.join(ROOT, "tests", "data", "h200", "queue_full_rank0.pt.trace.json.gz")],
}
#: launch queue limits HTA's blocked time is computed for (1024: HTA's CUDA_MAX_LAUNCH_QUEUE_PER_STREAM;
#: 1022: where CUDA's queue is full as HTA counts it)
LIMITS = (1024, 1022, 1000, 64)


def run_one(name: str, files: list[str]) -> dict:
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as d:
        for f in files:
            shutil.copy(f, os.path.join(d, os.path.basename(f)))
        a = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
    ranks = sorted(a.t.get_ranks())
    out: dict = {"launches": [], "summary": [], "blocked": [], "series": []}
    stats = a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    for rank, df in stats.items():
        trace = a.t.get_trace(rank)
        gpu = trace.loc[trace["stream"].ne(-1), ["correlation", "stream"]].drop_duplicates("correlation")
        df = df.merge(gpu, on="correlation", how="left")  # the GPU event's stream, from HTA's own frame
        for r in df.itertuples(index=False):
            out["launches"].append(
                [
                    name,
                    rank,
                    int(r.correlation),
                    int(r.stream),
                    repr(float(r.cpu_duration)),
                    repr(float(r.gpu_duration)),
                    repr(float(r.launch_delay)),
                ]
            )
    summ = a.get_queue_length_summary(ranks=ranks)
    if summ is not None:
        summ = summ.reset_index()
        summ.columns = ["rank", "stream", *[c[1] for c in summ.columns[2:]]]
        for r in summ.to_dict("records"):
            out["summary"].append([name, int(r["rank"]), int(r["stream"])] + [repr(float(r[c])) for c in SUMMARY])
    series = a.get_queue_length_time_series(ranks=ranks)
    for rank, df in series.items():
        for r in df.itertuples(index=False):
            out["series"].append([name, rank, int(r.stream), repr(float(r.ts)), int(r.queue_length)])
    for limit in LIMITS:
        blocked = a.get_time_spent_blocked_on_full_queue(a.get_queue_length_time_series(ranks=ranks), limit)
        for r in blocked.to_dict("records"):
            out["blocked"].append(
                [
                    name,
                    limit,
                    int(r["rank"]),
                    int(r["stream"]),
                    repr(float(r["duration_at_max_queue_length"])),
                    repr(float(r["relative_duration_at_max_queue_length"])),
                ]
            )
    out["min_ts"] = float(a.t.min_ts)
    return out


SUMMARY = ["count", "mean", "std", "min", "25%", "50%", "75%", "max"]


def _csv(path: str, header: list[str], rows: list[list]) -> None:
    text = ",".join(header) + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows)
    if path.endswith(".gz"):
        with gzip.GzipFile(path, "wb", mtime=0) as f:
            f.write(text.encode())
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main() -> None:
    if os.environ.get("HTA_DISABLE_NS_ROUNDING") != "1":
        sys.exit("set HTA_DISABLE_NS_ROUNDING=1 (HTA would round float-µs timestamps to whole µs)")
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "hta")
    os.makedirs(outdir, exist_ok=True)
    logging.disable(logging.WARNING)
    import hta

    launches, summary, blocked, series, meta = [], [], [], [], {}
    for name, files in TRACES.items():
        if not all(os.path.exists(f) for f in files):
            print(f"skip {name}: trace not found", file=sys.stderr)
            continue
        r = run_one(name, files)
        launches += r["launches"]
        summary += r["summary"]
        blocked += r["blocked"]
        series += r["series"]
        meta[name] = {"files": [os.path.relpath(f, ROOT) for f in files], "min_ts_us": repr(r["min_ts"])}
        print(f"{name}: {len(r['launches'])} launches, {len(r['summary'])} streams", file=sys.stderr)
    _csv(
        os.path.join(outdir, "launches.csv.gz"),
        ["trace", "rank", "correlation", "stream", "cpu_duration", "gpu_duration", "launch_delay"],
        launches,
    )
    _csv(os.path.join(outdir, "queue_summary.csv"), ["trace", "rank", "stream", *SUMMARY], summary)
    _csv(
        os.path.join(outdir, "queue_blocked.csv"),
        ["trace", "limit", "rank", "stream", "duration_at_max_queue_length", "relative_duration_at_max_queue_length"],
        blocked,
    )
    _csv(os.path.join(outdir, "queue_series.csv.gz"), ["trace", "rank", "stream", "ts", "queue_length"], series)
    with open(os.path.join(outdir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "hta": getattr(hta, "__version__", "0.5.0"),
                "HTA_DISABLE_NS_ROUNDING": "1",
                "include_last_profiler_step": True,
                "limits": list(LIMITS),
                "traces": meta,
            },
            f,
            indent=1,
        )
        f.write("\n")


if __name__ == "__main__":
    main()

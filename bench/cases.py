"""One benchmark case, run in a fresh interpreter by ``bench/run.py``.

``python bench/cases.py CASE 'JSON-ARGS'`` does the work of one case and prints one JSON line
(the last line of stdout): ``seconds`` (the timed work, imports excluded), ``import_s`` and a
few result figures (``check``) so the report can show that every tool analysed the same
events. The parent measures wall time, CPU time and memory from outside.

Cases:

- ``dtrace``: :func:`dtrace.analyze` on the inputs, in-process (``scheduler="sync"``) or on a
  ``LocalCluster`` of ``workers`` processes started *before* the clock starts (its start-up
  time is reported separately as ``cluster_s``); ``reuse_results`` is passed on when given;
- ``floor``: plain ``json.load`` + pandas, the way everyone starts: load the document, build a
  DataFrame of the events, sum the union of the GPU intervals.

HTA runs in its own virtual environment through ``bench/peer_hta.py``.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _one_core() -> None:
    """Keep the libraries' thread pools to one thread (the "one core" cases)."""
    import pyarrow

    pyarrow.set_cpu_count(1)
    pyarrow.set_io_thread_count(1)


def _warm_worker() -> None:
    import dtrace.analyses  # noqa: F401
    import dtrace.execution.tasks  # noqa: F401
    import dtrace.readers.kineto  # noqa: F401


def _task_totals(data: list[dict]) -> dict[str, float]:
    """Seconds of task compute per function (``ingest_file``, ``analyze_partition``), task count, workers."""
    out: dict[str, float] = {"n": float(len(data)), "workers": float(len({d["worker"] for d in data}))}
    for d in data:
        fn = str(d["key"]).split("-")[0].strip("('\"")
        for ss in d["startstops"]:
            if ss["action"] == "compute":
                out[fn] = out.get(fn, 0.0) + ss["stop"] - ss["start"]
    return out


def case_dtrace(a: dict) -> dict:
    t = time.perf_counter()
    import distributed  # noqa: F401 - dask imports it even for the sync scheduler: count it as an import

    if a.get("package"):  # another version of dtrace, importable under another name (bench/ingest.py)
        import importlib

        sys.path.insert(0, a["package_root"])
        dtrace = importlib.import_module(a["package"])
        importlib.import_module(a["package"] + ".api")
    else:
        import dtrace
        import dtrace.api  # noqa: F401 - `import dtrace` is lazy: count the pipeline's imports as imports, not work

    imp = time.perf_counter() - t
    if a.get("one_core"):
        _one_core()
    cluster = None
    scheduler = "sync"
    cluster_s = 0.0
    if a.get("workers"):
        import logging

        from distributed import Client, LocalCluster

        t = time.perf_counter()
        cluster = LocalCluster(
            n_workers=a["workers"],
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        scheduler = cluster.scheduler_address
        with Client(cluster) as client:  # start-up includes importing dtrace in every worker
            client.run(_warm_worker)
        cluster_s = time.perf_counter() - t
    tasks: dict[str, float] = {}
    try:
        extra = {"reuse_results": a["reuse_results"]} if "reuse_results" in a else {}
        if cluster is None:
            t, c = time.perf_counter(), time.process_time()
            r = dtrace.analyze(a["inputs"], a["out"], cache=a["cache"], scheduler=scheduler, **extra)
            seconds, cpu = time.perf_counter() - t, time.process_time() - c
        else:
            from distributed import get_task_stream

            with Client(cluster) as client, get_task_stream(client) as stream:
                t, c = time.perf_counter(), time.process_time()
                r = dtrace.analyze(a["inputs"], a["out"], cache=a["cache"], scheduler=scheduler, **extra)
                seconds, cpu = time.perf_counter() - t, time.process_time() - c
            tasks = _task_totals(stream.data)
    finally:
        if cluster is not None:
            cluster.close()
    bd = r.breakdown
    failed = [i["error"] for i in r.manifest["inputs"] if i["status"] != "ok"]
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "import_s": imp,
        "cluster_s": cluster_s,
        "tasks": tasks,
        "cached": all(i.get("cached") for i in r.manifest["inputs"]),
        "failed": failed[:3],
        "check": {
            "parts": int(len(bd)),
            "gpu_events": int(bd["gpu_events"].sum()),
            "computation_us": float(bd["computation_ns"].sum()) / 1e3,
            "busy_us": float(bd["busy_ns"].sum()) / 1e3,
            "idle_us": float(bd["idle_ns"].sum()) / 1e3,
            "total_us": float(bd["total_ns"].sum()) / 1e3,
        },
    }


def case_floor(a: dict) -> dict:
    t = time.perf_counter()
    import gzip

    import numpy as np
    import pandas as pd

    imp = time.perf_counter() - t
    path = a["inputs"][0]
    t, c = time.perf_counter(), time.process_time()
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gz else open(path, "rb") as f:
        doc = json.load(f)
    df = pd.DataFrame(doc["traceEvents"])
    del doc
    gpu = df.loc[df["cat"].isin(["kernel", "gpu_memcpy", "gpu_memset"]), ["ts", "dur"]]
    s = gpu["ts"].to_numpy(np.float64)
    order = np.argsort(s, kind="stable")
    s = s[order]
    e = s + gpu["dur"].to_numpy(np.float64)[order]
    run = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run[:-1]]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    busy = float((run[last] - s[first]).sum())
    total = float(e.max() - s.min())
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "import_s": imp,
        "check": {"parts": 1, "gpu_events": int(len(gpu)), "busy_us": busy, "idle_us": total - busy, "total_us": total},
    }


def case_profile(a: dict) -> dict:
    """Where one ``dtrace.analyze`` (sync, one core) spends its time, phase by phase.

    Wraps the pipeline's functions with timers (a handful of calls, no per-event overhead):
    reading (bytes in + fingerprint, msgspec decoding, column extraction, the rest of the reader),
    the Parquet cache encoding and file writes, loading a part back, ``prepare``, each registered analysis, the
    conforming of its output, the reducers and writing the results.
    """
    import dataclasses

    import distributed  # noqa: F401

    import dtrace
    import dtrace.analyses as an
    import dtrace.api as api
    import dtrace.ingest.cache as cache
    import dtrace.readers._chrome as chrome
    import dtrace.readers._io as io_
    import dtrace.readers.kineto as kineto
    from dtrace.execution import tasks

    _one_core()
    times: dict[str, float] = {}

    def timed(key, func):
        def wrapper(*args, **kw):
            t = time.perf_counter()
            try:
                return func(*args, **kw)
            finally:
                times[key] = times.get(key, 0.0) + time.perf_counter() - t

        return wrapper

    io_.Content.readinto = timed("read: bytes in + fingerprint", io_.Content.readinto)
    chrome.ChromeTrace._decode_events = timed("read: msgspec decode", chrome.ChromeTrace._decode_events)
    kineto._add_chunk = timed("read: columns from structs", kineto._add_chunk)
    kineto.read_kineto = timed("read: total", kineto.read_kineto)
    cache.parquet_bytes = timed("cache: encode Parquet", cache.parquet_bytes)
    cache._atomic_write_bytes = timed("cache: write files", cache._atomic_write_bytes)
    cache.ingest = timed("ingest: total", cache.ingest)
    tasks.ingest = cache.ingest
    tasks.load_tables = timed("analyse: load Parquet → pandas", tasks.load_tables)
    tasks.prepare = timed("analyse: prepare", tasks.prepare)
    an.conform = timed("analyse: conform outputs", an.conform)
    an.ANALYSES[:] = [dataclasses.replace(x, func=timed(f"analysis: {x.table}", x.func)) for x in an.ANALYSES]
    api.run_reducers = timed("reduce (client)", api.run_reducers)
    api.write_results = timed("write results", api.write_results)
    extra = {"reuse_results": a["reuse_results"]} if "reuse_results" in a else {}
    t, c = time.perf_counter(), time.process_time()
    dtrace.analyze(a["inputs"], a["out"], cache=a["cache"], scheduler="sync", **extra)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    if "read: total" in times:
        known = sum(v for k, v in times.items() if k.startswith("read: ") and k != "read: total")
        times["read: rest (boundaries, table, checks)"] = times.pop("read: total") - known
    if "ingest: total" in times:
        times["ingest: rest"] = times.pop("ingest: total") - sum(
            v for k, v in times.items() if k.startswith(("read: ", "cache: "))
        )
    times["other (engine, planning, manifest)"] = seconds - sum(times.values())
    return {"seconds": seconds, "cpu_s": cpu, "phases": times}


def case_core(a: dict) -> dict:
    """dtrace doing what HTA's temporal breakdown does: parse (into the cache) + the breakdown.

    The same pipeline functions ``dtrace.analyze`` runs (ingest with its Parquet write and
    fingerprint, load, ``prepare``), but only the ``breakdown``, ``streams`` and ``steps`` analyses
    and no reducers or result files: a like-for-like comparison with HTA.
    """
    t = time.perf_counter()
    import dtrace.analyses as an
    from dtrace.execution.tasks import load_batch
    from dtrace.ingest.cache import ingest
    from dtrace.ingest.ranks import resolve_ranks
    from dtrace.options import Options

    imp = time.perf_counter() - t
    _one_core()
    t, c = time.perf_counter(), time.process_time()
    records = [ingest(p, a["cache"]) for p in a["inputs"]]
    if any(r.error for r in records):
        raise RuntimeError([r.error for r in records if r.error])
    opts = Options()
    batch = load_batch(resolve_ranks(records).specs, opts)  # every part in one batch, as analyze does
    tables = [an.run_analyses(batch, only={"breakdown", "streams", "steps"})]
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    bd = tables[0]["breakdown"]
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "import_s": imp,
        "check": {
            "parts": len(bd),
            "gpu_events": int(bd["gpu_events"].sum()),
            "computation_us": float(bd["computation_ns"].sum()) / 1e3,
            "busy_us": float(bd["busy_ns"].sum()) / 1e3,
            "idle_us": float(bd["idle_ns"].sum()) / 1e3,
            "total_us": float(bd["total_ns"].sum()) / 1e3,
        },
    }


CASES = {"dtrace": case_dtrace, "floor": case_floor, "profile": case_profile, "core": case_core}

if __name__ == "__main__":
    name, args = sys.argv[1], json.loads(sys.argv[2])
    out = CASES[name](args)
    sys.stdout.flush()
    print(json.dumps(out), flush=True)
    os._exit(0)  # skip interpreter teardown (garbage of the big frames) in the timing of wall

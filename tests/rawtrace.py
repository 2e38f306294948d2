"""Independent access to raw Kineto traces for tests: plain json/gzip + pandas, no dtrace code.

Numbers asserted in the kernel, class, gap and memory-operation tests are computed from these
frames with plain pandas/numpy, never with the code under test.
"""

from __future__ import annotations

import atexit
import gzip
import json
import shutil
import tempfile
from functools import lru_cache

import numpy as np
import pandas as pd

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


@lru_cache(maxsize=1)
def ingest_cache() -> str:
    """One dtrace ingest cache for the whole test session (each shared trace parsed once)."""
    d = tempfile.mkdtemp(prefix="dtrace-test-cache-")
    atexit.register(shutil.rmtree, d, True)
    return d


def to_ns(us: np.ndarray) -> np.ndarray:
    """SPEC §3 conversion of float µs: whole µs exact, the fraction rounded half-even."""
    us = np.asarray(us, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


@lru_cache(maxsize=8)
def load(path: str) -> dict:
    """``gpu`` (one row per GPU event), ``launch`` (correlation → launch call start) and
    ``steps`` (ProfilerStep#N host windows) frames of one Kineto trace, times in absolute ns."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    rows = []
    for e in ev:
        cat = (e.get("cat") or "").lower()
        if cat in GPU_CATS:
            a = e.get("args") or {}
            rows.append(
                (
                    GPU_CATS[cat],
                    e["name"],
                    e["ts"],
                    e["dur"],
                    int(a.get("stream", e.get("tid", -1))),
                    int(a.get("device", e.get("pid", -1))),
                    int(a.get("correlation", -1)),
                    a.get("bytes", -1),
                )
            )
    gpu = pd.DataFrame(rows, columns=["kind", "name", "ts", "dur", "stream", "device", "correlation", "bytes"])
    gpu["start_ns"] = to_ns(gpu["ts"].to_numpy()) + base
    gpu["end_ns"] = gpu["start_ns"] + to_ns(gpu["dur"].to_numpy())
    gpu["dur_ns"] = gpu["end_ns"] - gpu["start_ns"]
    rt = [
        (int((e.get("args") or {}).get("correlation", -1)), e["ts"], e["name"])
        for e in ev
        if (e.get("cat") or "").lower() in ("cuda_runtime", "cuda_driver", "runtime")
    ]
    launch = pd.DataFrame(rt, columns=["correlation", "ts", "name"])
    launch["start_ns"] = to_ns(launch["ts"].to_numpy()) + base
    launch = launch.loc[launch["correlation"] >= 0].drop_duplicates("correlation")
    st = [
        (int(e["name"].split("#")[1]), e["ts"], e["dur"])
        for e in ev
        if (e.get("cat") or "").lower() == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    steps = pd.DataFrame(st, columns=["step", "ts", "dur"])
    steps["start_ns"] = to_ns(steps["ts"].to_numpy()) + base
    steps["end_ns"] = steps["start_ns"] + to_ns(steps["dur"].to_numpy())
    steps = steps.sort_values("start_ns").drop_duplicates("step").reset_index(drop=True)
    idx = pd.Index(launch["correlation"]).get_indexer(gpu["correlation"])
    gpu["launch_ns"] = np.where(idx >= 0, launch["start_ns"].to_numpy()[np.maximum(idx, 0)], -1)
    return {"gpu": gpu, "launch": launch, "steps": steps, "base": base}


def step_of(gpu: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step of each GPU event: the ProfilerStep window containing its launch (else its start)."""
    t = np.where(gpu["launch_ns"].to_numpy() >= 0, gpu["launch_ns"].to_numpy(), gpu["start_ns"].to_numpy())
    out = np.full(len(gpu), -1, np.int64)
    for r in steps.itertuples(index=False):
        out[(t >= r.start_ns) & (t < r.end_ns)] = r.step
    return out


def gaps_by_loop(gpu: pd.DataFrame, kernel_wait_ns: int = 30_000) -> pd.DataFrame:
    """Every gap, computed the slow obvious way: per stream, walk the events in (start, end)
    order keeping the furthest end seen and the event that set it."""
    out = []
    for stream, f in gpu.groupby("stream"):
        f = f.sort_values(["start_ns", "end_ns"], kind="stable")
        busy_end, prev = None, None
        for r in f.itertuples(index=False):
            if busy_end is not None and r.start_ns > busy_end:
                gap = r.start_ns - busy_end
                if r.launch_ns < 0:
                    cause = "other"
                elif r.launch_ns > busy_end:
                    cause = "host_wait"
                elif gap < kernel_wait_ns:
                    cause = "kernel_wait"
                else:
                    cause = "other"
                out.append((stream, prev, r.name, gap, cause))
            if busy_end is None or r.end_ns >= busy_end:
                busy_end, prev = r.end_ns, r.name
    return pd.DataFrame(out, columns=["stream", "prev_name", "next_name", "gap_ns", "cause"])


def union_len(s, e) -> int:
    """Length of the union of intervals, by a plain sweep (independent of dtrace.vector.intervals)."""
    if not len(s):
        return 0
    o = np.argsort(s, kind="stable")
    s, e = np.asarray(s)[o], np.asarray(e)[o]
    total, cs, ce = 0, s[0], e[0]
    for a, b in zip(s[1:], e[1:]):
        if a > ce:
            total += ce - cs
            cs, ce = a, b
        else:
            ce = max(ce, b)
    return int(total + ce - cs)


def whole_ns(x) -> np.ndarray:
    """Float ns as the results tables hold them: whole ns, rounded half to even."""
    return np.rint(np.asarray(x, dtype=np.float64)).astype(np.int64)


def assert_whole_ns(actual, expected, err_msg: str = "") -> None:
    """``actual`` (int64 ns) is ``expected`` (a float computed here) rounded to whole ns; for
    values computed by another float algorithm (a standard deviation) within the rounding."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    np.testing.assert_allclose(a, e, rtol=0, atol=0.5 + 1e-6 * np.maximum(np.abs(e), 1).max(initial=1), err_msg=err_msg)

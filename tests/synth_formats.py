"""Small synthetic JAX traces and Nsight Systems SQLite reports (test fixtures, demos).

Each writer returns the ground truth it wrote (plain lists of dicts, times as written), so a
test can compute expected figures from the raw events independently of the readers.

- :func:`write_jax_trace`: one host, ``n_gpus`` GPU planes, in the classic layout (pid
  ``k+1`` = ``/device:GPU:k``, host pid 701, full args) or the newer ``trace_viewer@^`` layout
  (pid ``1001+k`` = ``"<host> /device:GPU:k"``, args stripped, launches linked by
  ``bind_id``). Every GPU runs ``steps`` iterations of a few kernels on two ``Stream #`` lines,
  one NCCL all-gather (``hlo_op`` ``all-gather-start.N``), a memcpy and a memset; the derived
  lines (``XLA Ops``, ``XLA Modules``) repeat the kernels and a ``Steps`` line spans each step.
- :func:`write_nsys_sqlite`: one report with one or more (process, device) pairs: kernels
  (NCCL all-reduce included), memcpys, a memset, runtime launches, NVTX push/pop ranges (an
  iteration tag around each step, a nested ``forward`` range, one range named through
  ``textId``, one mark), ``StringIds`` and the session start time. Tables and columns can be
  left out to imitate other nsys versions.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from typing import Any

import numpy as np

JAX_KERNELS = ("fusion_1", "gemm_fusion", "loop_reduce_fusion")
NSYS_KERNELS = ("void gemm_kernel<float>(float*, int)", "elementwise_kernel(float*)")
ITER_TAG = "TSL:XlaModule:#hlo_module=jit_train_step,program_id=7#"


def write_jax_trace(
    path: str,
    *,
    n_gpus: int = 2,
    layout: str = "classic",
    host: str = "host0",
    steps: int = 3,
    seed: int = 0,
    slow_gpu: int | None = None,
) -> dict[str, Any]:
    """Write a JAX ``*.trace.json.gz``; return ``{"gpu": {k: [events]}, "launches": n}``.

    Events in the truth are dicts with ``name``, ``stream``, ``ts``, ``dur`` (float µs),
    ``kind`` (``kernel``/``memcpy``/``memset``) and ``hlo_op``. ``slow_gpu`` makes that GPU's
    gemm kernels 3× longer.
    """
    if layout not in ("classic", "viewer"):
        raise ValueError("layout must be 'classic' or 'viewer'")
    rng = np.random.default_rng(seed)
    classic = layout == "classic"
    host_pid = 701 if classic else 1701
    ev: list[dict[str, Any]] = []
    ev.append(
        {
            "ph": "M",
            "name": "process_name",
            "pid": host_pid,
            "args": {"name": "/host:CPU" if classic else f"{host} /host:CPU"},
        }
    )
    ev.append({"ph": "M", "name": "thread_name", "pid": host_pid, "tid": 11, "args": {"name": "Host Threads/11"}})
    truth: dict[int, list[dict[str, Any]]] = {}
    corr = 100
    for k in range(n_gpus):
        pid = k + 1 if classic else 1001 + k
        ev.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "args": {"name": f"/device:GPU:{k}" if classic else f"{host} /device:GPU:{k}"},
            }
        )
        s0, s1 = 10 + 3 * k, 11 + 3 * k
        lines = {
            1: f"Stream #{s0}(Compute)",
            2: f"Stream #{s1}(MemcpyD2D)",
            3: f"XLA Ops - from #{s0}",
            4: f"XLA Modules - from #{s0}",
            5: "Steps",
        }
        for tid, name in lines.items():
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        gpu: list[dict[str, Any]] = []
        t = 1000.0 + 37.125 * k
        for step in range(steps):
            step_start = t
            # (name, stream, start, dur, kind, hlo_op): compute kernels back to back on the first
            # stream; on the second an all-gather overlapping them, then a memcpy and a memset
            seq = []
            for kn in JAX_KERNELS:
                d = float(np.round(rng.uniform(20, 80), 3)) * (3 if slow_gpu == k and "gemm" in kn else 1)
                ts = round(t + float(np.round(rng.uniform(1, 9), 3)), 3)
                seq.append((kn, s0, ts, d, "kernel", kn))
                t = ts + d
            ts = round(seq[0][2] + 2.0, 3)
            d = 150.0 + 10 * step
            seq.append(("ncclDevKernel_AllGather_RING_LL", s1, ts, d, "kernel", f"all-gather-start.{step}"))
            ts = round(max(t, ts + d) + 3.5, 3)
            seq.append(("MemcpyD2D", s1, ts, 12.5, "memcpy", "copy.1"))
            ts = round(ts + 12.5 + 1.75, 3)
            seq.append(("Memset", s1, ts, 3.25, "memset", "memset.1"))
            for name, stream, ts, d, kind, hlo in seq:
                tid = 1 if stream == s0 else 2
                launch_ts = round(ts - 5.5, 3)
                args: dict[str, Any] = {"correlation_id": str(corr), "hlo_op": hlo, "hlo_module": "jit_train_step"}
                if kind == "memcpy":
                    args["memcpy_details"] = "kind:DeviceToDevice size:4096 dest:0 async:1"
                gpu_ev = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": d}
                launch = {
                    "ph": "X",
                    "name": "cuLaunchKernel" if kind == "kernel" else "cuMemcpyDtoDAsync",
                    "pid": host_pid,
                    "tid": 11,
                    "ts": launch_ts,
                    "dur": 4.0,
                }
                if classic:
                    gpu_ev["args"] = args
                    launch["args"] = {"correlation_id": str(corr)}
                else:
                    bind = 10_000_000_000 + corr
                    gpu_ev.update(cat="gpu_launch", bind_id=bind, flow_in=True, args={"uid": 0})
                    launch.update(cat="gpu_launch", bind_id=bind, flow_out=True, args={"uid": 0})
                ev += [gpu_ev, launch]
                if kind == "kernel":  # the derived XLA Ops line repeats kernels: must not count
                    ev.append({"ph": "X", "name": hlo, "pid": pid, "tid": 3, "ts": ts, "dur": d})
                gpu.append(
                    {"name": name, "stream": stream, "ts": ts, "dur": d, "kind": kind, "hlo_op": hlo, "step": step}
                )
                corr += 1
            end = max(e["ts"] + e["dur"] for e in gpu[-len(seq) :])
            ev.append(
                {
                    "ph": "X",
                    "name": "jit_train_step",
                    "pid": pid,
                    "tid": 4,
                    "ts": step_start,
                    "dur": round(end - step_start, 3),
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "name": str(step),
                    "pid": pid,
                    "tid": 5,
                    "ts": step_start,
                    "dur": round(end - step_start + 1.0, 3),
                }
            )
            t = end + 200.0
        truth[k] = gpu
    ev.append({"ph": "X", "name": "$python.py:1 main", "pid": host_pid, "tid": 11, "ts": 900.0, "dur": 50000.0})
    doc = {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": ev}
    _write_json_gz(path, doc)
    return {"gpu": truth, "host_pid": host_pid}


def _write_json_gz(path: str, doc: dict[str, Any]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f)


# -- Nsight Systems ---------------------------------------------------------------------
_TABLES = {
    "StringIds": "id INTEGER PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": "start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, "
    "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, "
    "shortName INTEGER, gridX INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, "
    "correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER",
    "CUPTI_ACTIVITY_KIND_MEMSET": "start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, "
    "correlationId INTEGER, globalPid INTEGER, value INTEGER, bytes INTEGER",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER, "
    "correlationId INTEGER, nameId INTEGER, returnValue INTEGER",
    "NVTX_EVENTS": "start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, category INTEGER, "
    "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, "
    "domainId INTEGER",
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT",
}


def global_id(pid: int, tid: int = 0) -> int:
    """nsys ``globalTid`` of (pid, tid): ``pid << 24 | tid`` (plus a vm id above, here 1 << 48)."""
    return (1 << 48) | (pid << 24) | tid


def write_nsys_sqlite(
    path: str,
    *,
    processes: tuple[tuple[int, int], ...] = ((4242, 0),),
    steps: int = 3,
    session_start: int = 1_700_000_000_000_000_000,
    seed: int = 0,
    slow: float = 1.0,
    drop_tables: tuple[str, ...] = (),
    drop_columns: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """Write an ``nsys export``-style SQLite report; return the truth per (pid, device).

    ``truth["gpu"][(pid, dev)]`` lists GPU activities (``name``, ``kind``, ``stream``,
    ``start``, ``end`` relative ns, ``corr``, ``bytes``, ``copy_kind``), ``truth["nvtx"][pid]``
    the terminated ranges (``name``, ``start``, ``end``, ``tid``) and ``truth["launches"]`` the
    runtime calls. ``slow`` scales the gemm kernels' durations.
    """
    drop_columns = drop_columns or {}
    rng = np.random.default_rng(seed)
    if os.path.exists(path):
        os.unlink(path)
    con = sqlite3.connect(path)
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
        return strings[s]

    rows: dict[str, list[tuple[Any, ...]]] = {t: [] for t in _TABLES}
    truth: dict[str, Any] = {"gpu": {}, "nvtx": {}, "launches": {}, "session_start": session_start}
    corr = 1
    for pid, dev in processes:
        tid = pid + 1
        gtid = global_id(pid, tid)
        gpid = global_id(pid)
        gpu, nvtx, launches = [], [], []
        free: dict[int, int] = {}
        t = 5_000_000 + int(rng.integers(0, 1000))
        for step in range(steps):
            step_t0 = t
            fwd_t0 = t
            acts = []
            for kn in NSYS_KERNELS:
                d = int(rng.integers(20_000, 90_000) * (slow if "gemm" in kn else 1.0))
                acts.append(("kernel", kn, 7, d, -1, 0))
            acts.append(
                (
                    "kernel",
                    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)",
                    9,
                    120_000 + 1000 * step,
                    -1,
                    0,
                )
            )
            acts.append(("memcpy", "", 8, 15_000, 1 << 20, 1))
            acts.append(("memcpy", "", 8, 9_000, 1 << 18, 8))
            acts.append(("memset", "[CUDA memset]", 8, 2_000, 4096, 0))
            fwd_end = 0
            for i, (kind, name, stream, d, nbytes, ck) in enumerate(acts):
                launch_start = t + 1_000
                launch_end = launch_start + 3_000
                start = max(launch_end + int(rng.integers(500, 5_000)), free.get(stream, 0) + 700)
                end = start + d
                free[stream] = end
                api = {
                    "kernel": "cudaLaunchKernel_v7000",
                    "memcpy": "cudaMemcpyAsync_v3020",
                    "memset": "cudaMemsetAsync_v3020",
                }[kind]
                rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append((launch_start, launch_end, 0, gtid, corr, sid(api), 0))
                launches.append({"name": api, "start": launch_start, "end": launch_end, "corr": corr})
                if kind == "kernel":
                    rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(
                        (start, end, dev, 1, stream, corr, gpid, sid(name), sid(name.split("(")[0]), 128)
                    )
                elif kind == "memcpy":
                    rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append((start, end, dev, 1, stream, corr, gpid, nbytes, ck))
                else:
                    rows["CUPTI_ACTIVITY_KIND_MEMSET"].append((start, end, dev, 1, stream, corr, gpid, 0, nbytes))
                gpu.append(
                    {
                        "kind": kind,
                        "name": name,
                        "stream": stream,
                        "start": start,
                        "end": end,
                        "corr": corr,
                        "bytes": nbytes,
                        "copy_kind": ck,
                        "step": step,
                        "launch": launch_start,
                    }
                )
                corr += 1
                t = launch_end + 500
                if i == 1:
                    fwd_end = t
            t = max(g["end"] for g in gpu[-len(acts) :]) + 2_000
            nvtx.append({"name": ITER_TAG, "start": step_t0, "end": t, "tid": tid})
            nvtx.append({"name": "forward", "start": fwd_t0, "end": fwd_end, "tid": tid})
            t += 50_000
        for j, r in enumerate(nvtx):
            by_id = j == 1  # the first "forward" range names itself through StringIds
            rows["NVTX_EVENTS"].append(
                (
                    r["start"],
                    r["end"],
                    59,
                    None,
                    None,
                    None,
                    None if by_id else r["name"],
                    gtid,
                    None,
                    sid(r["name"]) if by_id else None,
                    0,
                )
            )
        rows["NVTX_EVENTS"].append((t, None, 34, None, None, None, "a mark", gtid, None, None, 0))
        truth["gpu"][(pid, dev)] = gpu
        truth["nvtx"][pid] = nvtx
        truth["launches"][pid] = launches
    rows["TARGET_INFO_SESSION_START_TIME"].append((session_start, "2025-01-01T00:00:00", "2025-01-01T00:00:00"))
    rows["StringIds"] = [(i, s) for s, i in strings.items()]
    for table, cols in _TABLES.items():
        if table in drop_tables:
            continue
        defs = [c.strip() for c in cols.split(",")]
        names = [d.split()[0] for d in defs]
        keep = [i for i, n in enumerate(names) if n not in drop_columns.get(table, ())]
        con.execute(f"CREATE TABLE {table} ({', '.join(defs[i] for i in keep)})")
        data = [tuple(r[i] for i in keep) for r in rows[table]]
        if data:
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(keep))})", data)
    con.commit()
    con.close()
    return truth

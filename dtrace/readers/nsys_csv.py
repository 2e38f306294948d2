"""``nsys stats`` CSV files (docs/extending.md, "A reader"): ``*_cuda_gpu_trace.csv`` as events; summaries recognised.

``cuda_gpu_trace`` lists every GPU activity (start, duration, correlation id, device,
stream, bytes, name), so it becomes an event table like any trace: one part per ``Device``
(each its own rank), kinds by name (``[CUDA memcpy ...]`` → ``memcpy``, ``[CUDA memset]`` →
``memset``, the rest ``kernel``), copy direction and bytes (``Bytes (MB)`` × 10⁶) in the
memcpy side table. Times are ns from the session start (the CSV carries no absolute origin);
there are no host events, so launches are unknown.

The summaries (``cuda_gpu_kern_sum``, ``cuda_gpu_mem_time_sum``, ``nvtx_gpu_proj_trace``)
carry no events. This reader recognises them (so detection can name them) but does not read
them: ``dtrace analyze`` sends them down the summary path of :mod:`dtrace.nsysstats.summary`,
and ``dtrace nsys-stats`` reads them directly.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.constants import COMM_KERNEL, KIND_CODES, copy_kind, kernel_collective
from ..core.schema import (
    COLLECTIVE_SCHEMA,
    KIND_DICT,
    MEMCPY_SCHEMA,
    dropped_summary,
    implausible_times,
    side_table,
    validate_events,
)
from ..errors import ImplausibleTimes, InputError, NoGPUActivity
from ..vector.groups import text_codes
from ._io import check_size, file_fingerprint, open_regular
from ._stats_csv import GPU_TRACE, SUMMARY_REPORTS, gpu_trace, report_of_name, sniff
from .base import Part, TraceFile

NAME = "nsys-csv"

_MEMCPY = re.compile(r"^\[CUDA memcpy", re.I)
_MEMSET = re.compile(r"^\[CUDA memset", re.I)
_NEW_DIRECTION = {
    "host-to-device": "H2D",
    "device-to-host": "D2H",
    "device-to-device": "D2D",
    "peer-to-peer": "P2P",
    "host-to-host": "H2H",
}


class READER:  # noqa: N801 - the registered reader object
    name = NAME

    @staticmethod
    def guess_can_open(path: str, head: bytes) -> bool:
        if sniff(path, head) is not None:
            return True
        return report_of_name(path) is not None

    @staticmethod
    def read(path: str, **options: Any) -> TraceFile:
        return read_nsys_csv(path, **options)


def memop_direction(name: str) -> str:
    """``[CUDA memcpy Host-to-Device]`` / ``[CUDA memcpy HtoD]`` → ``H2D``; memsets → ``memset``.

    Examples
    --------
    >>> memop_direction("[CUDA memcpy Device-to-Device]"), memop_direction("[CUDA memcpy DtoH]")
    ('D2D', 'D2H')
    """
    if _MEMSET.search(name):
        return "memset"
    low = name.lower()
    for key, d in _NEW_DIRECTION.items():
        if key in low:
            return d
    return copy_kind(name)


def read_nsys_csv(path: str, *, max_input_size: int | None = None, **_: Any) -> TraceFile:
    """Read a ``cuda_gpu_trace`` CSV into one part per device.

    Rows with implausible times are dropped and counted by reason in ``meta["dropped_events"]``
    (times are relative to the session start: a start before 0 is dropped); ``max_input_size``
    limits the file.
    """
    _check_gpu_trace(path, max_input_size)
    df = gpu_trace(path)
    if len(df) == 0:
        raise NoGPUActivity(path, "no GPU activity: the cuda_gpu_trace CSV has no rows")
    keep, dropped = implausible_times(df["start_ns"].to_numpy(), df["dur_ns"].to_numpy(), path)
    if keep is not None:
        if not keep.any():
            raise ImplausibleTimes(
                path, f"all {len(df)} GPU events have implausible times ({dropped_summary(dropped)})"
            )
        df = df[keep].reset_index(drop=True)
    n = len(df)
    names = df["name"].to_numpy(dtype=object)
    uniq_list, inv = text_codes(names)
    kind_of = np.array(
        [
            KIND_CODES["memcpy"]
            if _MEMCPY.search(u)
            else KIND_CODES["memset"]
            if _MEMSET.search(u)
            else KIND_CODES["kernel"]
            for u in uniq_list
        ],
        np.int8,
    )
    kinds = kind_of[inv.reshape(-1)]
    start = df["start_ns"].to_numpy(np.float64).round().astype(np.int64)
    device = df["device"].to_numpy(np.int64)
    table = pa.table(
        {
            "rank": np.full(n, -1, np.int32),
            "device": device.astype(np.int32),
            "stream": df["stream"].to_numpy(np.int64),
            "pid": np.full(n, -1, np.int64),
            "tid": df["stream"].to_numpy(np.int64),
            "kind": pa.DictionaryArray.from_arrays(pa.array(kinds.astype(np.int32)), KIND_DICT),
            "name": pa.DictionaryArray.from_arrays(
                pa.array(inv.reshape(-1).astype(np.int32)), pa.array(uniq_list, pa.string())
            ),
            "start_ns": start,
            "end_ns": start + df["dur_ns"].to_numpy(np.float64).round().astype(np.int64),
            "correlation": df["corr"].to_numpy(np.int64),
            "external_id": np.full(n, -1, np.int64),
        }
    )
    table = validate_events(table, path)
    parts = _device_parts(table, df["bytes"].to_numpy(np.int64), device, kinds, inv.reshape(-1), uniq_list)
    meta = {
        "base_time_ns": 0,
        "events": int(n),
        "dropped_events": dropped,
        "fingerprint": file_fingerprint(path),
        "report": GPU_TRACE,
    }
    return TraceFile(path=path, format=NAME, parts=parts, rank_hint=None, rank_per_device=True, meta=meta)


def _check_gpu_trace(path: str, max_input_size: int | None) -> None:
    """The file is within the size limit and a ``cuda_gpu_trace`` CSV (a summary report, or
    another CSV, is an error)."""
    with open_regular(path) as f:
        check_size(path, os.fstat(f.fileno()).st_size, max_input_size)
        head = f.read(4096)
    hdr = sniff(path, head)
    report = hdr.report if hdr is not None else report_of_name(path)
    if report in SUMMARY_REPORTS:
        raise InputError(
            path,
            f"is an nsys stats summary ({report}): it carries no events; "
            "'dtrace analyze' reads it on its summary path, 'dtrace nsys-stats' reports it",
        )
    if report != GPU_TRACE:
        raise InputError(path, "not an nsys stats CSV this reader knows (expected a cuda_gpu_trace header)")


def _device_parts(
    table: pa.Table, nbytes: np.ndarray, device: np.ndarray, kinds: np.ndarray, name_code: np.ndarray, names: list[str]
) -> list[Part]:
    """One part per device: its events, the collectives of its comm kernels and its copies."""
    coll_of = np.array([kernel_collective(u) if COMM_KERNEL.search(u) else "" for u in names], dtype=object)
    dir_of = np.array([memop_direction(u) for u in names], dtype=object)
    parts = []
    for idx, dev in enumerate(sorted(set(device.tolist()))):
        rows = np.flatnonzero(device == dev)
        code = name_code[rows]
        k = kinds[rows]
        c_rows = np.flatnonzero((k == KIND_CODES["kernel"]) & (coll_of[code] != ""))
        m_rows = np.flatnonzero(k == KIND_CODES["memcpy"])
        parts.append(
            Part(
                device=int(dev),
                events=table.take(pa.array(rows)),
                collectives=_collectives(c_rows, coll_of[code[c_rows]]),
                memcpy=pa.table(
                    {
                        "row": pa.array(m_rows.astype(np.int64), pa.int64()),
                        "copy_kind": pa.array(dir_of[code[m_rows]].tolist(), pa.string()).dictionary_encode(),
                        "bytes": pa.array(nbytes[rows[m_rows]], pa.int64()),
                    }
                ).cast(MEMCPY_SCHEMA),
                local_index=idx,
            )
        )
    return parts


def _collectives(rows: np.ndarray, types: np.ndarray) -> pa.Table:
    return side_table(COLLECTIVE_SCHEMA, {"row": rows, "collective": types.tolist()})

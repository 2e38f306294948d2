"""Hardware peaks: which accelerator a trace ran on, and its roofs (docs/semantics.md, "Hardware peaks").

The bundled table ``dtrace/data/gpus.json`` lists the accelerators people train on (A100, H100
SXM/PCIe/NVL, H200, B200, GB200, V100, MI210/MI250, MI250X, MI300X, MI325X, MI350X, MI355X):
dense matrix and vector TFLOP/s per precision and HBM bandwidth, each entry with its source. A
device is matched by its name as the trace states it (Kineto ``deviceProperties``), with the
memory size and, for generic names, the vendor, compute capability and multiprocessor count.

A user spec file (``--gpu-spec FILE``, ``gpu_spec=``) overrides or adds devices: its entries are
tried before the bundled ones, and an entry without ``match`` applies to every device. The
figures may be measured ("max achievable") instead of datasheet peaks. TraceLens's GPU arch
files (``{"mem_bw_gbps": ..., "max_achievable_tflops": {"matrix_bf16": ...}}``) are read too.

Examples
--------
>>> spec = match_device(load_specs(), "NVIDIA H100 80GB HBM3", memory_bytes=85 * 2**30)
>>> spec.gpu, spec.hbm_tbps, spec.peak("matrix", "bf16"), spec.peak("vector", "bf16")
('NVIDIA H100 SXM5', 3.35, 989.4, 133.8)
>>> match_device(load_specs(), "AMD Radeon Graphics", vendor="amd", capability="9.0", sms=104).gpu
'AMD Instinct MI210 / MI250 (one GCD)'
>>> mine = load_specs({"gpus": [{"gpu": "H200 measured", "hbm_tbps": 4.23, "matrix_tflops": {"bf16": 787}}]})
>>> match_device(mine, "NVIDIA H200").peak("matrix", "bf16")
787.0
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.fileio import read_regular
from ..errors import UsageError

BUNDLED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gpus.json")
MAX_SPEC_BYTES = 16 << 20
"""The largest GPU spec file read (the bundled table is a few tens of KB)."""
MAX_FIGURE = 1e7
"""The largest peak accepted (TB/s or TFLOP/s): 10 EFLOP/s, beyond any accelerator."""
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")


@dataclass(frozen=True)
class Spec:
    """One accelerator's roofs: ``hbm_tbps`` (10¹² B/s) and TFLOP/s per unit and precision."""

    gpu: str
    hbm_tbps: float | None
    matrix: Mapping[str, float]
    vector: Mapping[str, float]
    source: str = ""
    origin: str = "bundled"  # or the user spec file
    match: Mapping[str, Any] = field(default_factory=dict)

    def peak(self, unit: str, precision: str) -> float | None:
        """TFLOP/s of ``unit`` (``matrix``/``vector``) at ``precision``, None if unknown.

        A matrix product in fp32 runs at ``matrix.fp32`` (else the vector fp32 peak); vector
        arithmetic in bf16/fp16 without a figure of its own runs at the vector fp32 peak.
        """
        table = self.matrix if unit == "matrix" else self.vector
        v = table.get(precision)
        if v is None and precision in ("fp32", "fp64") and unit == "matrix":
            v = self.vector.get(precision)
        if v is None and unit == "vector" and precision in ("bf16", "fp16", "fp8"):
            v = self.vector.get("fp32")
        return float(v) if v else None

    def figures(self) -> list[tuple[str, float, str]]:
        """Every figure as (metric, value, unit text): ``hbm``, ``matrix_bf16``, ..."""
        out = [("hbm", float(self.hbm_tbps), "TB/s")] if self.hbm_tbps else []
        for unit, table in (("matrix", self.matrix), ("vector", self.vector)):
            out += [(f"{unit}_{p}", float(table[p]), "TFLOP/s") for p in PRECISIONS if p in table]
        return out


def _spec(entry: Mapping[str, Any], origin: str) -> Spec:
    where = f"{origin}: entry {entry.get('gpu', '?')!r}"
    if "max_achievable_tflops" in entry or "mem_bw_gbps" in entry:  # a TraceLens GPU arch file
        return _tracelens_spec(entry, origin)
    try:
        hbm = entry.get("hbm_tbps")
        return Spec(
            str(entry["gpu"]),
            float(hbm) if hbm is not None else None,
            {str(k): float(v) for k, v in (entry.get("matrix_tflops") or {}).items()},
            {str(k): float(v) for k, v in (entry.get("vector_tflops") or {}).items()},
            str(entry.get("source", "")),
            origin,
            dict(entry.get("match") or {}),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{where}: expected 'gpu', 'hbm_tbps', 'matrix_tflops'/'vector_tflops' numbers ({exc})"
        ) from None


def _check_figures(s: Spec, origin: str) -> None:
    """Every figure of a spec entry is a finite positive number (a peak of 0, below 0 or infinite
    would put ops "at −3.9 % of the roofline" or divide by zero)."""
    figures = [("hbm_tbps", s.hbm_tbps)] if s.hbm_tbps is not None else []
    figures += [(f"matrix_tflops.{k}", v) for k, v in s.matrix.items()]
    figures += [(f"vector_tflops.{k}", v) for k, v in s.vector.items()]
    for name, v in figures:
        if not (math.isfinite(v) and 0 < v <= MAX_FIGURE):
            raise UsageError(
                f"{origin}: entry {s.gpu!r}: {name} must be a positive number up to {MAX_FIGURE:g}, got {v!r}"
            )


def _tracelens_spec(entry: Mapping[str, Any], origin: str) -> Spec:
    """The spec of an entry of a TraceLens GPU arch file (``max_achievable_tflops`` by
    ``matrix_<precision>``/``vector_<precision>``, ``mem_bw_gbps``)."""
    try:
        return _tracelens_entry(entry, origin)
    except (TypeError, ValueError, AttributeError) as exc:
        raise UsageError(
            f"{origin}: entry {entry.get('gpu', entry.get('name', '?'))!r}: expected 'max_achievable_tflops' "
            f"numbers and 'mem_bw_gbps' ({exc})"
        ) from None


def _tracelens_entry(entry: Mapping[str, Any], origin: str) -> Spec:
    matrix: dict[str, float] = {}
    vector: dict[str, float] = {}
    for key, val in (entry.get("max_achievable_tflops") or {}).items():
        unit, _, prec = str(key).partition("_")
        (matrix if unit == "matrix" else vector)[prec] = float(val)
    bw = entry.get("mem_bw_gbps")
    return Spec(
        str(entry.get("gpu") or entry.get("name") or "user spec"),
        float(bw) / 1000 if bw else None,
        matrix,
        vector,
        str(entry.get("source", "TraceLens GPU arch file")),
        origin,
        dict(entry.get("match") or {}),
    )


@functools.lru_cache(maxsize=1)
def _bundled() -> tuple[Spec, ...]:
    with open(BUNDLED, encoding="utf-8") as f:
        doc = json.load(f)
    return tuple(_spec(e, "bundled") for e in doc["gpus"])


def read_spec_file(path: str) -> list[Spec]:
    """The entries of a user spec file (JSON: ``{"gpus": [...]}``, one entry, or a TraceLens
    GPU arch file); a problem is a :class:`UsageError` naming the file."""
    try:  # a FIFO or a device (/dev/urandom, /dev/zero) is refused, never read for ever
        doc = json.loads(read_regular(path, limit=MAX_SPEC_BYTES).decode("utf-8"))
    except OSError as exc:
        raise UsageError(f"--gpu-spec {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"--gpu-spec {path}: not JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"--gpu-spec {path}: the JSON is nested too deeply to be a GPU spec") from None
    return _entries(doc, path)


def _entries(doc: Any, origin: str) -> list[Spec]:
    items = doc.get("gpus", [doc]) if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not all(isinstance(e, dict) for e in items):
        raise UsageError(f"{origin}: expected {{'gpus': [entries]}} or one entry object")
    out = [_spec(e, origin) for e in items]
    for s in out:
        _check_figures(s, origin)
        pattern = s.match.get("name")
        if pattern is not None:
            try:
                re.compile(str(pattern))
            except re.error as exc:
                raise UsageError(f"{origin}: entry {s.gpu!r}: bad name regex {pattern!r} ({exc})") from None
    return out


def load_specs(user: Any = None) -> list[Spec]:
    """The user's entries (a spec file path, a dict or a list of entries), then the bundled ones."""
    mine: list[Spec] = []
    if isinstance(user, (str, os.PathLike)):
        mine = read_spec_file(os.fspath(user))
    elif user is not None:
        mine = _entries(user, "gpu_spec")
    return mine + list(_bundled())


def _fits(m: Mapping[str, Any], name: str, vendor: str, capability: str, sms: int, memory_gb: float) -> bool:
    if "name" in m and not re.search(str(m["name"]), name or "", re.IGNORECASE):
        return False
    if "memory_gb" in m and memory_gb > 0:
        lo, hi = m["memory_gb"]
        if not lo <= memory_gb < hi:
            return False
    if "vendor" in m and str(m["vendor"]).lower() != vendor:
        return False
    if "capability" in m and str(m["capability"]) != capability:
        return False
    if "sms" in m and int(m["sms"]) != sms:
        return False
    return True


def match_device(
    specs: Sequence[Spec],
    name: str,
    *,
    vendor: str = "",
    capability: str = "",
    sms: int = 0,
    memory_bytes: int = 0,
) -> Spec | None:
    """The first entry of ``specs`` that fits the device, or None (an entry without ``match``
    fits every device; one with only a ``name`` fits by name)."""
    gb = memory_bytes / 2**30 if memory_bytes > 0 else 0.0
    for s in specs:
        if _fits(s.match, name, vendor.lower(), capability, sms, gb):
            return s
    return None


def spec_identity(user: Any) -> Any:
    """What identifies a user spec for the results' keys: the file's content, or the object."""
    if user is None:
        return None
    if isinstance(user, (str, os.PathLike)):
        try:
            with open(os.fspath(user), "rb") as f:
                return ["file", f.read().decode("utf-8", "replace")]
        except OSError:
            return ["file", os.fspath(user)]
    return ["spec", json.dumps(user, sort_keys=True, default=str)]

"""The GPU Performance Analyser's JSON config, read as that tool reads it.

.. code-block:: json

    {"inputs": [{"format": "csv", "title": "Llama2-70B",
                 "nsys_csv_file_path": {"kernel_sum": "x_cuda_gpu_kern_sum.csv",
                                        "nvtx_proj_trace": "x_nvtx_gpu_proj_trace.csv",
                                        "mem_time_sum": "x_cuda_gpu_mem_time_sum.csv"},
                 "analysis_args": {"num_of_iters": 5, "num_of_gpus": 1,
                                   "nvtx_tag_of_iter": "TSL:XlaModule:#hlo_module=...#"}},
                {"format": "nsys-rep", "title": "From the report",
                 "nsys_report": {"path": "x.nsys-rep", "with_nvtx": true, "with_mem": true},
                 "analysis_args": {"num_of_iters": 5, "num_of_gpus": 1}}],
     "kernel_to_class_map": {"gemm": "gemm", "fusion": "fusion"}}

``kernel_sum`` is required for ``csv`` inputs, the two others may be null. An ``nsys-rep``
input may also point at an exported ``.sqlite``. Relative paths are taken from the current
directory, else from the config file's directory. The tool's example configs carry ``//``
comments and trailing commas; both are accepted.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ..core.fileio import open_regular, read_regular
from ..errors import UsageError


@dataclass(frozen=True)
class StatsInput:
    """One analysis of the config (one report)."""

    title: str
    format: str  # "csv" or "nsys-rep"
    kernel_sum: str | None = None
    mem_time_sum: str | None = None
    nvtx_proj_trace: str | None = None
    report: str | None = None  # .nsys-rep or .sqlite
    with_nvtx: bool = True
    with_mem: bool = True
    iters: int = 1
    gpus: int | None = None  # None: the report's (process, device) parts
    nvtx_tag: str | None = None


class _Common(TypedDict):
    """The :class:`StatsInput` fields every input format shares."""

    title: str
    iters: int
    gpus: int | None
    nvtx_tag: str | None


@dataclass(frozen=True)
class StatsConfig:
    inputs: list[StatsInput]
    kernel_to_class_map: dict[str, str] | None = None
    source: str = "<config>"
    extra: dict[str, Any] = field(default_factory=dict)


_LINE_COMMENT = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*')
_TRAILING_COMMA = re.compile(r'("(?:\\.|[^"\\])*")|,(\s*[}\]])')


def _relaxed_json(text: str) -> Any:
    """JSON with ``//`` comments and trailing commas (as in the tool's README)."""
    text = _LINE_COMMENT.sub(lambda m: m.group(1) or "", text)
    text = _TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), text)
    return json.loads(text)


def is_config(path: str) -> bool:
    """True if ``path`` is a JSON object with an ``inputs`` list (not a trace)."""
    if not path.lower().endswith(".json") or not os.path.isfile(path):
        return False
    try:
        with open_regular(path) as f:
            head = f.read(1 << 16).decode("utf-8", errors="replace")
    except OSError:
        return False
    return '"inputs"' in head and '"traceEvents"' not in head


def load_config(path: str) -> StatsConfig:
    """Read and check a config; errors name the file and the entry."""
    try:
        spec = _relaxed_json(read_regular(path, limit=64 << 20).decode("utf-8"))
    except OSError as exc:
        raise UsageError(f"config {path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"config {path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"config {path}: the JSON is nested too deeply to be a config") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("inputs"), list) or not spec["inputs"]:
        raise UsageError(f"config {path}: expected an object with a non-empty 'inputs' list")
    base = os.path.dirname(os.path.abspath(path))
    inputs = [_input(i, entry, base, path) for i, entry in enumerate(spec["inputs"])]
    cmap = spec.get("kernel_to_class_map")
    if cmap is not None and not (isinstance(cmap, dict) and all(isinstance(v, str) for v in cmap.values())):
        raise UsageError(f"config {path}: 'kernel_to_class_map' must map name substrings to class names")
    return StatsConfig(inputs=inputs, kernel_to_class_map=cmap, source=path)


def _resolve(p: Any, base: str, where: str) -> str | None:
    if p is None or p == "":
        return None
    if not isinstance(p, str):
        raise UsageError(f"{where}: expected a file path, got {p!r}")
    if os.path.isabs(p) or os.path.exists(p):
        return os.path.abspath(p)
    return os.path.join(base, p)


def _int(v: Any, default: int | None, where: str) -> int | None:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UsageError(f"{where}: expected a positive integer, got {v!r}")
    return v


def _input(i: int, entry: Any, base: str, path: str) -> StatsInput:
    where = f"config {path}: inputs[{i}]"
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: expected an object")
    fmt = str(entry.get("format", "csv")).lower()
    if fmt not in ("csv", "nsys-rep", "sqlite"):
        raise UsageError(f"{where}: format {fmt!r} is not one of csv, nsys-rep")
    args = entry.get("analysis_args") or {}
    if not isinstance(args, dict):
        raise UsageError(f"{where}: 'analysis_args' must be an object")
    title = str(entry.get("title") or f"input {i}")
    common = _Common(
        title=title,
        iters=_int(args.get("num_of_iters"), 1, f"{where}.analysis_args.num_of_iters") or 1,
        gpus=_int(args.get("num_of_gpus"), None, f"{where}.analysis_args.num_of_gpus"),
        nvtx_tag=args.get("nvtx_tag_of_iter") or None,
    )
    if fmt == "csv":
        files = entry.get("nsys_csv_file_path")
        if not isinstance(files, dict):
            raise UsageError(f"{where}: a csv input needs 'nsys_csv_file_path' with 'kernel_sum'")
        ks = _resolve(files.get("kernel_sum"), base, f"{where}.nsys_csv_file_path.kernel_sum")
        if ks is None:
            raise UsageError(f"{where}: 'nsys_csv_file_path.kernel_sum' must be provided")
        return StatsInput(
            format="csv",
            kernel_sum=ks,
            mem_time_sum=_resolve(files.get("mem_time_sum"), base, f"{where}.mem_time_sum"),
            nvtx_proj_trace=_resolve(files.get("nvtx_proj_trace"), base, f"{where}.nvtx_proj_trace"),
            **common,
        )
    rep = entry.get("nsys_report")
    if not isinstance(rep, dict) or not rep.get("path"):
        raise UsageError(f"{where}: an nsys-rep input needs 'nsys_report' with 'path'")
    return StatsInput(
        format="nsys-rep",
        report=_resolve(rep["path"], base, f"{where}.nsys_report.path"),
        with_nvtx=bool(rep.get("with_nvtx", True)),
        with_mem=bool(rep.get("with_mem", True)),
        **common,
    )

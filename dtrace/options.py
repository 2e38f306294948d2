"""Analysis settings: one frozen dataclass, keyword-only, mapped one to one onto CLI flags.

:class:`Options` checks what it can alone (ranges, choices); the settings that name things of
other layers (a straggler detector, a class-map file) are checked at the API boundary, before
any work, by :func:`dtrace.api.make_options`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .errors import UsageError

COMPAT = ("default", "tracelens")
RANK_BY = ("auto", "order")


@dataclass(frozen=True, kw_only=True)
class Options:
    """Settings of one analysis.

    Parameters
    ----------
    compat
        ``"default"`` or ``"tracelens"``: reproduce TraceLens ``GPUEventAnalyser`` exactly
        (memset as compute, no extra collective kernels, no clipping of stream overlaps).
    linked_only
        Keep only GPU events whose correlation id matches a host launch call.
    step_pattern
        Regex on annotation names that marks an iteration; group 1 is the step number.
    step
        Keep only this step (iteration) in every table.
    kernel_wait_ns
        Gaps launched in time and shorter than this are ``kernel_wait`` (launch overhead).
    hist_min_ns, hist_max_ns, hist_bins, hist_log
        Gap histogram range (ns), number of bins and log spacing.
    iters
        Iteration count for per-iteration figures when the trace has no step markers.
    summary_gpus
        GPUs that a summary-level input (``nsys stats`` CSVs) covers: its per-iteration figures
        divide totals by ``iters × summary_gpus`` (default 1).
    classmap
        A class map: path or already-loaded dict (substring or ordered-regex format).
    classmap_engine, classmap_model
        Which engine/model of an ordered-regex map to use.
    rank_by
        ``"auto"`` (distributedInfo, then a ``rank<N>`` in the file name) or ``"order"`` (sorted
        input order).
    straggler_method
        Name of the straggler detector (see :mod:`dtrace.reduce.stragglers`).
    gpus_per_host
        Ranks ``r // gpus_per_host`` share a host and its clock when clock offsets between hosts
        are estimated from collective end times; 0 estimates one offset per rank.
    gpu_spec
        Hardware peaks that override or add to the bundled GPU table (:mod:`dtrace.hardware`):
        a JSON spec file's path, or its content (a dict); "max achievable" figures may replace
        datasheet peaks. Only the cross-rank roofline reads it.
    """

    compat: str = "default"
    linked_only: bool = False
    step_pattern: str = r"^(?:ProfilerStep|Step)#(\d+)$"
    step: int | None = None
    kernel_wait_ns: int = 30_000
    hist_min_ns: int | None = None
    hist_max_ns: int | None = None
    hist_bins: int = 20
    hist_log: bool = False
    iters: int | None = None
    summary_gpus: int | None = None  # GPUs an nsys-stats summary input covers (per-iteration divisor)
    classmap: Any = None
    classmap_engine: str | None = None
    classmap_model: str | None = None
    rank_by: str = "auto"
    straggler_method: str = "robust"
    gpus_per_host: int = 8  # ranks r // gpus_per_host share a host clock (0: every rank its own host)
    gpu_spec: Any = None  # a GPU spec file (path) or its content: peaks for the roofline (dtrace.hardware)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.compat not in COMPAT:
            raise UsageError(f"unknown compat mode {self.compat!r}; valid: {', '.join(COMPAT)}")
        if self.rank_by not in RANK_BY:
            raise UsageError(f"unknown rank_by {self.rank_by!r}; valid: {', '.join(RANK_BY)}")
        if self.kernel_wait_ns < 0:
            raise UsageError("kernel_wait_ns must be >= 0")
        if self.hist_bins < 1:
            raise UsageError("hist_bins must be >= 1")
        if self.hist_min_ns is not None and self.hist_max_ns is not None and self.hist_min_ns >= self.hist_max_ns:
            raise UsageError("hist_min must be smaller than hist_max")
        if self.hist_log and self.hist_min_ns is not None and self.hist_min_ns <= 0:
            raise UsageError("log-spaced histogram bins need hist_min > 0")
        if self.gpus_per_host < 0:
            raise UsageError("gpus_per_host must be >= 0 (0: one clock per rank)")
        if self.iters is not None and self.iters < 1:
            raise UsageError("iters must be >= 1")

    @classmethod
    def from_kwargs(cls, **kw: Any) -> "Options":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kw) - names)
        if unknown:
            raise UsageError(f"unknown option(s) {unknown}; valid options: {sorted(names)}")
        return cls(**kw)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if d["classmap"] is not None and not isinstance(d["classmap"], (str, int, float)):
            d["classmap"] = "<in-memory map>"
        if d["gpu_spec"] is not None and not isinstance(d["gpu_spec"], str):
            d["gpu_spec"] = "<in-memory spec>"
        return d

"""Analysis settings: one frozen dataclass, keyword-only, mapped one to one onto CLI flags.

:class:`Options` checks what it can alone (ranges, choices); the settings that name things of
other layers (a straggler detector, a class-map file) are checked at the API boundary, before
any work, by :func:`dtrace.api.make_options`.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .errors import UsageError

COMPAT = ("default", "tracelens")
CUDA_QUEUE_LIMIT = 1022
"""The length at which CUDA's launch queue of a stream is full, counted as dtrace and HTA count it
(a launch from the start of its call until its GPU start): launch calls made at this length block
until an entry frees. Measured on an H200 (CUDA 13, ``tests/data/h200/queue_full_rank0.pt.trace.json.gz``)
and a V100 (HTA's ``ns_resolution_trace``); the runtime's queue has 1,024 entries (HTA's
``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM``), of which this count reaches 1,022. See docs/semantics.md,
"Launch queues"."""
RANK_BY = ("auto", "order")
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_TIME_NS = 10**15
"""The largest time setting (gap thresholds, histogram bounds): 1e15 ns, 11.6 days."""
LOG_SPAN = 100
"""A gap histogram whose range spans this ratio (two decades) or more gets logarithmic bins
unless told otherwise (``hist_log=None``)."""
MAX_HIST_BINS = 10_000
"""The most gap-histogram bins (each is a row per stream and part)."""
#: The whole-number settings: (lowest, highest, None allowed).
MAX_TIMELINE_BINS = 10_000
"""Most bins of a per-GPU time series (queue, memory, copy bandwidth)."""
WHOLE: dict[str, tuple[int, int, bool]] = {
    "step": (INT64_MIN, INT64_MAX, True),
    "kernel_wait_ns": (0, MAX_TIME_NS, False),
    "hist_min_ns": (0, MAX_TIME_NS, True),
    "hist_max_ns": (0, MAX_TIME_NS, True),
    "hist_bins": (1, MAX_HIST_BINS, False),
    "iters": (1, INT32_MAX, True),
    "summary_gpus": (1, INT32_MAX, True),
    "gpus_per_host": (0, INT32_MAX, False),
    "launch_runtime_cutoff_ns": (0, MAX_TIME_NS, False),
    "launch_delay_cutoff_ns": (0, MAX_TIME_NS, False),
    "launch_rows": (0, INT64_MAX, True),
    "queue_limit": (1, INT32_MAX, True),
    "timeline_bins": (1, MAX_TIMELINE_BINS, False),
    "sequence_min_len": (1, INT32_MAX, False),
}


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
        Gap histogram range (ns), number of bins and their spacing: ``hist_log`` ``True``
        logarithmic, ``False`` linear, ``None`` (default) logarithmic where the range spans two
        decades or more (its upper bound at least :data:`LOG_SPAN` times its lower bound > 0),
        else linear.
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
    launch_runtime_cutoff_ns, launch_delay_cutoff_ns
        A launch call longer than the first, or a launch delay longer than the second, is an
        outlier (defaults 50 µs and 100 µs, HTA's).
    launch_rows
        At most this many outliers per part in the ``launches`` table (the worst first);
        ``None`` puts every GPU event linked to a launch call there, outlier or not.
    queue_limit
        Length of a stream's launch queue at which the host blocks; ``None`` (the default): the
        runtime's, :data:`CUDA_QUEUE_LIMIT` for CUDA, none known for ROCm.
    timeline_bins
        Bins of the per-part time series (``queue_timeline``, ``memory_timeline``,
        ``memcpy_timeline``) over the part's timeline window.
    gpu_spec
        Hardware peaks that override or add to the bundled GPU table (:mod:`dtrace.knowledge.hardware`):
        a JSON spec file's path, or its content (a dict); "max achievable" figures may replace
        datasheet peaks. Only the cross-rank roofline reads it.
    sequence_min_len
        The fewest GPU events a top-level op instance must launch for its kernel sequence to be
        in the ``kernel_sequences`` table (default 3, HTA's ``min_pattern_len``).
    """

    compat: str = "default"
    linked_only: bool = False
    step_pattern: str = r"^(?:ProfilerStep|Step)#(\d+)$"
    step: int | None = None
    kernel_wait_ns: int = 30_000
    hist_min_ns: int | None = None
    hist_max_ns: int | None = None
    hist_bins: int = 20
    hist_log: bool | None = None
    iters: int | None = None
    summary_gpus: int | None = None  # GPUs an nsys-stats summary input covers (per-iteration divisor)
    classmap: Any = None
    classmap_engine: str | None = None
    classmap_model: str | None = None
    rank_by: str = "auto"
    straggler_method: str = "robust"
    gpus_per_host: int = 8  # ranks r // gpus_per_host share a host clock (0: every rank its own host)
    launch_runtime_cutoff_ns: int = 50_000
    launch_delay_cutoff_ns: int = 100_000
    launch_rows: int | None = 100
    queue_limit: int | None = None
    timeline_bins: int = 100
    gpu_spec: Any = None  # a GPU spec file (path) or its content: peaks for the roofline (dtrace.knowledge.hardware)
    sequence_min_len: int = 3  # fewest GPU events of a kernel sequence (kernel_sequences)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check_whole_numbers()
        self._check_types()
        self._check_values()

    def _check_whole_numbers(self) -> None:
        """Each of :data:`WHOLE` is an int in its range (or None where optional); stored as int."""
        for name, (lo, hi, optional) in WHOLE.items():
            v = getattr(self, name)
            if v is None and optional:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= int(v) <= hi:
                raise UsageError(
                    f"{name} must be a whole number from {lo:,} to {hi:,}{' or None' if optional else ''}, not {v!r}"
                )
            object.__setattr__(self, name, int(v))

    def _check_types(self) -> None:
        """The flags are bools, the names strs, ``step_pattern`` a regular expression, ``extra`` a dict."""
        if not isinstance(self.linked_only, bool):
            raise UsageError(f"linked_only must be True or False, not {self.linked_only!r}")
        if self.hist_log is not None and not isinstance(self.hist_log, bool):
            raise UsageError(f"hist_log must be True, False or None (automatic), not {self.hist_log!r}")
        for name in ("straggler_method", "step_pattern"):
            if not isinstance(getattr(self, name), str):
                raise UsageError(f"{name} must be a str, not {getattr(self, name)!r}")
        try:
            re.compile(self.step_pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise UsageError(f"step_pattern {self.step_pattern!r} is not a regular expression: {exc}") from None
        if not isinstance(self.extra, dict):
            raise UsageError(f"extra must be a dict, not {type(self.extra).__name__}")

    def _check_values(self) -> None:
        """The choices are known ones and the numbers consistent with each other."""
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

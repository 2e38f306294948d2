"""The vocabulary every layer shares: event kinds, GPU kinds, copy kinds, collective names.

This module is the bottom of the package (it imports nothing of dtrace and no third-party
library), so readers, analyses, reducers and renderers spell these names the same way. See
docs/semantics.md, "Event table" and "Memory operations".
"""

from __future__ import annotations

import re

KINDS = ("kernel", "memcpy", "memset", "cpu_op", "runtime", "annotation", "gpu_annotation", "python", "other")
"""Event kinds of the event table, in the order of their dictionary codes."""
KIND_CODES = {k: i for i, k in enumerate(KINDS)}
"""Dictionary code of each kind in the event table's ``kind`` column."""
GPU_KINDS = ("kernel", "memcpy", "memset")
"""Kinds that are GPU work (busy time); ``gpu_annotation`` is a GPU-side range, not work."""

MEMSET = "memset"
"""The memcpy side table's ``copy_kind`` of a memset."""
COPY_KINDS = ("H2D", "D2H", "D2D", "P2P", "H2H", "other")
"""Directions of memory copies (the memcpy side table's ``copy_kind``, besides :data:`MEMSET`)."""
_COPY_RULES = [
    (re.compile(r"htod|host\s*->\s*device|hosttodevice|h2d", re.I), "H2D"),
    (re.compile(r"dtoh|device\s*->\s*(pageable|pinned|host)|devicetohost|d2h", re.I), "D2H"),
    (re.compile(r"ptop|peer|p2p", re.I), "P2P"),
    (re.compile(r"dtod|device\s*->\s*device|devicetodevice|d2d", re.I), "D2D"),
    (re.compile(r"htoh|h2h", re.I), "H2H"),
]


def copy_kind(name: str, kind: str | None = None) -> str:
    """Direction of a memcpy from its kind argument (``DtoD``) or its name.

    Examples
    --------
    >>> copy_kind("Memcpy HtoD (Pinned -> Device)"), copy_kind("x", "DtoD"), copy_kind("[CUDA memcpy Peer-to-Peer]")
    ('H2D', 'D2D', 'P2P')
    """
    for text in (kind or "", name):
        for rx, k in _COPY_RULES:
            if rx.search(text):
                return k
    return "other"


COLLECTIVE_NAMES = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather",
    "all_gather": "all_gather",
    "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "send": "send",
    "recv": "recv",
    "sendrecv": "send_recv",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all",
    "barrier": "barrier",
}
"""Spellings of collectives in traces (lower-cased, spaces removed) → the collective side
table's names (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``send_recv``, ...)."""

COMM_KERNEL = re.compile(r"nccl|rccl", re.I)
"""A communication library's kernel (NCCL, RCCL) by its name."""
NCCL_KERNEL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)
"""An NCCL/RCCL kernel name; group 1 names its collective (``ncclDevKernel_AllGather_RING_LL``)."""


def normalize_collective(name: str) -> str:
    """``allreduce``/``AllReduce``/``all_reduce`` → ``all_reduce``; unknown names lower-cased.

    Examples
    --------
    >>> normalize_collective("AllReduce"), normalize_collective("_allgather_base"), normalize_collective("Foo Bar")
    ('all_reduce', 'all_gather', 'foobar')
    """
    key = name.strip().lower().replace(" ", "")
    return COLLECTIVE_NAMES.get(key, COLLECTIVE_NAMES.get(key.replace("_", ""), key))


def kernel_collective(name: str) -> str:
    """Collective type of an NCCL/RCCL kernel from its name (``unknown`` if it does not say).

    Examples
    --------
    >>> kernel_collective("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)")
    'all_gather'
    >>> kernel_collective("ncclDevKernel_Generic_4")
    'unknown'
    """
    m = NCCL_KERNEL.search(name)
    return normalize_collective(m.group(1)) if m and m.group(1).lower() != "generic" else "unknown"


# -- choices and defaults that ``dtrace --help`` shows (the CLI reads them without pandas) -----

OUTPUT_FORMATS = ("table", "csv", "json", "markdown")
"""Formats of the terminal renderers (:func:`dtrace.render.text.render`, ``--fmt``)."""
DEFAULT_MAX_INPUT_SIZE = "64GiB"
"""Default limit of one input's decompressed content: far above real single-rank traces (a few GB),
low enough that a gzip bomb costs about a minute of decompression, never unbounded time."""
MANIFEST_MAX_BYTES = 1 << 30
"""The largest results manifest, summary or cache record read (100,000 ranks' manifest is about
100 MB): a 4 GB sparse file planted as ``manifest.json`` is refused, not read whole."""
TABLE_MAX_BYTES = 64 << 30
"""The largest results table file read whole into memory."""
UP_TO_DATE_MAX_BYTES = 4 << 30
"""Inputs are fingerprinted on the client to tell a finished run is up to date only up to this
total size (a larger job checks its inputs in the ingest tasks, on the workers)."""
DIFF_LEVELS = ("breakdown", "class", "kernel", "op")
"""Levels :func:`dtrace.explore.diff.diff` compares two runs at."""
DIFF_PER = ("gpu", "job")
"""How :func:`dtrace.explore.diff.diff` normalises times: per GPU (mean over parts) or for the whole job."""
DEFAULT_SPEEDUP = 1.2
"""How many times as fast a what-if makes the kernel classes it speeds up, unless told."""
SPEEDUP_RANGE = (1e-3, 1e3)
"""The speedups a what-if or a generated counterfactual accepts (1e-3: a thousand times slower)."""
SYNTH_MAX_RANKS = 65_536
"""The largest generated job (``dtrace synth``)."""
SYNTH_MAX_KERNELS_PER_RANK = 1_000_000
"""At most this many compute kernels per generated rank (``steps × kernels_per_step``): ~0.3 GB of JSON."""
SYNTH_MAX_JOB_KERNELS = 20_000_000
"""At most this many compute kernels in a generated job (``ranks × steps × kernels_per_step``)."""
SYNTH_MAX_TILE = 10_000
"""The most copies ``dtrace synth --from-trace --tile`` makes of a trace."""
FAULT_KINDS: dict[str, str] = {
    "compute": "the rank's compute kernels take (1 + slow) times as long",
    "launch": "the rank's host needs (1 + slow) times each kernel's GPU time to launch it (host-bound): "
    "its GPU waits for launches",
    "link": "the rank's collective transfers take (1 + slow) times as long, so every process group "
    "containing it is slow",
    "loader": "the rank's data loader stalls for slow times the step's compute time at the start of every "
    "step, before its first launch (host-bound)",
    "sync": "the rank's host waits for its GPU between the backward pass and the optimizer (.item(): a "
    "device-to-host copy and cudaStreamSynchronize), then works slow times the step's compute time on "
    "the host before launching the optimizer",
    "gpu": "the rank's GPU runs its matrix products (GEMMs) (1 + slow) times as long at the same shapes "
    "(a slow GPU: clocks, power, thermals); the traces record op shapes",
    "contended": "the rank's GPU is time-sliced with another process: a quarter of its compute kernels wait "
    "for the other process's time slice (a long tail, most kernels unchanged), its compute time (1 + slow) "
    "times as long on average",
}
"""Faults :mod:`dtrace.generate.synth` can inject into a simulated job, with their effect."""

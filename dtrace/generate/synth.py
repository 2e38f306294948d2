"""Synthetic cluster jobs: one realistic PyTorch-profiler (Kineto) trace per rank, with faults.

:func:`generate` simulates a data-parallel × tensor-parallel training job step by step and
writes ``rank-{r}.json.gz`` for every rank plus ``ground_truth.json`` (parameters and injected
faults). The traces look like the real thing: ``distributedInfo``, ``baseTimeNanoseconds``,
``ProfilerStep#N`` annotations, ``aten::`` host ops whose ``cudaLaunchKernel`` calls carry
correlation and External ids, kernels with real-world names (cuBLAS/CUTLASS gemms, flash
attention, layer norm, elementwise, triton, fused Adam) on several streams, NCCL kernels on their
own streams with the collective args (``Collective name``, ``Process Group Name``/``Ranks``,
``Group size``, ``Seq``, message sizes, ``dtype``), memcpy/memset with bytes, ``ac2g`` flows.

Simulation model
----------------
Every rank runs the same op sequence (SPMD). The host launches ops one after the other (a host
op per kernel, a few µs each, so it normally runs far ahead of the GPU) and synchronises on
the loss at the end of each step. A kernel starts when it has been launched, its stream is free
and its inputs are ready. A collective instance starts on each member rank when that rank
reaches it (its arrival) and ends on *every* member at ``last arrival + transfer``; one late
rank therefore makes the whole group wait. Tensor-parallel (TP) all-reduces block the compute
streams; data-parallel (DP) gradient reduce-scatters overlap the backward pass and are waited for
before the optimizer. Every rank is in one TP group (consecutive ranks) and one DP group (ranks
``r % tp`` equal), so groups share ranks.

The simulation is a loop over the op sequence, vectorised over ranks; trace text comes from
per-op string templates, so 64 small ranks take well under a second and 1,024 a few seconds.

Faults (each recorded in ``ground_truth.json``), see :data:`FAULT_KINDS`:
``compute`` (the rank's compute kernels are ``1 + slow`` times as long), ``launch`` (its host
needs ``1 + slow`` times each kernel's GPU time to launch it: host-bound, its GPU waits for
launches), ``link`` (its collective transfers take ``1 + slow`` times as long, so every process
group containing it is slow), ``loader`` (its data loader stalls for ``slow`` × the step's compute
time at the start of every step, before the first launch: an
``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` annotation), ``sync`` (its
host calls ``.item()`` between the backward pass and the optimizer — a device-to-host copy under
``aten::item`` and a ``cudaStreamSynchronize`` that waits until the compute streams are idle —
then works ``slow`` × the step's compute time on the host before launching the optimizer) and
``gpu`` (its GEMMs take ``1 + slow`` times as long at the same shapes: a slow GPU, found from op
efficiency) and ``contended`` (its GPU is time-sliced with another process: each compute kernel
waits for the other process's slice with probability :data:`CONTENDED_SHARE`, stretched by an
exponential draw, so most kernels keep their time, a few take several times as long and the
compute time is ``1 + slow`` times as long on average; its draws come from a generator of its own). The step's compute time is the sum of the base durations of its compute kernels.
``loader`` and ``sync`` add their events to their ranks only and draw no random numbers, so the
rest of the job is drawn as without them. Any number of faults can be combined; none gives a
healthy job.

Op shapes: with ``record_shapes=True`` (implied by a ``gpu`` fault) every GEMM's host op
(``aten::mm``, ``aten::addmm``) carries the arguments PyTorch's ``record_shapes=True`` records
(``Input Dims``, ``Input type``, ``Input Strides``, ``Concrete Inputs``): bf16 matrix products of
8,192 tokens whose shapes fit their durations (about 600 TFLOP/s, an H100 at 60 % of its peak).
Clocks differ between hosts by up to ``clock_offset_ns`` (host 0 is the reference).

Noise between ranks: besides the kernels' ``jitter`` and a small per-GPU speed, ``host_noise``
(default 0) is the chance per rank and step of a host hiccup (Python's garbage collector, an OS
thread, a page fault): the host pauses for a log-normal time around ``host_noise_ms`` before one
of the step's launches, as real jobs show; it draws from a generator of its own, so the job's
other draws stay those of the job without it.

Counterfactual jobs (for checking what-if estimates): ``speedup={"gemm": 1.2}`` divides the
duration of every GPU activity of that class (dtrace's built-in classes: ``gemm``,
``attention``, ``normalization``, ``elementwise``, ``triton``, ``reduction``, ``memcpy``,
``memset``) by the factor, and ``comm=False`` makes every collective transfer take no time
(a collective then ends when its last member arrives). Neither changes a random draw, so the
same seed gives the same job with only that difference; without them the files are
byte-identical to those of earlier versions.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..core.constants import FAULT_KINDS, SPEEDUP_RANGE
from ..core.constants import SYNTH_MAX_JOB_KERNELS as MAX_JOB_KERNELS
from ..core.constants import SYNTH_MAX_KERNELS_PER_RANK as MAX_KERNELS_PER_RANK
from ..core.constants import SYNTH_MAX_RANKS as MAX_RANKS
from ..core.constants import SYNTH_MAX_TILE as MAX_TILE
from ..core.fileio import atomic_write_bytes
from ..errors import UsageError

T0_NS = 1_700_000_000_000_000_000  # the job's wall-clock origin (ns since the epoch)
MAX_SLOW = 100.0
"""The largest fault severity: a rank 101 times as slow."""
MAX_CLOCK_OFFSET_NS = 1_000_000_000_000
CONTENDED_SHARE = 0.25
"""The share of a ``contended`` rank's compute kernels that wait for the other process's time slice."""


@dataclass(frozen=True)
class Fault:
    """One injected fault: ``kind`` (see :data:`FAULT_KINDS`) on ``rank``, severity ``slow``.

    Examples
    --------
    >>> parse_fault("compute:rank=5:slow=0.2")
    Fault(kind='compute', rank=5, slow=0.2)
    """

    kind: str
    rank: int
    slow: float

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise UsageError(f"unknown fault kind {self.kind!r}; valid: {', '.join(FAULT_KINDS)}")
        if self.rank < 0:
            raise UsageError(f"fault rank must be >= 0, got {self.rank}")
        if not 0 < self.slow <= MAX_SLOW:  # inf, nan, 1e309: durations beyond int64
            raise UsageError(f"fault severity slow must be > 0 and at most {MAX_SLOW:g}, got {self.slow}")


def parse_fault(text: str) -> Fault:
    """``KIND:rank=R:slow=S`` (``slow`` defaults to 0.2), e.g. ``link:rank=9:slow=0.5``."""
    parts = [p for p in str(text).strip().split(":") if p]
    if not parts:
        raise UsageError("empty fault; expected KIND:rank=R:slow=S")
    kw: dict[str, str] = {}
    for p in parts[1:]:
        key, sep, val = p.partition("=")
        if not sep or key not in ("rank", "slow"):
            raise UsageError(f"bad fault field {p!r} in {text!r}; expected KIND:rank=R:slow=S")
        kw[key] = val
    if "rank" not in kw:
        raise UsageError(f"fault {text!r} names no rank; expected KIND:rank=R:slow=S")
    try:
        return Fault(parts[0], int(kw["rank"]), float(kw.get("slow", 0.2)))
    except ValueError:
        raise UsageError(f"bad number in fault {text!r}; expected KIND:rank=R:slow=S") from None


def _as_fault(f: Fault | str | dict[str, Any]) -> Fault:
    if isinstance(f, Fault):
        return f
    if isinstance(f, str):
        return parse_fault(f)
    if isinstance(f, dict):
        return Fault(str(f["kind"]), int(f["rank"]), float(f.get("slow", 0.2)))
    raise UsageError(f"a fault is a Fault, a 'KIND:rank=R:slow=S' string or a dict, not {type(f).__name__}")


# -- the op sequence of one training step ---------------------------------------------------

GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
    "_kernel__5x_cublas"
)
GEMM_WGRAD = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_nt_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_nt_align8::Params)"
)
GEMM_DGRAD = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNN"
FLASH_FWD = (
    "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
    "false, false, true, true, false, false>(flash::Flash_fwd_params)"
)
FLASH_BWD = (
    "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, "
    "2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, "
    "cutlass::bfloat16_t> >, true, false, false, false, false, true, false>(flash::Flash_bwd_params)"
)
LN_FWD = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
    "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
)
LN_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>"
    "(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, "
    "c10::BFloat16*, int)"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
GELU = "triton_poi_fused_gelu_0"
GELU_BWD = "triton_poi_fused_gelu_backward_1"
EMBED = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
    "true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
    "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, "
    "int, int, unsigned int, unsigned int, long)"
)
SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
)
REDUCE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float,"
    " float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4>)"
)
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
    "(at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, double const*, "
    "double const*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous "
    "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, "
    "double, double, double, bool, double const*, double const*)"
)
NCCL_KERNEL = {
    "allreduce": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "_reduce_scatter_base": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "allreduce_f32": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
}
NCCL_BUSBW = {"allreduce": lambda n: 2 * (n - 1) / n, "_reduce_scatter_base": lambda n: (n - 1) / n}
INTRA_BUSBW = 180e9  # B/s, NVLink
INTER_BUSBW = 40e9  # B/s, one 400G NIC per GPU
NCCL_LATENCY_NS = 12_000


@dataclass(frozen=True)
class _Op:
    kind: str  # kernel, memcpy, memset, coll, wait_comm, sync
    name: str = ""  # GPU activity name
    cpu: str = ""  # host op name
    dur_ns: float = 0.0  # base GPU duration
    stream: int = 0  # compute stream index (kernel, memcpy, memset)
    group: str = ""  # tp or dp (coll)
    coll: str = ""  # Collective name arg (coll)
    nelems: int = 0  # message elements (coll) or bytes (memcpy, memset)
    dtype: str = "BFloat16"
    blocking: bool = False  # compute streams wait for this collective
    launch: str = "cudaLaunchKernel"
    gemm: tuple[tuple[int, ...], ...] = ()  # a matrix product's operand shapes (bias first for addmm)


def _schedule(layers: int, n_streams: int, tp: int, dp: int) -> list[_Op]:
    """The op sequence of one training step (the same on every rank)."""
    side = 1 if n_streams > 1 else 0
    ops: list[_Op] = [
        _Op("memcpy", "Memcpy HtoD (Pinned -> Device)", "aten::copy_", 0, 0, nelems=8 << 20, launch="cudaMemcpyAsync"),
        _Op("kernel", EMBED, "aten::embedding", 60_000),
    ]
    tp_ar = (
        [
            _Op(
                "coll",
                NCCL_KERNEL["allreduce"],
                "c10d::allreduce_",
                group="tp",
                coll="allreduce",
                nelems=8 << 20,
                blocking=True,
            )
        ]
        if tp > 1
        else []
    )
    for _ in range(layers):
        ops += _forward_layer(side, tp_ar)
    ops += [_Op("kernel", SOFTMAX, "aten::_log_softmax", 200_000), _Op("kernel", REDUCE, "aten::mean", 20_000)]
    for _ in range(layers):
        ops += _backward_layer(side, tp_ar, dp > 1)
    return ops + _optimizer_tail(dp > 1)


# GEMM shapes (tokens T, hidden H, attention width A, MLP width F): 2·M·N·K FLOPs over the
# durations below is ~600 TFLOP/s
_T, _H, _A, _F = 8192, 4096, 2688, 4096


def _forward_layer(side: int, tp_ar: list[_Op]) -> list[_Op]:
    """One transformer layer's forward ops (``tp_ar``: the tensor-parallel all-reduce, if any)."""
    T, H, A, F = _T, _H, _A, _F
    return [
        _Op("kernel", LN_FWD, "aten::native_layer_norm", 40_000),
        _Op("kernel", GEMM, "aten::addmm", 300_000, gemm=((A,), (T, H), (H, A))),
        _Op("kernel", FLASH_FWD, "aten::_flash_attention_forward", 400_000),
        _Op("kernel", GEMM, "aten::mm", 120_000, gemm=((T, 1024), (1024, H))),
        *tp_ar,
        _Op("kernel", ADD, "aten::add", 30_000, side),
        _Op("kernel", LN_FWD, "aten::native_layer_norm", 40_000),
        _Op("kernel", GEMM, "aten::addmm", 450_000, gemm=((F,), (T, H), (H, F))),
        _Op("kernel", GELU, GELU, 60_000, launch="cuLaunchKernel"),
        _Op("kernel", GEMM, "aten::mm", 450_000, gemm=((T, F), (F, H))),
        *tp_ar,
        _Op("kernel", ADD, "aten::add", 30_000, side),
    ]


def _backward_layer(side: int, tp_ar: list[_Op], has_dp: bool) -> list[_Op]:
    """One transformer layer's backward ops, then its gradients' reduce-scatter when data-parallel."""
    T, H, A, F = _T, _H, _A, _F
    ops = [
        _Op("kernel", GEMM_DGRAD, "aten::mm", 450_000, gemm=((T, H), (H, F))),
        _Op("kernel", GEMM_WGRAD, "aten::mm", 450_000, side, gemm=((H, T), (T, F))),
        _Op("kernel", GELU_BWD, GELU_BWD, 80_000, launch="cuLaunchKernel"),
        _Op("kernel", GEMM_DGRAD, "aten::mm", 450_000, gemm=((T, F), (F, H))),
        _Op("kernel", GEMM_WGRAD, "aten::mm", 450_000, side, gemm=((F, T), (T, H))),
        *tp_ar,
        _Op("kernel", LN_BWD, "aten::native_layer_norm_backward", 80_000),
        _Op("kernel", GEMM_DGRAD, "aten::mm", 120_000, gemm=((T, H), (H, 1024))),
        _Op("kernel", GEMM_WGRAD, "aten::mm", 120_000, side, gemm=((H, T), (T, 1024))),
        _Op("kernel", FLASH_BWD, "aten::_flash_attention_backward", 900_000),
        _Op("kernel", GEMM_DGRAD, "aten::mm", 300_000, gemm=((T, A), (A, H))),
        _Op("kernel", GEMM_WGRAD, "aten::mm", 300_000, side, gemm=((A, T), (T, H))),
        *tp_ar,
        _Op("kernel", LN_BWD, "aten::native_layer_norm_backward", 80_000),
    ]
    if has_dp:
        ops += [
            _Op(
                "coll",
                NCCL_KERNEL["_reduce_scatter_base"],
                "c10d::_reduce_scatter_base_",
                group="dp",
                coll="_reduce_scatter_base",
                nelems=12 << 20,
            )
        ]
    return ops


def _optimizer_tail(has_dp: bool) -> list[_Op]:
    """The end of a step: the optimizer, the loss all-reduce when data-parallel, the loss copied
    to the host and the synchronisation."""
    ops = [
        _Op("wait_comm", "cudaStreamWaitEvent"),
        _Op("kernel", ADAM, "Optimizer.step#AdamW.step", 350_000),
        _Op("kernel", ADAM, "Optimizer.step#AdamW.step", 350_000),
        _Op("memset", "Memset (Device)", "aten::zero_", 0, nelems=64 << 20, launch="cudaMemsetAsync"),
    ]
    if has_dp:
        ops += [
            _Op(
                "coll",
                NCCL_KERNEL["allreduce_f32"],
                "c10d::allreduce_",
                group="dp",
                coll="allreduce",
                nelems=1,
                dtype="Float",
                blocking=True,
            )
        ]
    return ops + [
        _Op(
            "memcpy",
            "Memcpy DtoH (Device -> Pinned)",
            "aten::_local_scalar_dense",
            0,
            0,
            nelems=4,
            launch="cudaMemcpyAsync",
        ),
        _Op("sync", "cudaStreamSynchronize"),
    ]


LOADER = _Op("loader", cpu="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
ITEM_COPY = _Op("memcpy", "Memcpy DtoH (Device -> Pinned)", "aten::item", 0, 0, nelems=4, launch="cudaMemcpyAsync")
ITEM_SYNC = _Op("sync", "cudaStreamSynchronize")
"""The ops the ``loader`` and ``sync`` faults insert on their ranks (no random draws: the job's other
draws stay those of the job without the fault)."""


def _layers_for(kernels_per_step: int) -> int:
    return max(1, int(round((kernels_per_step - 7) / 24)))


def _op_speedups(ops: Sequence[_Op], speedup: Mapping[str, float]) -> dict[_Op, float]:
    """``{op: factor}`` for the GPU ops whose dtrace class (built-in classifier) is sped up."""
    if not speedup:
        return {}
    from ..knowledge.classify import load_classmap

    gpu_ops = sorted({o for o in ops if o.kind in ("kernel", "memcpy", "memset")}, key=lambda o: (o.name, o.kind))
    classes = load_classmap(None).classify([o.name for o in gpu_ops], [o.kind for o in gpu_ops])
    return {o: float(speedup[c]) for o, c in zip(gpu_ops, classes) if c in speedup}


def _check_speedup(speedup: Mapping[str, float] | None) -> dict[str, float]:
    out = {}
    for cls, f in dict(speedup or {}).items():
        try:
            factor = float(f)
        except (TypeError, ValueError):
            raise UsageError(f"speedup of class {cls!r} must be a number, not {f!r}") from None
        if not SPEEDUP_RANGE[0] <= factor <= SPEEDUP_RANGE[1]:
            raise UsageError(
                f"speedup of class {cls!r} must be from {SPEEDUP_RANGE[0]:g} to {SPEEDUP_RANGE[1]:g}, got {factor:g}"
            )
        out[str(cls)] = factor
    return out


def _default_tp(ranks: int, gpus_per_host: int) -> int:
    for tp in (8, 4, 2):
        if tp <= gpus_per_host and ranks % tp == 0 and ranks // tp >= 2:
            return tp
    return 1


# -- simulation ------------------------------------------------------------------------------


@dataclass
class _Record:
    """One op instance on every rank: host op, launch call and GPU activity times (true ns)."""

    op: _Op
    step: int
    cpu_start: np.ndarray
    cpu_end: np.ndarray
    rt_start: np.ndarray
    rt_end: np.ndarray
    gpu_start: np.ndarray | None = None
    gpu_end: np.ndarray | None = None
    seq: int = -1
    ranks: np.ndarray | None = None  # an injected fault's op: the ranks that run it (None: every rank)


class _Job:
    def __init__(
        self,
        ranks: int,
        steps: int,
        seed: int,
        gpus_per_host: int,
        streams: int,
        tp: int,
        faults: Sequence[Fault],
        clock_offset_ns: int,
        kernels_per_step: int,
        jitter: float,
        speedup: Mapping[str, float] | None = None,
        comm: bool = True,
        record_shapes: bool = False,
        host_noise: float = 0.0,
        host_noise_ms: float = 0.5,
    ) -> None:
        self.R, self.steps, self.tp, self.dp = ranks, steps, tp, ranks // tp
        self.record_shapes = record_shapes
        self.gph = gpus_per_host
        self.n_streams = streams
        self.rng = np.random.default_rng(seed)
        self.faults = list(faults)
        self.jitter = jitter
        self.layers = _layers_for(kernels_per_step)
        self.ops = _schedule(self.layers, streams, tp, self.dp)
        self.records: list[_Record] = []
        self.hosts = (np.arange(ranks) // gpus_per_host).astype(np.int64)
        n_hosts = int(self.hosts.max()) + 1
        off = self.rng.uniform(-clock_offset_ns, clock_offset_ns, n_hosts).round().astype(np.int64)
        off[0] = 0
        self.host_offset = off
        self.slow = {k: np.zeros(ranks) for k in FAULT_KINDS}
        for f in self.faults:
            self.slow[f.kind][f.rank] += f.slow
        self.rank_speed = self.rng.lognormal(0.0, jitter / 6, ranks)  # silicon lottery, small
        # host time the loader and sync faults add per step: slow × the step's compute time
        compute_ns = float(sum(o.dur_ns for o in self.ops if o.kind == "kernel"))
        self.stall_ns = {k: self.slow[k] * compute_ns for k in ("loader", "sync")}
        self.speedup = _op_speedups(self.ops, speedup or {})
        self.comm = comm
        self.step_windows: list[tuple[np.ndarray, np.ndarray]] = []
        # draws of their own: the contended fault and host noise leave the job's other draws as they were
        self.contended_rng = np.random.default_rng([seed, 1])
        self.noise_rng = np.random.default_rng([seed, 2])
        self.host_noise, self.host_noise_ns = float(host_noise), float(host_noise_ms) * 1e6
        self.hiccup_at = np.zeros(ranks, np.int64)

    def _group_ids(self, kind: str) -> np.ndarray:
        r = np.arange(self.R)
        return r // self.tp if kind == "tp" else r % self.tp

    def _transfer_ns(self, op: _Op, kind: str, gid: np.ndarray) -> np.ndarray:
        n = self.tp if kind == "tp" else self.dp
        width = 4 if op.dtype == "Float" else 2
        busbw = INTER_BUSBW if (kind == "dp" and self.gph < self.R) else INTRA_BUSBW
        base = NCCL_LATENCY_NS + op.nelems * width * NCCL_BUSBW[op.coll](n) / busbw * 1e9
        n_groups = int(gid.max()) + 1
        t = base * self.rng.lognormal(0.0, 0.02, n_groups)
        link = np.zeros(n_groups)
        np.maximum.at(link, gid, self.slow["link"])
        return t * (1.0 + link) * (1.0 if self.comm else 0.0)

    def run(self) -> None:
        R, rng = self.R, self.rng
        cstreams = list(range(self.n_streams))
        free = {s: np.zeros(R) for s in cstreams}
        comm_free = {"tp": np.zeros(R), "dp": np.zeros(R)}
        seq = {"tp": 0, "dp": 0}
        h = rng.uniform(0, 50_000, R)  # host clock (true ns)
        for step in range(self.steps):
            step_start = h.copy()
            if self.stall_ns["loader"].any():
                h = self._loader(step, h)
            hiccup = self._hiccups()
            for i, op in enumerate(self.ops):
                if hiccup is not None:
                    h = h + np.where(self.hiccup_at == i, hiccup, 0.0)
                if op.kind == "wait_comm" and self.stall_ns["sync"].any():
                    h = self._item(step, h, free)
                if op.kind == "wait_comm":
                    h = self._wait_comm(op, step, h, free, comm_free)
                elif op.kind == "sync":
                    h = self._sync(op, step, h, free)
                else:
                    h = self._launch(op, step, h, free, comm_free, seq)
            self.step_windows.append((step_start, h.copy()))

    def _wait_comm(
        self, op: _Op, step: int, h: np.ndarray, free: dict[int, np.ndarray], comm_free: dict[str, np.ndarray]
    ) -> np.ndarray:
        """The compute streams wait for the collectives so far (``cudaStreamWaitEvent``)."""
        t = np.maximum(comm_free["tp"], comm_free["dp"])
        for s in free:
            free[s] = np.maximum(free[s], t)
        rt = h + self.rng.uniform(2_000, 4_000, self.R)
        self.records.append(_Record(op, step, h, h, h, rt))
        return rt + 1_000

    def _sync(self, op: _Op, step: int, h: np.ndarray, free: dict[int, np.ndarray]) -> np.ndarray:
        """``cudaStreamSynchronize`` until every compute stream is idle, then the data loader and logging."""
        busy = np.max([free[s] for s in free], axis=0)
        end = np.maximum(h + 2_000, busy + self.rng.uniform(2_000, 5_000, self.R))
        self.records.append(_Record(op, step, h, h, h, end))
        return end + self.rng.uniform(20_000, 60_000, self.R)  # data loader, logging

    def _launch(
        self,
        op: _Op,
        step: int,
        h: np.ndarray,
        free: dict[int, np.ndarray],
        comm_free: dict[str, np.ndarray],
        seq: dict[str, int],
    ) -> np.ndarray:
        """A host op launching a GPU activity: its host and runtime spans, then the activity on
        its stream once the stream (and, for a collective, every member) is ready."""
        R, rng = self.R, self.rng
        dur = self._gpu_duration(op)
        cost = rng.lognormal(np.log(9_000), 0.25, R)
        if op.kind != "coll":
            cost = np.where(self.slow["launch"] > 0, np.maximum(cost, (1 + self.slow["launch"]) * dur), cost)
        rt_dur = rng.uniform(3_000, 6_000, R)
        cost = np.maximum(cost, rt_dur + 1_500)  # the launch call nests inside its host op
        cpu_start, cpu_end = h, h + cost
        rt_start = cpu_end - rt_dur - 500
        ready = rt_start + rng.uniform(1_500, 3_000, R)
        rec = _Record(op, step, cpu_start, cpu_end, rt_start, rt_start + rt_dur)
        if op.kind == "coll":
            start, end = self._collective(op, ready, free, comm_free)
            seq[op.group] += 1
            rec.seq = seq[op.group]
        else:
            s = op.stream
            dep = free[0] if s != 0 else free[s]
            start = np.maximum(np.maximum(ready, free[s]), dep)
            end = start + dur
            free[s] = end
        rec.gpu_start, rec.gpu_end = start, end
        self.records.append(rec)
        return cpu_end + rng.uniform(800, 2_500, R)

    def _collective(
        self, op: _Op, ready: np.ndarray, free: dict[int, np.ndarray], comm_free: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """A collective's start and end on every rank: it ends a transfer after its group's last
        member arrives; a blocking one holds the compute streams until then."""
        deps = np.max([free[s] for s in free], axis=0)
        start = np.maximum(np.maximum(ready, comm_free[op.group]), deps)
        gid = self._group_ids(op.group)
        last = np.full(int(gid.max()) + 1, -np.inf)
        np.maximum.at(last, gid, start)
        group_end = last + self._transfer_ns(op, op.group, gid)
        end = group_end[gid] + self.rng.uniform(0, 1_500, self.R)
        comm_free[op.group] = end
        if op.blocking:
            for s in free:
                free[s] = np.maximum(free[s], end)
        return start, end

    def _loader(self, step: int, h: np.ndarray) -> np.ndarray:
        """The ``loader`` fault: the data loader stalls at the start of the step on its ranks."""
        stall = self.stall_ns["loader"]
        self.records.append(_Record(LOADER, step, h, h + stall, h, h, ranks=stall > 0))
        return h + stall

    def _hiccups(self) -> np.ndarray | None:
        """Host noise for one step: per rank, a pause (ns, 0 for most ranks) and the op it precedes."""
        if self.host_noise <= 0:
            return None
        rng = self.noise_rng
        hit = rng.random(self.R) < self.host_noise
        self.hiccup_at = rng.integers(0, len(self.ops), self.R)
        return np.where(hit, self.host_noise_ns * rng.lognormal(0.0, 0.5, self.R), 0.0)

    def _item(self, step: int, h: np.ndarray, free: dict[int, np.ndarray]) -> np.ndarray:
        """The ``sync`` fault: ``.item()`` between the backward pass and the optimizer on its ranks:
        a 4-byte device-to-host copy on the first compute stream, ``cudaStreamSynchronize`` until
        every compute stream is idle, then host work before the next launch."""
        think = self.stall_ns["sync"]
        on = think > 0
        cpu_end = h + 9_000.0
        rt_start = cpu_end - 4_500.0
        start = np.maximum(rt_start + 2_000.0, free[0])
        end = start + 1_500.0 + ITEM_COPY.nelems / 20e9 * 1e9
        free[0] = np.where(on, end, free[0])
        copy = _Record(ITEM_COPY, step, h, cpu_end, rt_start, rt_start + 4_000.0, start, end, ranks=on)
        wait = cpu_end + 1_500.0
        busy = np.max(list(free.values()), axis=0)
        done = np.maximum(wait + 2_000.0, busy + 3_000.0)
        self.records += [copy, _Record(ITEM_SYNC, step, wait, wait, wait, done, ranks=on)]
        return np.where(on, done + 1_000.0 + think, h)

    def _gpu_duration(self, op: _Op) -> np.ndarray:
        R = self.R
        if op.kind == "coll":
            return np.zeros(R)
        if op.kind in ("memcpy", "memset"):
            bw = 20e9 if op.kind == "memcpy" else 1.5e12
            base = 1_500 + op.nelems / bw * 1e9
            d = base * self.rng.lognormal(0.0, self.jitter, R)
            return d / self.speedup[op] if op in self.speedup else d
        d = op.dur_ns * self.rank_speed * self.rng.lognormal(0.0, self.jitter, R)
        d = d * (1.0 + self.slow["compute"])
        cont = self.slow["contended"]
        if cont.any():  # a time slice of the other process before some kernels: a long tail
            waits = self.contended_rng.random(R) < CONTENDED_SHARE
            stretch = self.contended_rng.exponential(1.0, R) * cont / CONTENDED_SHARE
            d = d * np.where(waits, 1.0 + stretch, 1.0)
        if op.gemm:
            d = d * (1.0 + self.slow["gpu"])
        return d / self.speedup[op] if op in self.speedup else d


# -- trace text ------------------------------------------------------------------------------


def _esc(s: str) -> str:
    return json.dumps(s).replace("%", "%%")


_TS = '"ts":%d.%03d,"dur":%d.%03d'
FIRST_EXTERNAL_ID = 500  # of the step annotations; the ops' follow
FAULT_EV_IDX = 1_000_000  # "Ev Idx" of an injected fault's host op: this + the index of the op before it
STREAM_IDS_BASE = (7, 13, 17, 21, 25, 29, 33, 37)
NCCL_STREAMS = {"tp": 52, "dp": 56}


@dataclass
class _RankClock:
    """One rank's ids in its trace, and how its true times become trace timestamps."""

    rank: int
    device: int
    pid: int  # the host process; its thread has the same id
    base_ns: int  # the trace's baseTimeNanoseconds
    shift_ns: int  # true ns -> ns after base_ns (the host's clock offset included)

    def ts(self, ns: float, dur: float) -> tuple[int, int, int, int]:
        """``ts`` and ``dur`` in µs with three decimals: (µs, ns remainder, µs, ns remainder)."""
        start = int(ns) + self.shift_ns
        length = max(int(dur), 0)
        return start // 1000, start % 1000, length // 1000, length % 1000


class _Writer:
    """Per-op string templates; :meth:`rank_text` fills them for one rank."""

    def __init__(self, job: _Job) -> None:
        self.job = job
        self.streams = list(STREAM_IDS_BASE[: job.n_streams])
        tp, dp = job.tp, job.dp
        # process groups: TP groups "1".."dp", DP groups "dp+1".."dp+tp" (PyTorch names groups in creation order)
        self.group_name = {"tp": lambda g: str(1 + g), "dp": lambda g: str(1 + dp + g)}
        self.group_ranks = {"tp": lambda g: list(range(g * tp, g * tp + tp)), "dp": lambda g: list(range(g, job.R, tp))}

    def groups(self) -> list[dict[str, Any]]:
        out = []
        for kind, count in (("tp", self.job.dp), ("dp", self.job.tp)):
            size = self.job.tp if kind == "tp" else self.job.dp
            if size < 2:
                continue
            for g in range(count):
                out.append({"name": self.group_name[kind](g), "kind": kind, "ranks": self.group_ranks[kind](g)})
        return out

    def rank_text(self, r: int, gzip: bool) -> bytes:
        """The Kineto trace of rank ``r`` (gzip-compressed when ``gzip``).

        Phases: the rank's clock and ids (:meth:`_clock`), the step annotations
        (:meth:`_step_events`), each op's host, launch, GPU and flow events
        (:meth:`_op_events`), then the metadata and header around them.
        """
        clock = self._clock(r)
        steps = self._step_events(clock)
        # the ops' external ids leave one id free after the steps' (kept: same bytes as before)
        ops = self._op_events(clock, first_external_id=FIRST_EXTERNAL_ID + len(steps) + 1)
        text = (
            json.dumps(self._header(clock))[:-1]
            + ',\n  "traceEvents": [\n'
            + ",\n".join(self._metadata(clock) + steps + ops)
            + f'\n  ],\n  "traceName": "rank-{r}.json", "displayTimeUnit": "ms",\n'
            f'  "baseTimeNanoseconds": {clock.base_ns}\n}}\n'
        )
        return _compress(text.encode()) if gzip else text.encode()

    def _clock(self, r: int) -> _RankClock:
        """Rank ``r``'s ids and trace clock: its host's offset and a random ``baseTimeNanoseconds``."""
        job = self.job
        host_offset = int(job.host_offset[job.hosts[r]])
        base_ns = T0_NS + host_offset - 1_000_000 - int(job.rng.integers(0, 500_000))
        return _RankClock(r, r % job.gph, 10_000 + 17 * r, base_ns, T0_NS + host_offset - base_ns)

    def _step_events(self, clock: _RankClock) -> list[str]:
        """One ``ProfilerStep#N`` annotation per step (external ids from :data:`FIRST_EXTERNAL_ID`)."""
        job, r = self.job, clock.rank
        return [
            (
                '{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":%d,"tid":%d,'
                + _TS
                + ',"args":{"External id":%d}}'
            )
            % ((step + 1, clock.pid, clock.pid) + clock.ts(start[r], end[r] - start[r]) + (FIRST_EXTERNAL_ID + step,))
            for (start, end), step in zip(job.step_windows, range(job.steps))
        ]

    def _process_groups(self, r: int) -> dict[str, tuple[str, str]]:
        """``tp``/``dp`` → (process group name, its ranks as text) of the groups holding rank ``r``."""
        job = self.job
        group = {"tp": r // job.tp, "dp": r % job.tp}
        return {
            kind: (self.group_name[kind](g), "[" + ", ".join(map(str, self.group_ranks[kind](g))) + "]")
            for kind, g in group.items()
        }

    def _op_events(self, clock: _RankClock, first_external_id: int) -> list[str]:
        """Every op instance's events on one rank, in the order of the simulation's records.

        ``wait_comm`` and ``sync`` are a runtime call alone; every other op is a host op, its
        launch call, its GPU activity and the flow arrow between them (:meth:`_launched_events`).
        """
        r = clock.rank
        groups = self._process_groups(r)
        events: list[str] = []
        correlation = 1000 + r
        external_id = first_external_id - 1
        index = -1
        for rec in self.job.records:
            op = rec.op
            if rec.ranks is None:
                index += 1
            elif not rec.ranks[r]:
                continue  # an injected fault's op on a rank without the fault
            if op.kind == "loader":
                events.append(
                    ('{"ph":"X","cat":"user_annotation","name":%s,"pid":%d,"tid":%d,' + _TS + "}")
                    % (
                        (_esc(op.cpu), clock.pid, clock.pid)
                        + clock.ts(rec.cpu_start[r], rec.cpu_end[r] - rec.cpu_start[r])
                    )
                )
                continue
            if op.kind in ("wait_comm", "sync"):
                events.append(
                    (
                        '{"ph":"X","cat":"cuda_runtime","name":%s,"pid":%d,"tid":%d,'
                        + _TS
                        + ',"args":{"cbid":%d,"correlation":%d}}'
                    )
                    % (
                        (_esc(op.name), clock.pid, clock.pid)
                        + clock.ts(rec.rt_start[r], rec.rt_end[r] - rec.rt_start[r])
                        + (131 if op.kind == "sync" else 147, correlation)
                    )
                )
                correlation += 1
                continue
            external_id += 1
            correlation += 1
            ev_idx = index if rec.ranks is None else FAULT_EV_IDX + index
            events += self._launched_events(clock, ev_idx, rec, external_id, correlation, groups)
        return events

    def _collective_args(self, op: _Op, seq: int, groups: dict[str, tuple[str, str]]) -> str:
        """The ``args`` PyTorch records on a collective's host op and kernel."""
        job = self.job
        name, ranks_text = groups[op.group]
        size = job.tp if op.group == "tp" else job.dp
        out_nelems = op.nelems // size if op.coll == "_reduce_scatter_base" else op.nelems
        return (
            f'"Collective name":"{op.coll}","In msg nelems":{op.nelems},"Out msg nelems":{out_nelems},'
            f'"Group size":{size},"dtype":"{op.dtype}","In split size":"[]","Out split size":"[]",'
            f'"Process Group Name":"{name}","Process Group Description":'
            f'"{"tensor_parallel" if op.group == "tp" else "data_parallel"}",'
            f'"Process Group Ranks":"{ranks_text}","Seq":{seq}'
        )

    def _launched_events(
        self,
        clock: _RankClock,
        index: int,
        rec: _Record,
        external_id: int,
        correlation: int,
        groups: dict[str, tuple[str, str]],
    ) -> list[str]:
        """A launched op on one rank: host op, launch call, GPU activity, flow start and end."""
        op, r, pid, dev = rec.op, clock.rank, clock.pid, clock.device
        cpu_args = f'"External id":{external_id},"Record function id":0,"Ev Idx":{index}'
        if self.job.record_shapes and op.gemm:
            cpu_args += "," + _shape_args(op.gemm)
        stream = NCCL_STREAMS[op.group] if op.kind == "coll" else self.streams[op.stream]
        coll_args = self._collective_args(op, rec.seq, groups) if op.kind == "coll" else ""
        if coll_args:
            cpu_args += "," + coll_args
        host_op = ('{"ph":"X","cat":"cpu_op","name":%s,"pid":%d,"tid":%d,' + _TS + ',"args":{%s}}') % (
            (_esc(op.cpu), pid, pid) + clock.ts(rec.cpu_start[r], rec.cpu_end[r] - rec.cpu_start[r]) + (cpu_args,)
        )
        launch_cat = "cuda_driver" if op.launch == "cuLaunchKernel" else "cuda_runtime"
        launch = (
            '{"ph":"X","cat":"%s","name":"%s","pid":%d,"tid":%d,'
            + _TS
            + ',"args":{"External id":%d,"cbid":211,"correlation":%d}}'
        ) % (
            (launch_cat, op.launch, pid, pid)
            + clock.ts(rec.rt_start[r], rec.rt_end[r] - rec.rt_start[r])
            + (external_id, correlation)
        )
        assert rec.gpu_start is not None and rec.gpu_end is not None
        gpu_start, gpu_end = float(rec.gpu_start[r]), float(rec.gpu_end[r])
        gpu_args = (
            f'"External id":{external_id},"queued":0,"device":{dev},"context":1,"stream":{stream},'
            f'"correlation":{correlation}'
        )
        if op.kind in ("memcpy", "memset"):
            gbps = op.nelems / max(gpu_end - gpu_start, 1.0)
            gpu_args += f',"bytes":{op.nelems},"memory bandwidth (GB/s)":{gbps:.3f}'
            gpu_cat = "gpu_memcpy" if op.kind == "memcpy" else "gpu_memset"
        else:
            gpu_cat = "kernel"
            gpu_args += (
                ',"registers per thread":128,"shared memory":49152,"blocks per SM":1.5,'
                '"warps per SM":12,"grid":[264, 1, 1],"block":[256, 1, 1],"est. achieved occupancy %":19'
            )
            if coll_args:
                gpu_args += "," + coll_args
        gpu = ('{"ph":"X","cat":"%s","name":%s,"pid":%d,"tid":%d,' + _TS + ',"args":{%s}}') % (
            (gpu_cat, _esc(op.name), dev, stream) + clock.ts(gpu_start, gpu_end - gpu_start) + (gpu_args,)
        )
        flow_from = clock.ts(rec.rt_start[r], 0)
        flow_to = clock.ts(gpu_start, 0)
        return [
            host_op,
            launch,
            gpu,
            '{"ph":"s","id":%d,"pid":%d,"tid":%d,"ts":%d.%03d,"cat":"ac2g","name":"ac2g"}'
            % (correlation, pid, pid, flow_from[0], flow_from[1]),
            '{"ph":"f","id":%d,"pid":%d,"tid":%d,"ts":%d.%03d,"cat":"ac2g","name":"ac2g","bp":"e"}'
            % (correlation, dev, stream, flow_to[0], flow_to[1]),
        ]

    def _metadata(self, clock: _RankClock) -> list[str]:
        """Process and thread names: the host process, the GPU and its streams."""
        pid, dev = clock.pid, clock.device
        return [
            '{"name":"process_name","ph":"M","ts":0.000,"pid":%d,"tid":0,"args":{"name":"python3"}}' % pid,
            '{"name":"process_name","ph":"M","ts":0.000,"pid":%d,"tid":0,"args":{"name":"GPU %d"}}' % (dev, dev),
        ] + [
            '{"name":"thread_name","ph":"M","ts":0.000,"pid":%d,"tid":%d,"args":{"name":"stream %d"}}' % (dev, s, s)
            for s in self.streams + sorted(NCCL_STREAMS.values())
        ]

    def _header(self, clock: _RankClock) -> dict[str, Any]:
        """The trace's top-level fields before ``traceEvents``: device properties, distributedInfo."""
        job = self.job
        return {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": clock.device,
                    "name": "NVIDIA H100 80GB HBM3",
                    "totalGlobalMem": 85031714816,
                    "computeMajor": 9,
                    "computeMinor": 0,
                    "maxThreadsPerBlock": 1024,
                    "maxThreadsPerMultiprocessor": 2048,
                    "regsPerBlock": 65536,
                    "warpSize": 32,
                    "sharedMemPerBlock": 49152,
                    "numSms": 132,
                }
            ],
            "distributedInfo": {
                "backend": "nccl",
                "rank": clock.rank,
                "world_size": job.R,
                "pg_count": 1 + job.dp + job.tp,
                "pg_config": [],
                "nccl_version": "2.21.5",
            },
            "record_shapes": 1,
            "with_stack": 0,
        }


def _shape_args(shapes: tuple[tuple[int, ...], ...]) -> str:
    """The ``record_shapes=True`` args of a bf16 GEMM host op (``aten::addmm`` when a bias comes first).

    Examples
    --------
    >>> _shape_args(((8, 4), (4, 2)))
    '"Input Dims":[[8,4],[4,2]],"Input type":["c10::BFloat16","c10::BFloat16"],"Input Strides":[[4,1],[2,1]],"Concrete Inputs":["",""]'
    """
    dims = [list(s) for s in shapes]
    strides = [[s[1], 1] if len(s) == 2 else [1] for s in shapes]
    types = ["c10::BFloat16"] * len(shapes)
    concrete = [""] * len(shapes)
    if len(shapes) == 3:  # addmm(bias, mat1, mat2, beta, alpha)
        dims += [[], []]
        strides += [[], []]
        types += ["Scalar", "Scalar"]
        concrete += ["1", "1"]
    return (
        f'"Input Dims":{json.dumps(dims, separators=(",", ":"))},'
        f'"Input type":{json.dumps(types, separators=(",", ":"))},'
        f'"Input Strides":{json.dumps(strides, separators=(",", ":"))},'
        f'"Concrete Inputs":{json.dumps(concrete, separators=(",", ":"))}'
    )


def _compress(data: bytes) -> bytes:
    """gzip at level 1 with a fixed mtime (same bytes every run)."""
    try:
        from isal import igzip

        return igzip.compress(data, 1, mtime=0)
    except ImportError:  # pragma: no cover - isal is a dependency
        import gzip as _gz

        return _gz.compress(data, 1, mtime=0)


def generate(
    out_dir: str | os.PathLike[str],
    *,
    ranks: int = 8,
    steps: int = 3,
    seed: int = 0,
    gpus_per_host: int = 8,
    streams: int = 2,
    faults: Iterable[Fault | str | dict[str, Any]] = (),
    clock_offset_ns: int = 2_000_000,
    gzip: bool = True,
    kernels_per_step: int = 55,
    tp: int | None = None,
    jitter: float = 0.02,
    speedup: Mapping[str, float] | None = None,
    comm: bool = True,
    record_shapes: bool = False,
    host_noise: float = 0.0,
    host_noise_ms: float = 0.5,
) -> dict[str, Any]:
    """Write one Kineto trace per rank of a simulated training job, plus its ground truth.

    Parameters
    ----------
    out_dir
        Directory to write ``rank-{r}.json.gz`` (``.json`` with ``gzip=False``) and
        ``ground_truth.json`` to (created if missing).
    ranks, steps
        World size and profiled steps (``ProfilerStep#1`` ...).
    seed
        Seed of every random choice; the same arguments give the same files.
    gpus_per_host
        GPUs per host: ranks ``h*gpus_per_host ...`` share a host, its clock and its NVLink.
    streams
        Compute streams per GPU (the NCCL streams come on top).
    faults
        :class:`Fault` objects, ``"KIND:rank=R:slow=S"`` strings or dicts (see :data:`FAULT_KINDS`).
    clock_offset_ns
        Each host's clock is off by a uniform draw in ``±clock_offset_ns`` (host 0 exact).
    gzip
        Compress the traces.
    kernels_per_step
        About this many compute kernels per step (sets the number of transformer layers).
    tp
        Tensor-parallel group size (default: the largest of 8, 4, 2 that fits a host and leaves
        a data-parallel size ≥ 2; else 1). ``ranks`` must be a multiple of it.
    jitter
        Relative spread (log-normal sigma) of kernel durations.
    speedup
        ``{class: factor}``: GPU activities of these dtrace classes take ``1 / factor`` of their
        time (a counterfactual job for what-if checks; the random draws are unchanged).
    comm
        ``False``: collective transfers take no time (a collective ends when its last member
        arrives), the counterfactual of hidden communication.
    record_shapes
        Record the GEMMs' arguments (``Input Dims``, ``Input type``, ...) as PyTorch's
        ``record_shapes=True`` does, for the op performance model; a ``gpu`` fault implies it.
    host_noise, host_noise_ms
        The chance per rank and step of a host hiccup, and its typical length in ms (module docs:
        noise between ranks as real jobs have it; 0: none, the files as without it).

    Returns
    -------
    dict
        The ground truth also written to ``ground_truth.json``: parameters, process groups,
        host clock offsets, ``faults`` and ``stragglers`` (the faulty ranks).

    Examples
    --------
    >>> import tempfile
    >>> truth = generate(tempfile.mkdtemp(), ranks=16, steps=2, faults=["compute:rank=5:slow=0.2"])
    >>> truth["stragglers"], truth["tp"], truth["dp"]
    ([5], 8, 2)
    """
    _check_sizes(ranks, steps, gpus_per_host, streams, kernels_per_step, clock_offset_ns, jitter)
    _check_noise(host_noise, host_noise_ms)
    tp = _default_tp(ranks, gpus_per_host) if tp is None else int(tp)
    if tp < 1 or ranks % tp:
        raise UsageError(f"tp={tp} does not divide ranks={ranks}")
    fl = [_as_fault(f) for f in faults]
    sp = _check_speedup(speedup)
    bad = [f for f in fl if f.rank >= ranks]
    if bad:
        raise UsageError(f"fault rank {bad[0].rank} is outside the job's ranks 0..{ranks - 1}")
    out = os.fspath(out_dir)
    os.makedirs(out, exist_ok=True)
    job = _Job(
        ranks,
        steps,
        seed,
        gpus_per_host,
        streams,
        tp,
        fl,
        int(clock_offset_ns),
        kernels_per_step,
        jitter,
        speedup=sp,
        comm=bool(comm),
        record_shapes=bool(record_shapes) or any(f.kind == "gpu" for f in fl),
        host_noise=host_noise,
        host_noise_ms=host_noise_ms,
    )
    job.run()
    writer = _Writer(job)
    suffix = ".json.gz" if gzip else ".json"
    for r in range(ranks):
        data = writer.rank_text(r, gzip)
        path = os.path.join(out, f"rank-{r}{suffix}")
        atomic_write_bytes(path, data)
    settings = {
        "ranks": ranks,
        "steps": steps,
        "seed": seed,
        "gpus_per_host": gpus_per_host,
        "streams": streams,
        "tp": tp,
        "dp": ranks // tp,
    }
    truth = _ground_truth(job, writer, settings, fl, sp, jitter=jitter, clock_offset_ns=clock_offset_ns, suffix=suffix)
    with open(os.path.join(out, "ground_truth.json"), "w", encoding="utf-8") as f:
        json.dump(truth, f, indent=1)
    return truth


def _check_sizes(
    ranks: int, steps: int, gpus_per_host: int, streams: int, kernels_per_step: int, clock_offset_ns: int, jitter: float
) -> None:
    """The sizes of a generated job: whole numbers within the limits."""
    for name, value in (
        ("ranks", ranks),
        ("steps", steps),
        ("gpus_per_host", gpus_per_host),
        ("streams", streams),
        ("kernels_per_step", kernels_per_step),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise UsageError(f"{name} must be a whole number, not {value!r}")
    if ranks < 1 or steps < 1:
        raise UsageError("ranks and steps must be >= 1")
    if ranks > MAX_RANKS:
        raise UsageError(f"ranks={ranks:,}: at most {MAX_RANKS:,} ranks")
    if steps * kernels_per_step > MAX_KERNELS_PER_RANK or ranks * steps * kernels_per_step > MAX_JOB_KERNELS:
        raise UsageError(
            f"ranks={ranks:,}, steps={steps:,}, kernels_per_step={kernels_per_step:,}: at most "
            f"{MAX_KERNELS_PER_RANK:,} kernels per rank (steps x kernels_per_step) and {MAX_JOB_KERNELS:,} "
            "in the job"
        )
    if gpus_per_host < 1 or streams < 1 or kernels_per_step < 1:
        raise UsageError("gpus_per_host, streams and kernels_per_step must be >= 1")
    if streams > len(STREAM_IDS_BASE):
        raise UsageError(f"at most {len(STREAM_IDS_BASE)} compute streams")
    if not 0 <= clock_offset_ns <= MAX_CLOCK_OFFSET_NS:
        raise UsageError(f"clock_offset_ns must be from 0 to {MAX_CLOCK_OFFSET_NS:,} (1000 s), got {clock_offset_ns!r}")
    if not 0 <= jitter <= 1:
        raise UsageError(f"jitter must be from 0 to 1 (a log-normal sigma), got {jitter!r}")


def _check_noise(host_noise: float, host_noise_ms: float) -> None:
    if not 0 <= host_noise <= 1:
        raise UsageError(f"host_noise must be from 0 to 1 (a chance per rank and step), got {host_noise!r}")
    if not 0 <= host_noise_ms <= 1_000:
        raise UsageError(f"host_noise_ms must be from 0 to 1000, got {host_noise_ms!r}")


def _ground_truth(
    job: _Job,
    writer: _Writer,
    settings: dict[str, int],
    fl: list[Fault],
    sp: dict[str, float],
    *,
    jitter: float,
    clock_offset_ns: int,
    suffix: str,
) -> dict[str, Any]:
    """What the generated job is made of (written to ``ground_truth.json``): ``settings`` (ranks,
    steps, seed, gpus_per_host, streams, tp, dp), then what the job drew."""
    n_compute = sum(1 for o in job.ops if o.kind == "kernel")
    return {
        "generator": "dtrace.generate.synth",
        **settings,
        "layers": job.layers,
        "kernels_per_step": n_compute,
        "collectives_per_step": {k: sum(1 for o in job.ops if o.kind == "coll" and o.group == k) for k in ("tp", "dp")},
        "jitter": jitter,
        "clock_offset_ns": int(clock_offset_ns),
        "host_clock_offsets_ns": [int(x) for x in job.host_offset],
        "process_groups": writer.groups(),
        "faults": [asdict(f) | {"effect": FAULT_KINDS[f.kind]} for f in fl],
        "stragglers": sorted({f.rank for f in fl}),
        **({"speedup": sp} if sp else {}),
        **({"comm": False} if not job.comm else {}),
        **({"record_shapes": True} if job.record_shapes else {}),
        **({"host_noise": job.host_noise, "host_noise_ms": job.host_noise_ns / 1e6} if job.host_noise > 0 else {}),
        "files": [f"rank-{r}{suffix}" for r in range(settings["ranks"])],
    }


def from_trace(
    out_dir: str | os.PathLike[str],
    source: str | os.PathLike[str],
    *,
    tile: int = 1,
    ranks: int = 8,
    seed: int = 0,
    jitter: float = 0.05,
    gzip: bool = True,
) -> dict[str, Any]:
    """A job built from a real trace: ``tile`` copies in time, replicated to ``ranks`` ranks.

    Each rank's file is the source tiled ``tile`` times (:func:`dtrace.generate.tile.tile_trace`) with
    ``distributedInfo`` rewritten to that rank and every GPU event shortened by a random fraction
    below ``jitter`` (seeded per rank), so ranks differ like real ones. For benchmarks: the
    bytes per event are those of the real trace. Writes ``ground_truth.json`` (no faults).
    """
    from .tile import tile_trace

    if ranks < 1 or not 1 <= tile <= MAX_TILE:
        raise UsageError(f"ranks must be >= 1 and tile from 1 to {MAX_TILE:,}")
    if ranks > MAX_RANKS:
        raise UsageError(f"ranks={ranks:,}: at most {MAX_RANKS:,} ranks")
    out = os.fspath(out_dir)
    os.makedirs(out, exist_ok=True)
    suffix = ".json.gz" if gzip else ".json"
    infos = [
        tile_trace(
            source,
            os.path.join(out, f"rank-{r}{suffix}"),
            times=tile,
            rank=r,
            world_size=ranks,
            jitter=jitter,
            seed=seed,
            gzip=gzip,
        )
        for r in range(ranks)
    ]
    truth = {
        "generator": "dtrace.generate.tile",
        "source": os.path.abspath(os.fspath(source)),
        "tile": tile,
        "ranks": ranks,
        "seed": seed,
        "jitter": jitter,
        "faults": [],
        "stragglers": [],
        "events_per_rank": int(infos[0]["events"]),
        "json_bytes_per_rank": int(infos[0]["json_bytes"]),
        "files": [f"rank-{r}{suffix}" for r in range(ranks)],
    }
    with open(os.path.join(out, "ground_truth.json"), "w", encoding="utf-8") as f:
        json.dump(truth, f, indent=1)
    return truth

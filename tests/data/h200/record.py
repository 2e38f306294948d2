"""Record the small real traces under tests/data/h200/ on one GPU (run once on an H200).

Three recordings, each in its own process so that one failing cannot lose the others:

``ops``   PyTorch profiler (``record_shapes=True``, ``with_flops=True``) of known GEMM, convolution,
          attention, elementwise, normalisation, reduction, embedding and copy shapes, a CUDA graph
          replay and a one-rank NCCL all-reduce: the op-efficiency model's real-data check
          (FLOPs and bytes per (op, shapes, dtypes); PyTorch's own ``flops`` argument is an
          independent count for GEMMs and convolutions).
``host``  PyTorch profiler (``profile_memory=True``) of a toy training loop whose steps are each
          bound by something known by construction (see ``HOST_STEPS``): the host side's check
          (launch statistics, queues, memory, what bounds each step).
``jax``   a JAX profile whose steps are marked with ``jax.profiler.StepTraceAnnotation("train",
          step_num=N)``, N = 0..2 (xplane.pb and jax's Perfetto JSON).

Besides the traces, ``hw.json`` holds the device's properties and the measured ceilings
(bf16/fp16/fp8/fp32 matrix products, a device-to-device copy), the "max achievable" figures.

Usage (on the GPU machine; writes into OUTDIR)::

    python3 tests/data/h200/record.py OUTDIR            # all
    python3 tests/data/h200/record.py OUTDIR ops host   # some
    python3 tests/data/h200/record.py OUTDIR --cpu      # dry run of the script's logic on a CPU (tiny sizes)
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

#: what each active step of the ``host`` recording is bound by, by construction (step numbers as
#: the profiler's ``ProfilerStep#N`` names them)
HOST_STEPS = {
    2: "balanced: an MLP forward/backward of large GEMMs (GPU compute)",
    3: "launch-bound: 3,000 tiny elementwise kernels launched from a Python loop",
    4: "data-loader stall: the step's first batch comes from a DataLoader whose __getitem__ sleeps 40 ms",
    5: "synchronisation: torch.cuda.synchronize() and .item() after a long GEMM chain, then more work",
    6: "queue-full: a 60 ms GEMM chain, then 3,000 tiny kernels launched faster than they drain",
}


def _gzip(src: str, dst: str) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(src)


def _sizes(cpu: bool) -> dict[str, int]:
    return {"n": 128 if cpu else 4096, "b": 2 if cpu else 8, "s": 64 if cpu else 2048, "small": 1024}


# ---------------------------------------------------------------------------------------------
def record_ops(outdir: str, cpu: bool) -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, schedule

    dev = "cpu" if cpu else "cuda"
    z = _sizes(cpu)
    n, b, s = z["n"], z["b"], z["s"]
    bf, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    r = lambda *shape, dt=bf, grad=False: torch.randn(*shape, device=dev, dtype=dt, requires_grad=grad)  # noqa: E731

    # one-rank NCCL group: collectives with their args (distributedInfo in the trace)
    dist = None
    if not cpu:
        try:
            import torch.distributed as dist

            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29511")
            dist.init_process_group("nccl", rank=0, world_size=1)
        except Exception:
            traceback.print_exc()
            dist = None

    A, B = r(n, n), r(n, n)
    A16, B16 = r(n, n, dt=fp16), r(n, n, dt=fp16)
    A32, B32 = r(n // 2, n // 2, dt=fp32), r(n // 2, n // 2, dt=fp32)
    X, W, bias = r(2 * n, n), r(n, n), r(n)
    X3 = r(4, n // 2, n)
    Q3, K3, C3 = r(32, n // 4, 128), r(32, 128, n // 4), r(32, n // 4, n // 4)
    fp8 = None
    if not cpu:
        try:
            a8 = r(n, n).to(torch.float8_e4m3fn)
            b8 = r(n, n).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm needs
            one = torch.ones((), device=dev, dtype=fp32)
            fp8 = (a8, b8, one)
        except Exception:
            traceback.print_exc()
    grouped = None
    if hasattr(torch, "_grouped_mm") and not cpu:
        ga, gb = r(4 * 512, n // 2), r(4, n // 2, n // 2)
        offs = torch.tensor([512, 1024, 1536, 2048], device=dev, dtype=torch.int32)
        grouped = (ga, gb, offs)
    img = r(z["b"] * 4, 64, 56, 56, grad=True)
    conv_w, conv_b = r(128, 64, 3, 3, grad=True), r(128, grad=True)
    gconv_w = r(128, 16, 3, 3, grad=True)  # groups=4
    q = r(b, 16, s, 128, grad=True)
    k = r(b, 16, s, 128, grad=True)
    v = r(b, 16, s, 128, grad=True)
    big = r(2 * n, n, grad=True)
    ln_w, ln_b = r(n, grad=True), r(n, grad=True)
    bn_x = r(z["b"] * 4, 64, 56, 56)
    bn_w, bn_b = r(64), r(64)
    bn_rm, bn_rv = torch.zeros(64, device=dev, dtype=fp32), torch.ones(64, device=dev, dtype=fp32)
    emb_w = r(50000 if not cpu else 500, n, grad=True)
    idx = torch.randint(0, emb_w.shape[0], (2 * n,), device=dev)
    allreduce = torch.ones(16 << 20, device=dev, dtype=fp32) if dist is not None else None

    graph = None
    if not cpu:
        gx = r(n, n)
        static_out = torch.empty_like(gx)
        s_ = torch.cuda.Stream()
        s_.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s_):
            for _ in range(2):
                static_out.copy_(torch.relu(gx @ W + 1))
        torch.cuda.current_stream().wait_stream(s_)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out.copy_(torch.relu(gx @ W + 1))

    from torch.nn.attention import SDPBackend, sdpa_kernel

    failed: set[str] = set()

    def attempt(fn) -> None:  # an op this build cannot run is left out of the trace, not the others
        try:
            fn()
        except Exception as exc:
            if repr(exc) not in failed:
                failed.add(repr(exc))
                print("[ops] left out:", repr(exc)[:300], flush=True)

    def body() -> None:
        for _ in range(2):
            torch.mm(A, B)
            torch.mm(A16, B16)
            torch.mm(A32, B32)
            F.linear(X, W, bias)  # aten::addmm
            F.linear(X, W)  # aten::mm
            torch.bmm(Q3, K3)
            torch.baddbmm(C3, Q3, K3)
            torch.matmul(X3, W)
            if fp8 is not None:
                attempt(lambda: torch._scaled_mm(fp8[0], fp8[1], fp8[2], fp8[2], out_dtype=bf))
            if grouped is not None:
                attempt(lambda: torch._grouped_mm(grouped[0], grouped[1], offs=grouped[2]))
        # convolution forward and backward, with bias; grouped convolution
        out = F.conv2d(img, conv_w, conv_b, padding=1)
        out.sum().backward()
        F.conv2d(img, gconv_w, None, padding=1, groups=4).sum().backward()
        # attention: causal and not, forward and backward, per backend
        backends = (
            [None] if cpu else [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
        )
        for be in backends:
            for causal in (False, True):
                try:
                    if be is None:
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    else:
                        with sdpa_kernel(be):
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    o.sum().backward()
                except Exception:
                    traceback.print_exc()
        # elementwise, unary and binary, broadcasting
        torch.add(X, X)
        torch.add(X, bias)  # broadcast
        torch.mul(X, 2.0)
        F.gelu(X)
        torch.relu(X)
        torch.sigmoid(X)
        torch.exp(X)
        X.to(fp32)
        Xc = X.clone()
        Xc.add_(1.0)
        # normalisation forward and backward
        F.layer_norm(big, (n,), ln_w, ln_b).sum().backward()
        F.layer_norm(X, (n,))
        if hasattr(F, "rms_norm"):
            attempt(lambda: F.rms_norm(big, (n,), ln_w).sum().backward())
        attempt(lambda: F.batch_norm(bn_x, bn_rm, bn_rv, bn_w, bn_b, training=True))
        attempt(lambda: F.batch_norm(bn_x, bn_rm.to(bf), bn_rv.to(bf), bn_w, bn_b, training=True))
        attempt(lambda: F.group_norm(bn_x, 8, bn_w, bn_b))
        # reductions and softmax
        X.sum(dim=-1)
        X.mean()
        X.amax(dim=0)
        torch.softmax(X, dim=-1)
        torch.log_softmax(X, dim=-1)
        # embedding / gather / copies
        F.embedding(idx, emb_w).sum().backward()
        torch.index_select(X, 0, idx[: n // 2] % X.shape[0])
        torch.gather(X, 1, torch.zeros_like(X, dtype=torch.long)[:, :64])
        torch.cat([X, X], dim=0)
        X.t().contiguous()
        if graph is not None:
            graph.replay()
        if allreduce is not None:
            attempt(lambda: dist.all_reduce(allreduce))

    for _ in range(2):  # warm up outside the profiler (cuBLAS/cuDNN autotuning, NCCL set-up)
        body()
    activities = [ProfilerActivity.CPU] + ([] if cpu else [ProfilerActivity.CUDA])
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        record_shapes=True,
        with_flops=True,
    ) as prof:
        for _ in range(3):
            body()
            if not cpu:
                torch.cuda.synchronize()
            prof.step()
    raw = os.path.join(outdir, "ops_rank0.pt.trace.json")
    prof.export_chrome_trace(raw)
    _gzip(raw, raw + ".gz")
    if dist is not None:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
def record_host(outdir: str, cpu: bool) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.data import DataLoader, Dataset

    dev = "cpu" if cpu else "cuda"
    z = _sizes(cpu)
    n = z["n"]
    torch.manual_seed(0)

    class Slow(Dataset):
        def __init__(self, delay: float) -> None:
            self.delay = delay

        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, i: int) -> torch.Tensor:
            time.sleep(self.delay)
            return torch.full((n,), float(i % 7))

    fast = iter(DataLoader(Slow(0.0), batch_size=8))
    slow = iter(DataLoader(Slow(0.005), batch_size=8))  # 8 × 5 ms = 40 ms per batch
    model = torch.nn.Sequential(
        torch.nn.Linear(n, 2 * n), torch.nn.GELU(), torch.nn.Linear(2 * n, n), torch.nn.LayerNorm(n)
    ).to(dev, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    X = torch.randn(4 * n, n, device=dev, dtype=torch.bfloat16)
    tiny = torch.zeros(z["small"], device=dev)
    M = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

    def mlp(x: torch.Tensor) -> None:
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def chain(k: int) -> torch.Tensor:
        y = M
        for _ in range(k):
            y = (y @ M) * 0.01
        return y

    def step(i: int) -> None:
        nonlocal tiny
        batch = next(slow if i == 4 else fast).to(dev, torch.bfloat16, non_blocking=False)
        x = X + batch.mean()
        if i == 3:
            for _ in range(3000):
                tiny = tiny + 1.0
            mlp(x[:64])
        elif i == 5:
            y = chain(40)
            torch.cuda.synchronize() if not cpu else None
            float(y[0, 0].item())
            mlp(x)
        elif i == 6:
            chain(60 if not cpu else 2)
            for _ in range(3000):
                tiny = tiny + 1.0
        else:
            mlp(x)

    for i in range(2):
        step(i)
    if not cpu:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([] if cpu else [ProfilerActivity.CUDA])
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=len(HOST_STEPS), repeat=1),
        record_shapes=True,
        profile_memory=True,
    ) as prof:
        for i in range(2 + len(HOST_STEPS)):
            step(i)
            prof.step()
    if not cpu:
        torch.cuda.synchronize()
    raw = os.path.join(outdir, "host_rank0.pt.trace.json")
    prof.export_chrome_trace(raw)
    _gzip(raw, raw + ".gz")
    with open(os.path.join(outdir, "host_steps.json"), "w") as f:
        json.dump({f"ProfilerStep#{k}": v for k, v in HOST_STEPS.items()}, f, indent=1)


# ---------------------------------------------------------------------------------------------
def record_jax(outdir: str, cpu: bool) -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    n = 256 if cpu else 4096

    @jax.jit
    def train(w: jax.Array, x: jax.Array) -> jax.Array:
        def loss(w: jax.Array) -> jax.Array:
            return jnp.mean(jax.nn.gelu(x @ w) ** 2)

        return w - 1e-3 * jax.grad(loss)(w)

    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (n, n), jnp.bfloat16)
    x = jax.random.normal(key, (2 * n, n), jnp.bfloat16)
    w = train(w, x).block_until_ready()
    logdir = os.path.join(outdir, "jax_profile")
    jax.profiler.start_trace(logdir, create_perfetto_trace=True)
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            w = train(w, x)
            w.block_until_ready()
    jax.profiler.stop_trace()
    shutil.make_archive(os.path.join(outdir, "jax_profile"), "gztar", logdir)
    shutil.rmtree(logdir)


# ---------------------------------------------------------------------------------------------
def record_hw(outdir: str, cpu: bool) -> None:
    """The device's properties and measured ceilings (``hw.json``)."""
    import torch

    if cpu:
        json.dump({"device": "cpu"}, open(os.path.join(outdir, "hw.json"), "w"))
        return
    p = torch.cuda.get_device_properties(0)
    out: dict[str, object] = {
        "name": p.name,
        "capability": f"{p.major}.{p.minor}",
        "multiprocessors": p.multi_processor_count,
        "memory_bytes": p.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }

    def timed(fn, reps: int = 10) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) / 1e3 / reps

    n = 8192
    for label, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        a, b = torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)
        torch.backends.cuda.matmul.allow_tf32 = False
        out[f"matmul_{label}_tflops"] = 2 * n**3 / timed(lambda a=a, b=b: a @ b) / 1e12
        if label == "fp32":
            torch.backends.cuda.matmul.allow_tf32 = True
            out["matmul_tf32_tflops"] = 2 * n**3 / timed(lambda a=a, b=b: a @ b) / 1e12
            torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        out["matmul_fp8_tflops"] = (
            2 * n**3 / timed(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)) / 1e12
        )
    except Exception as exc:
        out["matmul_fp8_error"] = repr(exc)
    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    out["copy_d2d_bytes_per_s"] = 2 * src.numel() / timed(lambda: dst.copy_(src))
    x = torch.randn(1 << 28, device="cuda")
    out["elementwise_fp32_mul_bytes_per_s"] = 8 * x.numel() / timed(lambda: torch.mul(x, 2.0))
    try:
        out["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit,driver_version", "--format=csv"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except Exception as exc:
        out["nvidia_smi"] = repr(exc)
    with open(os.path.join(outdir, "hw.json"), "w") as f:
        json.dump(out, f, indent=1)


RECORDINGS = {"hw": record_hw, "ops": record_ops, "host": record_host, "jax": record_jax}


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    cpu = "--cpu" in argv
    outdir = args[0]
    which = args[1:] or list(RECORDINGS)
    os.makedirs(outdir, exist_ok=True)
    if os.environ.get("_RECORD_ONE"):
        RECORDINGS[os.environ["_RECORD_ONE"]](outdir, cpu)
        return 0
    status = 0
    for name in which:  # each in its own process: one failing (or JAX taking the GPU) loses nothing else
        t0 = time.time()
        env = dict(os.environ, _RECORD_ONE=name)
        try:
            rc = subprocess.run([sys.executable, __file__, *argv], env=env, timeout=240).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        print(f"[record] {name}: exit {rc} in {time.time() - t0:.1f} s", flush=True)
        status |= rc != 0
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

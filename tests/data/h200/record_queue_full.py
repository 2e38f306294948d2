"""Record a PyTorch profile whose launch queue fills up (issue 21; run on a CUDA machine).

``python3 tests/data/h200/record_queue_full.py OUTDIR`` writes ``queue_full_rank0.pt.trace.json.gz``:
one profiler step (``ProfilerStep#1``, from ``schedule``) in which 150 bf16 8192³ matrix products
(about 200 ms of GPU work on an H200) are launched, then 4,000 tiny in-place adds launched from a
Python loop much faster than the GPU reaches them — they queue behind the products until the
launch queue of the stream is full and ``cudaLaunchKernel`` blocks — then a synchronisation (a
warm-up step first, unprofiled). MIT, like the project.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    dev = "cuda"
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    x = torch.zeros(1024, device=dev)
    for _ in range(3):
        torch.mm(a, a, out=c)
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()

    def step() -> None:
        for _ in range(150):
            torch.mm(a, a, out=c)
        for _ in range(4000):
            x.add_(1)
        torch.cuda.synchronize()

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
    ) as prof:
        for _ in range(2):
            step()
            prof.step()
    raw = os.path.join(out, "queue_full_rank0.pt.trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
    print("wrote", raw + ".gz", os.path.getsize(raw + ".gz"), "bytes")


if __name__ == "__main__":
    main()

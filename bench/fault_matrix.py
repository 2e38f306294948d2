"""The fault matrix: does dtrace name the right rank and the right cause, for every kind of fault, at
every job size, and nobody in a job without a fault?

Usage::

    python bench/fault_matrix.py                      # the default matrix -> bench/FAULT_MATRIX.md
    python bench/fault_matrix.py --ranks 4,16 --seeds 1 --no-write   # a quick look
    python bench/fault_matrix.py --clean-ranks 1024,4096,16384        # fault-free jobs up to 16,384 ranks

Every case is a job from ``dtrace.generate.synth`` (4 steps, ~60 kernels per step, host noise:
a 2 % chance per rank and step of a ~0.3 ms host hiccup, kernel jitter 2 %) with one fault of one
kind on one rank, at two severities per kind, analysed with ``dtrace.analyze`` (in-process
scheduler). A fault's *cost* is the median step time of the job with it over the same job without
it (same seed: the fault changes no random draw), minus one. Per (kind, ranks):

- ``cases``: jobs run; ``costly``: those whose fault costs at least 5 % of the step;
- ``recall``: costly cases whose faulty rank is flagged, over costly cases;
- ``cause ok``: costly flagged cases whose cause is the kind's (``compute``/``gpu`` → ``gpu_slow``,
  ``contended`` → ``gpu_contended``, ``launch`` → ``host_launch``, ``loader`` → ``host_loader``,
  ``sync`` → ``host_sync``, ``link`` → ``link``), over costly flagged cases;
- ``false flags``: innocent ranks flagged, summed over every case (costly or not);
- ``cheap flagged``: cases whose fault costs under 5 % and whose faulty rank is flagged anyway
  (not an error: a slow GPU is a finding even where the step hides it).

Fault-free jobs (``--clean-ranks``) report the ranks flagged. The targets (issue 30): recall 1 and
cause ok 1 in every cell, no false flag anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

EXPECTED = {
    "compute": "gpu_slow",
    "gpu": "gpu_slow",
    "contended": "gpu_contended",
    "launch": "host_launch",
    "loader": "host_loader",
    "sync": "host_sync",
    "link": "link",
}
SEVERITIES = {
    "compute": (0.1, 0.4),
    "gpu": (0.2, 0.6),
    "contended": (0.3, 1.5),
    "launch": (0.1, 0.5),
    "loader": (0.1, 0.5),
    "sync": (0.1, 0.5),
    "link": (0.3, 1.0),
}
COSTLY = 0.05
JOB = dict(steps=4, kernels_per_step=60, host_noise=0.02, host_noise_ms=0.3)


CLI_FROM = 2048
"""Jobs of at least this many ranks run as ``dtrace analyze`` (its local cluster), smaller ones in
process (``scheduler="sync"``)."""


def _analyse(trace_dir: str, ranks: int) -> tuple[float, list[tuple[int, str]]]:
    """The median step time of the job and its flagged (rank, cause)."""
    import dtrace

    out = trace_dir + "-out"
    if ranks >= CLI_FROM:
        cmd = [sys.executable, "-m", "dtrace", "analyze", trace_dir, "-o", out, "--no-progress"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    else:
        dtrace.analyze(trace_dir, out=out, scheduler="sync", progress=False)
    r = dtrace.load(out)
    step = float(r.ranks["step_ns"].median())
    s = r.stragglers
    flagged = [(int(a), str(c)) for a, c in zip(s.loc[s["flagged"], "rank"], s.loc[s["flagged"], "cause"])]
    return step, flagged


def _case(args: tuple[str, int, int, str | None, float, str]) -> dict[str, Any]:
    """One job: generate, analyse, return its verdict (``kind`` None: the fault-free job)."""
    from dtrace.generate import synth

    root, ranks, seed, kind, slow, tag = args
    d = os.path.join(root, tag)
    rank = (seed * 7 + 3) % ranks
    faults = [f"{kind}:rank={rank}:slow={slow}"] if kind else []
    t0 = time.perf_counter()
    synth.generate(d, ranks=ranks, seed=seed, faults=faults, **JOB)
    step, flagged = _analyse(d, ranks)
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(d + "-out", ignore_errors=True)
    return dict(
        ranks=ranks,
        seed=seed,
        kind=kind,
        slow=slow,
        rank=rank,
        step_ns=step,
        flagged=flagged,
        seconds=time.perf_counter() - t0,
    )


def run_matrix(ranks: list[int], seeds: list[int], kinds: list[str], clean: list[int], workers: int) -> list[dict]:
    root = tempfile.mkdtemp(prefix="fault-matrix-")
    cases: list[tuple[str, int, int, str | None, float, str]] = []
    for n in ranks:
        for seed in seeds:
            cases.append((root, n, seed, None, 0.0, f"clean-{n}-{seed}"))
            for kind in kinds:
                for slow in SEVERITIES[kind]:
                    cases.append((root, n, seed, kind, slow, f"{kind}-{slow}-{n}-{seed}"))
    for n in clean:
        if n not in ranks:
            cases.append((root, n, 1, None, 0.0, f"clean-{n}-1"))
    # the largest jobs first: the pool's tail is then the small ones
    cases.sort(key=lambda c: -c[1])
    out = []
    try:
        # the others on the pool, then the large jobs one at a time (each uses every core)
        big = [c for c in cases if c[1] >= CLI_FROM]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = [pool.submit(_case, c) for c in cases if c[1] < CLI_FROM]
            small = (f.result() for f in as_completed(done))
            for res in (*small, *map(_case, big)):
                out.append(res)
                tag = f"{res['kind'] or 'clean'}:{res['slow']:g}" if res["kind"] else "clean"
                print(
                    f"{res['ranks']:>6} ranks seed {res['seed']} {tag:<16} flagged {res['flagged'][:4]} "
                    f"({res['seconds']:.1f} s)",
                    flush=True,
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def summarise(results: list[dict]) -> tuple[list[dict], list[dict]]:
    base = {(r["ranks"], r["seed"]): r["step_ns"] for r in results if r["kind"] is None}
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for r in results:
        if r["kind"] is None:
            continue
        c = cells.setdefault(
            (r["kind"], r["ranks"]),
            dict(kind=r["kind"], ranks=r["ranks"], cases=0, costly=0, found=0, cause_ok=0, false=0, cheap=0, costs=[]),
        )
        b = base.get((r["ranks"], r["seed"]))
        cost = r["step_ns"] / b - 1 if b else float("nan")
        c["costs"].append(cost)
        c["cases"] += 1
        mine = [cause for rank, cause in r["flagged"] if rank == r["rank"]]
        c["false"] += sum(1 for rank, _ in r["flagged"] if rank != r["rank"])
        if cost >= COSTLY:
            c["costly"] += 1
            if mine:
                c["found"] += 1
                c["cause_ok"] += mine[0] == EXPECTED[r["kind"]]
        elif mine:
            c["cheap"] += 1
    clean = [
        dict(ranks=r["ranks"], seed=r["seed"], flagged=len(r["flagged"]), ranks_flagged=r["flagged"][:5])
        for r in results
        if r["kind"] is None
    ]
    return sorted(cells.values(), key=lambda c: (c["kind"], c["ranks"])), sorted(clean, key=lambda c: c["ranks"])


def markdown(cells: list[dict], clean: list[dict], meta: dict[str, Any]) -> str:
    lines = [
        "# Fault matrix",
        "",
        f"Written by `bench/fault_matrix.py` on {meta['date']} ({meta['machine']}; {meta['seconds']:.0f} s). "
        f"Jobs: {json.dumps(JOB)}; seeds {meta['seeds']}; severities per kind {json.dumps(SEVERITIES)}. "
        "See the script's docstring for the columns.",
        "",
        "| fault | ranks | cases | costly (≥ 5 %) | cost range | recall | cause ok | false flags | cheap flagged |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for c in cells:
        costs = [x for x in c["costs"] if x == x]
        rng = f"{100 * min(costs):.0f}–{100 * max(costs):.0f} %" if costs else "–"
        recall = f"{c['found']}/{c['costly']}" if c["costly"] else "–"
        cause = f"{c['cause_ok']}/{c['found']}" if c["found"] else "–"
        lines.append(
            f"| {c['kind']} | {c['ranks']:,} | {c['cases']} | {c['costly']} | {rng} | {recall} | {cause} | "
            f"{c['false']} | {c['cheap']} |"
        )
    lines += ["", "Fault-free jobs:", "", "| ranks | seed | ranks flagged |", "|---:|---:|---:|"]
    lines += [f"| {c['ranks']:,} | {c['seed']} | {c['flagged']} {c['ranks_flagged'] or ''} |" for c in clean]
    tot = {k: sum(c[k] for c in cells) for k in ("costly", "found", "cause_ok", "false", "cases")}
    lines += [
        "",
        f"In all: recall {tot['found']}/{tot['costly']}, cause {tot['cause_ok']}/{tot['found']}, "
        f"{tot['false']} false flags in {tot['cases']} faulty jobs, "
        f"{sum(c['flagged'] for c in clean)} ranks flagged in {len(clean)} fault-free jobs.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="4,8,16,64,256,1024")
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--kinds", default=",".join(EXPECTED))
    p.add_argument("--clean-ranks", default="4096", help="fault-free jobs of these sizes too (seed 1)")
    p.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    p.add_argument("--no-write", action="store_true", help="print the table, leave FAULT_MATRIX.md alone")
    p.add_argument("--json", default=None, help="also write every case's verdict here")
    a = p.parse_args(argv)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    t0 = time.perf_counter()
    results = run_matrix(ints(a.ranks), ints(a.seeds), a.kinds.split(","), ints(a.clean_ranks), a.workers)
    cells, clean = summarise(results)
    meta = dict(
        date=time.strftime("%Y-%m-%d"),
        machine=f"{os.cpu_count()} cores",
        seconds=time.perf_counter() - t0,
        seeds=a.seeds,
    )
    text = markdown(cells, clean, meta)
    print(text)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    if not a.no_write:
        with open(os.path.join(HERE, "FAULT_MATRIX.md"), "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

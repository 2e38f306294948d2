"""Many ranks at once, measured as the user feels it: whole processes, default CLI, HTA beside.

Usage::

    python bench/many_ranks.py                      # every case, 3 runs each -> bench/MANY_RANKS.md
    python bench/many_ranks.py --repeat 1 --cases real256,synth512
    python bench/many_ranks.py --quick              # small inputs: a smoke run, not for the record

Inputs (built under ``bench/out/many``, kept between runs, never committed):

- ``real256``: 256 copies of a real trace from ``../shared/traces`` (HTA's 128-rank NCCL job,
  rank 0: 1.8 MB JSON, 4.8 k events), each with its own ``distributedInfo.rank``, gzip;
- ``synth512``: ``dtrace synth`` 512 ranks, 4 steps (0.28 MB JSON per rank);
- ``synth4096``: ``dtrace synth`` 4,096 ranks, 3 steps;
- ``small``: one small trace, the bundled example ``examples/traces/sampled_rank-0.json.gz``.

Every run is a fresh interpreter started from outside (interpreter start, imports, cluster start
and teardown included) after the inputs were read once (they sit in the page cache). dtrace runs
exactly what a user types: ``python -m dtrace analyze INPUTS -o OUT`` — "cold" into a new OUT
(no cache), "again" the same command once more (the results are up to date), "recompute" with
``--recompute`` (stored per-partition results ignored: the analyses run again from the cached
Parquet events). HTA 0.5.0 runs ``TraceAnalysis`` + ``get_temporal_breakdown`` on the same files
in its own venv (``bench/peer_hta.py``), also measured from outside. Memory: the peak RSS of the
client process and of the largest worker process (psutil, polled every 50 ms).

The analysis cost per part is the ``analyse`` phase of a ``--recompute --sync`` run (read the
cached Parquet events, prepare, every analysis, store the results; one core) divided by the
parts, in worker-ms per part, with the mean events per part.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from run import HTA_PY, MB, SHARED, Run, calibrate, environment, measure, warm_page_cache  # noqa: E402

REAL_SOURCE = os.path.join("kineto", "hta-2rank", "sampled_rank-0.json.gz")


# -- inputs ----------------------------------------------------------------------------------
@dataclass
class Job:
    name: str
    path: str  # a directory (or one file)
    ranks: int
    json_bytes: int
    note: str


def _json_bytes(paths: list[str]) -> int:
    total = 0
    for p in paths:
        with gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb") as f:
            total += len(f.read())
    return total


def build_real(out: str, ranks: int) -> Job:
    """``ranks`` copies of a real rank trace, each stating its own rank."""
    d = os.path.join(out, f"real{ranks}")
    src = os.path.join(SHARED, "traces", REAL_SOURCE)
    if len([f for f in os.listdir(d) if f.endswith(".json.gz")] if os.path.isdir(d) else []) != ranks:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        raw = gzip.open(src, "rb").read()
        m = re.search(rb'"distributedInfo":\s*\{[^}]*"rank":\s*(\d+)', raw)
        for r in range(ranks):
            text = raw[: m.start(1)] + str(r).encode() + raw[m.end(1) :]
            with gzip.open(os.path.join(d, f"rank-{r}.json.gz"), "wb", compresslevel=6) as f:
                f.write(text)
    one = os.path.join(d, "rank-0.json.gz")
    return Job(
        f"real{ranks}",
        d,
        ranks,
        _json_bytes([one]) * ranks,
        f"{ranks} copies of {REAL_SOURCE} (HTA's 128-rank NCCL job, rank 0), each with its own rank, gzip",
    )


def build_synth(out: str, ranks: int, steps: int) -> Job:
    d = os.path.join(out, f"synth{ranks}")
    files = [f for f in os.listdir(d) if f.startswith("rank-")] if os.path.isdir(d) else []
    if len(files) != ranks:
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "dtrace", "synth", d, "--ranks", str(ranks), "--steps", str(steps)],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
        )
        files = [f for f in os.listdir(d) if f.startswith("rank-")]
    sample = [os.path.join(d, f) for f in sorted(files)[:16]]
    per = _json_bytes(sample) / len(sample)
    return Job(f"synth{ranks}", d, ranks, int(per * ranks), f"dtrace synth --ranks {ranks} --steps {steps}, gzip")


def small_job() -> Job:
    p = os.path.join(ROOT, "examples", "traces", "sampled_rank-0.json.gz")
    return Job("small", p, 1, _json_bytes([p]), "one small trace: examples/traces/sampled_rank-0.json.gz")


# -- cases -----------------------------------------------------------------------------------
@dataclass
class Result:
    job: Job
    tool: str
    mode: str
    runs: list[Run] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)

    def med(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.runs)


def dtrace_run(job: Job, out: str, *extra: str) -> tuple[Run, dict[str, Any]]:
    cmd = [sys.executable, "-m", "dtrace", "analyze", job.path, "-o", out, "--no-progress", *extra]
    r = measure(cmd, parse=False)
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        m = json.load(f)
    if m.get("n_failed"):
        raise RuntimeError(f"{job.name}: inputs failed: {[i['error'] for i in m['inputs'] if i['error']][:3]}")
    return r, m


def hta_run(job: Job) -> Run:
    return measure([HTA_PY, os.path.join(HERE, "peer_hta.py"), json.dumps({"trace_dir": job.path})])


def run_job(job: Job, repeat: int, work: str, hta: bool, recompute: bool) -> list[Result]:
    paths = [job.path] if os.path.isfile(job.path) else [os.path.join(job.path, f) for f in os.listdir(job.path)]
    cold, again, rec = (Result(job, "dtrace", m) for m in ("cold", "again", "recompute"))
    peer = Result(job, "HTA", "parse + temporal breakdown") if hta else None
    for i in range(repeat):
        warm_page_cache(paths)
        res = os.path.join(work, f"{job.name}-{i}")
        shutil.rmtree(res, ignore_errors=True)
        for r, args in ((cold, ()), (again, ())) + (((rec, ("--recompute", "--sync")),) if recompute else ()):
            run, m = dtrace_run(job, res, *args)
            r.runs.append(run)
            r.manifests.append(m)
            print(
                f"  {job.name:<10} {r.tool:<7} {r.mode:<10} run {i + 1}: wall {run.wall_s:7.2f} s  "
                f"client {run.client_peak / MB:6.0f} MB  worker {run.worker_peak / MB:6.0f} MB  "
                f"({m.get('execution', '?')}, load {run.load:.1f})",
                flush=True,
            )
        shutil.rmtree(res, ignore_errors=True)
        if peer is not None:
            warm_page_cache(paths)
            run = hta_run(job)
            peer.runs.append(run)
            print(
                f"  {job.name:<10} HTA     {'':<10} run {i + 1}: wall {run.wall_s:7.2f} s  "
                f"peak {run.maxrss / MB:6.0f} MB  (load {run.load:.1f})",
                flush=True,
            )
    return [cold, again] + ([rec] if recompute else []) + ([peer] if peer is not None else [])


# -- report ----------------------------------------------------------------------------------
def report(results: list[Result], env: dict[str, Any], capacity: float, path: str) -> str:
    by = {(r.job.name, r.tool, r.mode): r for r in results}
    lines = [
        "# dtrace with many ranks, side by side with HTA",
        "",
        f"Generated by `python bench/many_ranks.py` on {env['date']}. Machine: {env['machine']}; two "
        f"busy processes got {capacity:.2f}× the CPU of one when the runs started. Load average during the "
        f"runs: {env['load']}. Median of {env['repeat']} runs, each a fresh process measured from outside.",
        "",
        "Every figure is the whole process as the user runs it (interpreter start, imports, cluster "
        "start-up and teardown included): `python -m dtrace analyze DIR -o OUT` cold (new OUT, no cache), "
        "the same command again (results up to date), with `--recompute --sync` (stored results ignored, "
        "analyses rerun from the cached Parquet, one core), and HTA 0.5.0 (`TraceAnalysis` + "
        "`get_temporal_breakdown`) on the same files.",
        "",
        "| job | ranks | JSON MB | HTA s | dtrace cold s | × HTA | dtrace again s | × HTA | recompute s "
        "| runs on | client peak MB | worker peak MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for name in dict.fromkeys(r.job.name for r in results):
        cold, again = by.get((name, "dtrace", "cold")), by.get((name, "dtrace", "again"))
        rec, hta = by.get((name, "dtrace", "recompute")), by.get((name, "HTA", "parse + temporal breakdown"))
        if cold is None:
            continue
        job = cold.job
        h = hta.med("wall_s") if hta else None
        c, a = cold.med("wall_s"), again.med("wall_s") if again else float("nan")
        lines.append(
            f"| {name} | {job.ranks:,} | {job.json_bytes / MB:,.0f} | {h:.2f} | {c:.2f} | {h / c:.1f}× | {a:.2f} | "
            f"{h / a:.1f}× | {rec.med('wall_s') if rec else float('nan'):.2f} | {cold.manifests[-1].get('execution')} | "
            f"{cold.med('client_peak') / MB:,.0f} | {cold.med('worker_peak') / MB:,.0f} |"
            if h
            else f"| {name} | {job.ranks:,} | {job.json_bytes / MB:,.0f} | – | {c:.2f} | – | {a:.2f} | – | "
            f"{rec.med('wall_s') if rec else float('nan'):.2f} | {cold.manifests[-1].get('execution')} | "
            f"{cold.med('client_peak') / MB:,.0f} | {cold.med('worker_peak') / MB:,.0f} |"
        )
    lines += [
        "",
        "## Phases (seconds inside `dtrace.analyze`, median run; from `manifest.json`)",
        "",
        "| job | run | plan | start | ingest | analyse | reduce | partitions | parts |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.tool != "dtrace" or not r.manifests or r.mode == "again":
            continue
        ph = {
            k: statistics.median(m["phases"].get(k, 0.0) for m in r.manifests)
            for k in ("plan", "start", "ingest", "analyse", "reduce")
        }
        m = r.manifests[-1]
        lines.append(
            f"| {r.job.name} | {r.mode} | "
            + " | ".join(f"{v:.2f}" for v in ph.values())
            + f" | {len(m.get('partitions', []))} | {m.get('n_parts', 0):,} |"
        )
    lines += [
        "",
        "## Analysis cost per part (one core, `--recompute --sync`)",
        "",
        "| job | parts | events per part | analyse s | worker-ms per part | per 5,000 events |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.mode != "recompute" or not r.manifests:
            continue
        m = r.manifests[-1]
        parts = m.get("n_parts", 0) or 1
        events = sum(i.get("events", 0) for i in m["inputs"]) / parts
        a = statistics.median(x["phases"].get("analyse", 0.0) for x in r.manifests)
        lines.append(
            f"| {r.job.name} | {parts:,} | {events:,.0f} | {a:.2f} | {a / parts * 1e3:.1f} | "
            f"{a / parts * 1e3 * 5000 / max(events, 1):.1f} |"
        )
    jobs = {r.job.name: r.job for r in results}
    lines += ["", "## Inputs", ""] + [f"- `{j.name}`: {j.note}." for j in jobs.values()]
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + ".", ""]
    text = "\n".join(lines)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


CASES = ("small", "real256", "synth512", "synth4096")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}")
    ap.add_argument("--hta-4096", action="store_true", help="also run HTA on the 4,096-rank job (minutes)")
    ap.add_argument("--quick", action="store_true", help="small inputs: 32, 64 and 256 ranks")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "many"))
    ap.add_argument("--results", default=os.path.join(HERE, "MANY_RANKS.md"))
    a = ap.parse_args(argv)
    want = [c.strip() for c in a.cases.split(",") if c.strip()]
    bad = sorted(set(want) - set(CASES))
    if bad:
        ap.error(f"unknown cases {bad}; valid: {', '.join(CASES)}")
    if not os.path.exists(HTA_PY):
        ap.error(
            f"HTA venv missing: python3 -m venv {os.path.dirname(os.path.dirname(HTA_PY))} && "
            f"{os.path.dirname(HTA_PY)}/pip install holistictraceanalysis==0.5.0 'pandas<3'"
        )
    inputs, work = os.path.join(a.out, "inputs"), os.path.join(a.out, "work")
    os.makedirs(inputs, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    sizes = (
        {"real256": 32, "synth512": 64, "synth4096": 256}
        if a.quick
        else {"real256": 256, "synth512": 512, "synth4096": 4096}
    )
    capacity = calibrate()
    print(f"machine capacity: 2 busy processes get {capacity:.2f}× the CPU of one", flush=True)
    results: list[Result] = []
    loads: list[float] = []
    for name in CASES:
        if name not in want:
            continue
        print(f"building {name} ...", flush=True)
        t = time.perf_counter()
        job = (
            small_job()
            if name == "small"
            else build_real(inputs, sizes[name])
            if name == "real256"
            else build_synth(inputs, sizes[name], 4 if name == "synth512" else 3)
        )
        print(f"  {job.note} ({time.perf_counter() - t:.0f} s)", flush=True)
        rs = run_job(
            job,
            a.repeat,
            work,
            hta=name not in ("small", "synth4096") or (name == "synth4096" and a.hta_4096),
            recompute=name != "small",
        )
        results += rs
        loads += [x.load for r in rs for x in r.runs]
    text = report(results, environment(a.repeat, loads), capacity, a.results)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

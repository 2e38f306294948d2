"""dtrace at thousands of ranks: wall time, CPU, client and worker memory, bytes handed over.

Usage::

    python bench/scale.py                              # 1,024, 4,096 and 16,384 ranks -> bench/SCALE.md
    python bench/scale.py --ranks 1024,4096 --repeat 1
    python bench/scale.py --ranks 65536 --out /tmp/s   # where memory and disk allow (~2.6 GB of gzip)
    python bench/scale.py --old ../base                # the same runs with another checkout beside

Inputs (``dtrace synth --ranks N --steps 2 --kernels-per-step 60``: the job of the issue that
asked for this, fault-free, gzip) are built under ``bench/out/scale`` and kept between runs.
Every run is ``python -m dtrace analyze JOB -o OUT --no-progress`` cold (a new OUT: no cache), a
fresh process measured from outside (``bench/run.measure``: wall, CPU of the process and its
workers, peak RSS of the client process and of the largest worker, polled every 50 ms). With
``--old``, the baseline checkout runs the same command (``PYTHONPATH`` set to it) right before
each run of this one, so a shared machine's load falls on both alike.

Reported per job size: medians of the runs, and per rank (the cost per rank should stay flat as
the job grows): wall ms, CPU ms and client KB per rank; the bytes the workers left for the
client in the spill folder (``spilled_bytes`` of the manifest: every byte of a per-rank table the
client reads or streams into the results) and the results folder's size; the phases of the
median run. The flagged ranks of each fault-free job are listed too (there should be none).
"""

from __future__ import annotations

import argparse
import json
import os
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

from run import MB, Run, environment, measure, warm_page_cache  # noqa: E402

DEFAULT_RANKS = (1024, 4096, 16384)


@dataclass
class Case:
    ranks: int
    tree: str  # "new" or "old"
    runs: list[Run] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    out_bytes: list[int] = field(default_factory=list)
    flagged: list[int] = field(default_factory=list)

    def med(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.runs)

    def median_manifest(self) -> dict[str, Any]:
        order = sorted(range(len(self.runs)), key=lambda i: self.runs[i].wall_s)
        return self.manifests[order[(len(order) - 1) // 2]]


def build(out: str, ranks: int) -> str:
    """The generated job of ``ranks`` ranks (kept between runs)."""
    job = os.path.join(out, f"synth{ranks}")
    if os.path.exists(os.path.join(job, "ground_truth.json")):
        return job
    shutil.rmtree(job, ignore_errors=True)
    cmd = [sys.executable, "-m", "dtrace", "synth", "--ranks", str(ranks), "--steps", "2"]
    subprocess.run([*cmd, "--kernels-per-step", "60", job], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return job


def folder_bytes(path: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file() and e.name.endswith(".parquet"))


def flagged(out: str, env: dict[str, str] | None, cwd: str) -> list[int]:
    code = (
        "import sys, dtrace; s = dtrace.load(sys.argv[1]).stragglers; "
        "print(sorted(s.loc[s['flagged'], 'rank'].tolist()) if 'flagged' in s else [])"
    )
    p = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True, env=env, check=True, cwd=cwd)
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_once(case: Case, job: str, work: str, tree_path: str | None) -> None:
    out = os.path.join(work, f"out-{case.tree}-{case.ranks}")
    shutil.rmtree(out, ignore_errors=True)
    env = {"PYTHONPATH": tree_path} if tree_path else None
    # run from the checkout's root: `python -m` puts the working folder first on the path
    cmd = [sys.executable, "-m", "dtrace", "analyze", job, "-o", out, "--no-progress"]
    run = measure(cmd, env=env, parse=False, cwd=tree_path or ROOT)
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("n_failed"):
        raise RuntimeError(f"{case.ranks} ranks: inputs failed")
    case.runs.append(run)
    case.manifests.append(manifest)
    case.out_bytes.append(folder_bytes(out))
    case.flagged = flagged(out, {**os.environ, **env} if env else None, tree_path or ROOT)
    print(
        f"  {case.tree:>3} {case.ranks:>6} ranks: wall {run.wall_s:7.1f} s  cpu {run.cpu_s:7.1f} s  "
        f"client {run.client_peak / MB:6.0f} MB  worker {run.worker_peak / MB:6.0f} MB  "
        f"spilled {(manifest.get('spilled_bytes') or 0) / MB:6.0f} MB  (load {run.load:.1f})",
        flush=True,
    )
    shutil.rmtree(out, ignore_errors=True)


def report(cases: list[Case], env: dict[str, Any], repeat: int) -> str:
    lines = [
        "# dtrace at thousands of ranks",
        "",
        f"Generated by `python bench/scale.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Machine: {env['machine']}; load average during the runs {env['load']}. Median of {repeat} "
        "cold runs (one at 16,384 ranks and more), each a fresh process measured from outside (interpreter start, cluster start and "
        "teardown included). Jobs: `dtrace synth --ranks N --steps 2 --kernels-per-step 60`, fault-free.",
        "",
        "| checkout | ranks | wall s | CPU s | client peak MB | worker peak MB | spilled MB | results MB "
        "| wall ms/rank | CPU ms/rank | client KB/rank | flagged |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in cases:
        m = c.median_manifest()
        spilled = m.get("spilled_bytes")
        lines.append(
            f"| {c.tree} | {c.ranks:,} | {c.med('wall_s'):.1f} | {c.med('cpu_s'):.1f} | "
            f"{c.med('client_peak') / MB:,.0f} | {c.med('worker_peak') / MB:,.0f} | "
            f"{'–' if spilled is None else f'{spilled / MB:,.0f}'} | {statistics.median(c.out_bytes) / MB:,.0f} | "
            f"{1000 * c.med('wall_s') / c.ranks:.2f} | {1000 * c.med('cpu_s') / c.ranks:.2f} | "
            f"{c.med('client_peak') / 1024 / c.ranks:.0f} | {c.flagged or 'none'} |"
        )
    lines += ["", "## Phases (seconds inside `dtrace.analyze`, median run)", ""]
    lines += [
        "| checkout | ranks | plan | start | ingest | analyse | reduce | partitions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        m = c.median_manifest()
        ph = m.get("phases", {})
        cells = " | ".join(f"{ph.get(k, 0):.2f}" for k in ("plan", "start", "ingest", "analyse", "reduce"))
        lines.append(f"| {c.tree} | {c.ranks:,} | {cells} | {len(m.get('partitions', []))} |")
    lines += [
        "",
        "`spilled MB`: the per-rank tables the workers wrote to the run's spill folder, all the client "
        "reads of them (a table a reducer needs, when it runs) or streams into the results files; the "
        "partitions' results the client gathers through Dask carry only file names and errors.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default=",".join(map(str, DEFAULT_RANKS)), help="job sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--once-from", type=int, default=16384, help="jobs of this many ranks or more run once")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "scale"), help="where the jobs are built")
    ap.add_argument("--old", default=None, help="a baseline checkout to run beside this one")
    ap.add_argument("--report", default=os.path.join(HERE, "SCALE.md"), help="the report (- : stdout only)")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.ranks.split(",") if x]
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "runs")
    os.makedirs(work, exist_ok=True)
    cases: list[Case] = []
    loads: list[float] = []
    for n in sizes:
        job = build(a.out, n)
        pairs = [Case(n, "old")] if a.old else []
        pairs.append(Case(n, "new"))
        for _ in range(a.repeat if n < a.once_from else 1):
            warm_page_cache([os.path.join(job, f) for f in os.listdir(job)])
            for c in pairs:
                run_once(c, job, work, os.path.abspath(a.old) if c.tree == "old" else None)
                loads.append(c.runs[-1].load)
        cases += pairs
    text = report(cases, environment(a.repeat, loads), a.repeat)
    print(text)
    if a.report != "-":
        with open(a.report, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

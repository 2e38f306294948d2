"""Two checkouts of dtrace side by side, whole process, interleaved run by run (and HTA 0.5.0).

Usage::

    git worktree add --detach ../base integrate
    python bench/before_after.py JOB_DIR --old ../base --new . [--repeat 3] [--hta]

Each repeat runs, for the old then the new checkout (``PYTHONPATH`` set to it, the same
interpreter), ``python -m dtrace analyze JOB_DIR -o OUT --no-progress`` into a new OUT ("cold":
no cache) and once more ("again": up to date), then HTA (``bench/peer_hta.py`` in its venv,
``--hta``). Old and new alternate, so a shared machine's load falls on both alike; the 1-minute
load average before each run is printed with it. The medians and their ratios end the output.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run import adopt_orphans, reap_orphans  # noqa: E402


def _run(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system of the process and every process it waited
    for: Dask's nannies and workers) of one command."""
    adopt_orphans()
    reap_orphans()
    t, r = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    reap_orphans()  # the workers' process server (if any) outlives the client briefly: its CPU too
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ...: {p.stderr[-1500:]}")
    r2 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t, (r2.ru_utime - r.ru_utime) + (r2.ru_stime - r.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("job", help="a folder of trace files")
    ap.add_argument("--old", required=True, help="the baseline checkout (its root folder)")
    ap.add_argument("--new", default=os.path.dirname(HERE), help="the checkout to compare (default: this one)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta", default=None, metavar="PYTHON", help="HTA's interpreter: also time HTA")
    a = ap.parse_args(argv)
    job = os.path.abspath(a.job)
    trees = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    times: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    work = tempfile.mkdtemp(prefix="dtrace-before-after-")
    try:
        for i in range(a.repeat):
            for v, tree in trees.items():
                out = os.path.join(work, v)
                env = {**os.environ, "PYTHONPATH": tree}
                for mode in ("cold", "again"):
                    load = os.getloadavg()[0]
                    w, c = _run([sys.executable, "-m", "dtrace", "analyze", job, "-o", out, "--no-progress"], env, tree)
                    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
                        m = json.load(f)
                    times.setdefault((v, mode), []).append(w)
                    cpu.setdefault((v, mode), []).append(c)
                    phases = m.get("phases") if mode == "cold" else ""
                    print(
                        f"run {i + 1} {v} {mode}: {w:.2f} s, CPU {c:.2f} s (load {load:.1f}) {m.get('execution')} {phases}",
                        flush=True,
                    )
                shutil.rmtree(out, ignore_errors=True)
            if a.hta:
                load = os.getloadavg()[0]
                w, c = _run([a.hta, os.path.join(HERE, "peer_hta.py"), json.dumps({"trace_dir": job})])
                times.setdefault(("HTA", "cold"), []).append(w)
                cpu.setdefault(("HTA", "cold"), []).append(c)
                print(f"run {i + 1} HTA: {w:.2f} s, CPU {c:.2f} s (load {load:.1f})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print("\nmedians: wall s, CPU s")
    for (v, mode), m in med.items():
        vs = ""
        if ("HTA", "cold") in med and v != "HTA":
            vs = f"; {med[('HTA', 'cold')] / m:.1f}x HTA wall, {mcpu[('HTA', 'cold')] / mcpu[(v, mode)]:.1f}x HTA CPU"
        print(f"  {v:<4} {mode:<6} {m:7.2f} {mcpu[(v, mode)]:7.2f}{vs}")
    for mode in ("cold", "again"):
        print(
            f"  {mode}: old / new = {med[('old', mode)] / med[('new', mode)]:.2f}x wall, "
            f"{mcpu[('old', mode)] / mcpu[('new', mode)]:.2f}x CPU"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""dtrace benchmark suite: the performance budgets, measured against the peers.

Usage::

    python bench/run.py                      # all cases, 3 runs each -> bench/RESULTS.md
    python bench/run.py --repeat 1 --quick   # smaller inputs, a smoke run (not for the record)
    python bench/run.py --cases cold,cached,hta

It builds its inputs under ``bench/out/inputs`` (kept between runs; nothing is committed):

- ``big.json`` / ``big.json.gz``: a real shared trace tiled in time (:func:`dtrace.generate.tile.tile_trace`)
  to at least 300 MB of JSON and 1 M events;
- ``ranks16/``: the same trace replicated to 16 ranks with perturbed GPU durations (gzip);
- ``job256/``: a 256-rank training job from :func:`dtrace.generate.synth.generate` (or, without it,
  16 small tiled ranks replicated to 256).

Each case runs ``--repeat`` times, every run in a fresh interpreter (``bench/cases.py``, HTA in
its own venv through ``bench/peer_hta.py``), after reading its inputs once so that every tool
starts with them in the OS page cache ("cold" means: no dtrace cache). From outside the parent records wall time, CPU time
(user + sys of the process tree) and memory: the exact peak RSS of the process from
``wait4`` and, polling with psutil every 50 ms, the peak RSS of each worker process and of the
whole tree. Inside, each case reports the time of its work alone (imports and cluster start-up
excluded): ``work_s`` is what the ratios and MB/s use. The median run of each case goes into the
table. Single-process cases run with the libraries' thread pools limited to one thread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
SHARED = os.environ.get("DTRACE_SHARED", os.path.join(ROOT, "..", "shared"))
HTA_PY = os.path.join(HERE, ".venv-hta", "bin", "python")
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "POLARS_MAX_THREADS": "1",
}
MB = 1e6
KEPT_SECTION = "## Ingest, one core (`bench/ingest.py`)"
"""The last section of the results file, written by ``bench/ingest.py``: kept when this script rewrites the rest."""


# -- inputs ----------------------------------------------------------------------------
@dataclass
class Input:
    name: str
    paths: list[str]
    json_bytes: int
    file_bytes: int
    events: int
    note: str

    @property
    def ranks(self) -> int:
        return len(self.paths)


def _manifest_ok(path: str, params: dict[str, Any]) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    if m.get("params") != params or not all(os.path.exists(p) for p in m["paths"]):
        return None
    return m


def _write_manifest(path: str, params: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    m = {"params": params, **info}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(m, f, indent=1)
    return m


def build_big(out: str, source: str, min_mb: float, min_events: int) -> tuple[Input, Input]:
    """One trace tiled in time to >= min_mb of JSON and >= min_events, as .json and .json.gz."""
    from dtrace.generate.tile import tile_trace

    params = {"source": source, "min_mb": min_mb, "min_events": min_events, "v": 2}
    man = os.path.join(out, "big.manifest.json")
    m = _manifest_ok(man, params)
    if m is None:
        print(f"  building big.json from {os.path.relpath(source, SHARED)} ...", flush=True)
        probe = tile_trace(source, os.path.join(out, "probe.json"), times=1)
        os.unlink(probe["path"])
        times = max(math.ceil(min_mb * MB / probe["json_bytes"]), math.ceil(min_events / probe["events"]), 1)
        a = tile_trace(source, os.path.join(out, "big.json"), times=times)
        b = tile_trace(source, os.path.join(out, "big.json.gz"), times=times, gzip=True)
        m = _write_manifest(man, params, {"paths": [a["path"], b["path"]], "times": times, "json": a, "gz": b})
    a, b = m["json"], m["gz"]
    note = f"{os.path.basename(source)} ×{m['times']}"
    return (
        Input("big.json", [a["path"]], a["json_bytes"], a["file_bytes"], a["events"], note),
        Input("big.json.gz", [b["path"]], b["json_bytes"], b["file_bytes"], b["events"], note),
    )


def build_ranks(out: str, source: str, ranks: int, times: int) -> Input:
    """``source`` ×times replicated to ``ranks`` ranks, GPU durations perturbed per rank."""
    from dtrace.generate.tile import tile_trace

    d = os.path.join(out, f"ranks{ranks}")
    params = {"source": source, "ranks": ranks, "times": times, "v": 2}
    man = os.path.join(out, f"ranks{ranks}.manifest.json")
    m = _manifest_ok(man, params)
    if m is None:
        print(f"  building {ranks} ranks from {os.path.basename(source)} ...", flush=True)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        infos = [
            tile_trace(
                source,
                os.path.join(d, f"rank-{r}.json.gz"),
                times=times,
                rank=r,
                world_size=ranks,
                jitter=0.05,
                seed=7,
                gzip=True,
            )
            for r in range(ranks)
        ]
        m = _write_manifest(
            man,
            params,
            {
                "paths": [i["path"] for i in infos],
                "json_bytes": sum(i["json_bytes"] for i in infos),
                "file_bytes": sum(i["file_bytes"] for i in infos),
                "events": sum(i["events"] for i in infos),
            },
        )
    return Input(
        f"ranks{ranks}",
        m["paths"],
        m["json_bytes"],
        m["file_bytes"],
        m["events"],
        f"{os.path.basename(source)} ×{times} per rank, {ranks} ranks, gzip",
    )


def build_job(out: str, ranks: int, steps: int, kernels_per_step: int, fallback: str) -> Input:
    """A generated ``ranks``-rank job (dtrace.generate.synth), or tiled replicas without it."""
    d = os.path.join(out, f"job{ranks}")
    params = {"ranks": ranks, "steps": steps, "kernels_per_step": kernels_per_step, "v": 2}
    man = os.path.join(out, f"job{ranks}.manifest.json")
    m = _manifest_ok(man, params)
    if m is None:
        shutil.rmtree(d, ignore_errors=True)
        try:
            from dtrace.generate.synth import generate
        except ImportError:
            generate = None
        if generate is not None:
            print(f"  generating a {ranks}-rank job with dtrace.generate.synth ...", flush=True)
            truth = generate(d, ranks=ranks, steps=steps, kernels_per_step=kernels_per_step, seed=11, gzip=True)
            paths = [os.path.join(d, f) for f in truth["files"]]
            how = f"dtrace.generate.synth: {ranks} ranks, {steps} steps, ~{kernels_per_step} kernels/step, gzip"
        else:
            from dtrace.generate.tile import tile_trace

            print(f"  building a {ranks}-rank job by tiling {os.path.basename(fallback)} ...", flush=True)
            os.makedirs(d)
            paths = [
                tile_trace(
                    fallback,
                    os.path.join(d, f"rank-{r}.json.gz"),
                    times=1,
                    rank=r,
                    world_size=ranks,
                    jitter=0.05,
                    seed=r,
                    gzip=True,
                )["path"]
                for r in range(ranks)
            ]
            how = f"{os.path.basename(fallback)} tiled to {ranks} ranks, gzip"
        import gzip as _gz

        json_bytes = events = 0
        for p in paths:
            with _gz.open(p, "rb") as f:
                data = f.read()
            json_bytes += len(data)
            events += data.count(b'"ph"')
        m = _write_manifest(
            man,
            params,
            {
                "paths": paths,
                "json_bytes": json_bytes,
                "file_bytes": sum(os.path.getsize(p) for p in paths),
                "events": events,
                "how": how,
            },
        )
    return Input(f"job{ranks}", m["paths"], m["json_bytes"], m["file_bytes"], m["events"], m["how"])


# -- running ---------------------------------------------------------------------------
@dataclass
class Run:
    wall_s: float
    cpu_s: float
    work_s: float
    work_cpu_s: float  # CPU time of the work in the (client) process; the load-robust figure
    maxrss: int  # exact peak RSS of the process (and its reaped children), bytes
    tree_peak: int  # peak of the summed RSS of the process tree (psutil polling)
    worker_peak: int  # peak RSS of the largest descendant process (workers), bytes
    client_peak: int  # peak RSS of the process itself (psutil polling), bytes
    load: float
    out: dict[str, Any]


def adopt_orphans() -> None:
    """Make this process the reaper of its descendants' orphans (Linux ``PR_SET_CHILD_SUBREAPER``).

    A local cluster's workers may fork from a process server (dtrace's CLI starts one) instead of
    being the client's children: when the client exits, that server is re-parented here instead
    of to init, and reaping it (:func:`reap_orphans`) adds its CPU time and its workers' (which it
    reaped) to this process's ``RUSAGE_CHILDREN``, as spawned workers' time always was."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans(timeout: float = 10.0) -> None:
    """Wait for the orphans re-parented here (see :func:`adopt_orphans`) to exit."""
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            time.sleep(0.01)


def measure(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float = 3600, parse: bool = True, cwd: str | None = None
) -> Run:
    """Run ``cmd`` and measure it from outside (wall, CPU, memory).

    With ``parse`` the last line of its stdout is the case's JSON report (``seconds``, ...);
    without, the command is a plain CLI run and ``out`` holds its stdout and stderr.
    """
    import resource

    import psutil

    adopt_orphans()
    reap_orphans()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        # bytecode caching as in a user's installation (a sandbox may set PYTHONDONTWRITEBYTECODE,
        # which recompiles every module in every run)
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env={**base, **(env or {})}, cwd=cwd)
        proc = psutil.Process(p.pid)
        tree_peak = worker_peak = client_peak = 0
        status = ru = None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            try:
                procs = [proc] + proc.children(recursive=True)
                rss = []
                for q in procs:
                    try:
                        rss.append(q.memory_info().rss)
                    except psutil.Error:
                        rss.append(0)
                tree_peak = max(tree_peak, sum(rss))
                client_peak = max(client_peak, rss[0])
                if len(rss) > 1:
                    worker_peak = max(worker_peak, max(rss[1:]))
            except psutil.Error:
                pass
            if time.perf_counter() - t > timeout:
                p.kill()
            time.sleep(0.05)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        reap_orphans()  # a process server of the workers outlives the client briefly
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed ({p.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1]) if parse else {"stdout": stdout, "stderr": stderr}
    return Run(
        wall_s=wall,
        cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        work_s=float(result.get("seconds", wall)),
        work_cpu_s=float(result.get("cpu_s", "nan")),
        maxrss=ru.ru_maxrss * 1024,
        tree_peak=tree_peak,
        worker_peak=worker_peak,
        client_peak=client_peak,
        load=(load0 + os.getloadavg()[0]) / 2,
        out=result,
    )


@dataclass
class Case:
    name: str
    tool: str
    inp: Input
    what: str
    runs: list[Run] = field(default_factory=list)
    workers: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> Run:
        ordered = sorted(self.runs, key=lambda r: r.work_s)
        return ordered[(len(ordered) - 1) // 2]

    def stat(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.runs)


def dtrace_cmd(inp: Input, out: str, cache: str, workers: int = 0, extra: dict[str, Any] | None = None) -> list[str]:
    args = {
        "inputs": inp.paths,
        "out": out,
        "cache": cache,
        "workers": workers,
        "one_core": workers == 0,
        **(extra or {}),
    }
    return [sys.executable, os.path.join(HERE, "cases.py"), "dtrace", json.dumps(args)]


def warm_page_cache(paths: list[str]) -> None:
    """Read the inputs once so every tool starts with them in the OS page cache.

    "Cold" means no dtrace cache; whether the kernel still holds a file depends on what else
    the (shared) machine did meanwhile, and would add seconds of disk reads to one run and
    not the next.
    """
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(16 << 20):
                pass


def run_case(case: Case, repeat: int, work: str, *, cached: bool = False) -> Case:
    """``repeat`` runs of one case; cold dtrace runs get a fresh cache each time."""
    for i in range(repeat):
        warm_page_cache(case.inp.paths)
        tag = f"{case.name}-{i}"
        env = ONE_THREAD if case.workers == 0 else None
        if case.tool == "dtrace":
            warm = os.path.join(work, f"cache-{case.inp.name}")  # kept for the "cached" cases
            keep = not cached and i == repeat - 1 and not os.path.exists(warm)
            cache = warm if cached or keep else os.path.join(work, f"cache-{tag}")
            if cached and not os.path.isdir(cache):  # populate once, untimed
                measure(dtrace_cmd(case.inp, os.path.join(work, f"res-{tag}-warm"), cache, case.workers), env)
            if not cached:
                shutil.rmtree(cache, ignore_errors=True)
            cmd = dtrace_cmd(case.inp, os.path.join(work, f"res-{tag}"), cache, case.workers, case.extra)
        elif case.tool == "dtrace core":
            cache = os.path.join(work, f"cache-{tag}")
            cmd = [
                sys.executable,
                os.path.join(HERE, "cases.py"),
                "core",
                json.dumps({"inputs": case.inp.paths, "cache": cache}),
            ]
        elif case.tool == "HTA":
            d = os.path.join(work, f"hta-{case.inp.name}")
            if not os.path.isdir(d):
                os.makedirs(d)
                for p in case.inp.paths:
                    os.symlink(p, os.path.join(d, os.path.basename(p)))
            cmd = [HTA_PY, os.path.join(HERE, "peer_hta.py"), json.dumps({"trace_dir": d})]
        else:
            cmd = [sys.executable, os.path.join(HERE, "cases.py"), "floor", json.dumps({"inputs": case.inp.paths})]
        r = measure(cmd, env)
        if case.tool == "dtrace":
            if r.out.get("failed"):
                raise RuntimeError(f"{case.name}: inputs failed: {r.out['failed']}")
            if cached and not r.out.get("cached"):
                raise RuntimeError(f"{case.name}: expected a cache hit")
            if not cached and not keep:
                shutil.rmtree(cache, ignore_errors=True)
        if case.tool == "dtrace core":
            shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(os.path.join(work, f"res-{tag}"), ignore_errors=True)
        case.runs.append(r)
        print(
            f"  {case.name:<16} run {i + 1}/{repeat}: work {r.work_s:7.2f} s  (cpu {r.work_cpu_s:6.2f} s)  "
            f"wall {r.wall_s:7.2f} s  "
            f"cpu {r.cpu_s:7.2f} s  rss {r.maxrss / MB:7.0f} MB  tree {r.tree_peak / MB:7.0f} MB  "
            f"load {r.load:.1f}",
            flush=True,
        )
    return case


_SPIN = (
    "import time\nt = time.perf_counter()\nn = 0\nwhile time.perf_counter() - t < {s}:\n"
    "    for _ in range(20000):\n        pass\n    n += 1\nprint(n)"
)


def calibrate(seconds: float = 3.0) -> float:
    """How much CPU two processes get at once relative to one, right now (1.0–2.0 on 2 cores).

    Two CPU-bound busy loops run together and alone; on an idle 2-core machine the pair does
    twice the iterations of one. Other processes lower this ceiling for the 2-worker speedup.
    """
    cmd = [sys.executable, "-c", _SPIN.format(s=seconds)]
    one = int(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    two = sum(int(p.communicate()[0]) for p in procs)
    return two / max(one, 1)


# -- report ----------------------------------------------------------------------------
def _mb(x: float) -> str:
    return f"{x / MB:,.0f}"


def fmt_table(cases: list[Case]) -> list[str]:
    rows = [
        "| case | tool | input | JSON MB | events | work s | work CPU s | wall s | CPU s | MB/s | events/s "
        "| peak RSS MB | RSS / JSON | per worker MB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        if not c.runs:
            continue
        w = c.stat("work_s")
        rss = c.stat("maxrss") if c.workers == 0 else c.stat("tree_peak")
        per_worker = _mb(c.stat("worker_peak")) if c.workers else "–"
        wc = f"{c.stat('work_cpu_s'):.2f}" if c.workers == 0 else "–"
        rows.append(
            f"| {c.name} | {c.tool} | {c.inp.name} | {_mb(c.inp.json_bytes)} | {c.inp.events:,} "
            f"| {w:.2f} | {wc} | {c.stat('wall_s'):.2f} | {c.stat('cpu_s'):.2f} "
            f"| {c.inp.json_bytes / MB / w:,.0f} "
            f"| {c.inp.events / w:,.0f} | {_mb(rss)} | {rss / c.inp.json_bytes:.2f} | {per_worker} |"
        )
    return rows


def report(
    cases: dict[str, Case],
    env: dict[str, Any],
    path: str,
    profiles: dict[str, dict[str, Any]] | None = None,
    capacity: list[float] | None = None,
) -> str:
    lines = [
        "# dtrace benchmark results",
        "",
        f"Generated by `python bench/run.py` on {env['date']}. Machine: {env['machine']}. "
        f"Load average during the runs: {env['load']}. Median of {env['repeat']} runs per case, "
        "each in a fresh process.",
        "",
        "`work s`: the timed work inside the process (imports and Dask cluster start-up excluded); "
        "MB/s, events/s and the ratios use it. `work CPU s`: the CPU time of that work (single-process "
        "cases): on a shared machine it is the figure the load disturbs least, so the targets are "
        "also given on it. `wall s`: the whole process from outside "
        "(interpreter start, imports, teardown). `CPU s`: user + system time of the process tree. "
        "`peak RSS`: exact peak of the process for single-process cases (`wait4`), peak of the "
        "summed process tree for multi-worker cases (client + scheduler + workers); `per worker`: "
        "the largest worker's peak. JSON MB is the uncompressed size.",
        "",
    ]
    lines += fmt_table(list(cases.values()))
    lines += ["", "## Targets", "", "| target | measured | |", "|---|---|---|"]
    for name, measured, ok in targets(cases):
        lines.append(f"| {name} | {measured} | {'met' if ok else '**missed**'} |")
    lines += [
        "",
        "## Same events, same answers",
        "",
        "Sanity check: every tool analysed the same GPU timeline (sums over ranks, ms).",
        "",
        "| case | tool | parts | GPU events | computation | idle | total |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for c in cases.values():
        if not c.runs:
            continue
        ch = c.median.out.get("check", {})

        def ms(k: str, ch: dict = ch) -> str:
            return f"{ch[k] / 1e3:,.1f}" if k in ch else "–"

        lines.append(
            f"| {c.name} | {c.tool} | {ch.get('parts', '–')} | {ch.get('gpu_events', '–')} | "
            f"{ms('computation_us')} | {ms('idle_us')} | {ms('total_us')} |"
        )
    lines += [
        "",
        "HTA keeps only GPU events whose launch it finds and rounds to whole µs; the floor "
        "counts busy time only (no categories). Computation differs between HTA and dtrace by "
        "their kernel classification (see `../shared/traces/reference/peer_numbers.md`).",
        "",
    ]
    sc = scaling(cases, capacity or [])
    if sc:
        lines += ["## Scaling with workers", ""] + sc + [""]
    if profiles:
        lines += [
            "## Where the time goes (one core, sync scheduler)",
            "",
            "`bench/cases.py profile` wraps the pipeline's functions with timers (no per-event overhead) "
            "and runs the cold, the cached and the re-analysed (`reuse_results=False`) analysis of "
            "`big.json` once more. Seconds of wall time:",
            "",
        ]
        keys = []
        for ph in profiles.values():
            keys += [k for k in ph["phases"] if k not in keys]
        names = list(profiles)
        lines.append("| phase | " + " | ".join(names) + " |")
        lines.append("|---|" + "---:|" * len(names))
        order = sorted(keys, key=lambda k: -max(p["phases"].get(k, 0.0) for p in profiles.values()))
        for k in order:
            lines.append(f"| {k} | " + " | ".join(f"{profiles[n]['phases'].get(k, 0.0):.3f}" for n in names) + " |")
        lines.append("| **total** | " + " | ".join(f"**{profiles[n]['seconds']:.2f}**" for n in names) + " |")
        lines.append("")
    sm = scale_model(cases)
    if sm:
        lines += ["## Scale model inputs (measured here)", ""] + sm + [""]
    lines += ["## Inputs", ""]
    seen = set()
    for c in cases.values():
        if c.inp.name in seen:
            continue
        seen.add(c.inp.name)
        lines.append(
            f"- `{c.inp.name}`: {c.inp.note}; {c.inp.ranks} file(s), {_mb(c.inp.json_bytes)} MB JSON, "
            f"{_mb(c.inp.file_bytes)} MB on disk, {c.inp.events:,} events."
        )
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + ".", ""]
    text = "\n".join(lines)
    try:  # the section bench/ingest.py writes is carried over
        with open(path, encoding="utf-8") as f:
            old = f.read()
    except FileNotFoundError:
        old = ""
    if KEPT_SECTION in old:
        text = text.rstrip("\n") + "\n\n" + KEPT_SECTION + old.split(KEPT_SECTION, 1)[1]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


def _get(cases: dict[str, Case], name: str) -> Case | None:
    c = cases.get(name)
    return c if c is not None and c.runs else None


def targets(cases: dict[str, Case]) -> list[tuple[str, str, bool]]:
    out = []
    cold, cached, hta = _get(cases, "cold"), _get(cases, "cached"), _get(cases, "hta")
    if cold and hta:
        r = hta.stat("work_s") / cold.stat("work_s")
        rc = hta.stat("work_cpu_s") / cold.stat("work_cpu_s")
        out.append(
            (
                "cold ≥ 10× faster than HTA (same file, one core)",
                f"{r:.1f}× wall ({hta.stat('work_s'):.1f} s vs {cold.stat('work_s'):.2f} s), "
                f"{rc:.1f}× CPU ({hta.stat('work_cpu_s'):.1f} s vs {cold.stat('work_cpu_s'):.2f} s); "
                f"whole process {hta.stat('wall_s') / cold.stat('wall_s'):.1f}×",
                min(r, rc) >= 10,
            )
        )
    core = _get(cases, "cold-core")
    if core and hta:
        r = hta.stat("work_s") / core.stat("work_s")
        rc = hta.stat("work_cpu_s") / core.stat("work_cpu_s")
        out.append(
            (
                "like for like: parse + breakdown only vs HTA (same file, one core)",
                f"{r:.1f}× wall, {rc:.1f}× CPU ({core.stat('work_s'):.2f} s)",
                min(r, rc) >= 10,
            )
        )
    if cached and hta:
        r = hta.stat("work_s") / cached.stat("work_s")
        rc = hta.stat("work_cpu_s") / cached.stat("work_cpu_s")
        out.append(("cached vs HTA (same file)", f"{r:.0f}× wall, {rc:.0f}× CPU", True))
    if cold:
        r = cold.stat("maxrss") / cold.inp.json_bytes
        out.append(
            (
                "peak RSS ≤ 1.5× the JSON size (cold)",
                f"{r:.2f}× ({_mb(cold.stat('maxrss'))} MB for {_mb(cold.inp.json_bytes)} MB)",
                r <= 1.5,
            )
        )
    gz = _get(cases, "cold-gz")
    if gz:
        r = gz.stat("maxrss") / gz.inp.json_bytes
        out.append(("peak RSS ≤ 1.5× the JSON size (cold, .json.gz)", f"{r:.2f}×", r <= 1.5))
    if cold and cached:
        r = cold.stat("work_s") / cached.stat("work_s")
        rc = cold.stat("work_cpu_s") / cached.stat("work_cpu_s")
        out.append(
            (
                "cached ≥ 20× faster than cold",
                f"{r:.1f}× wall ({cold.stat('work_s'):.2f} s → "
                f"{cached.stat('work_s'):.2f} s), {rc:.1f}× CPU; whole process "
                f"{cold.stat('wall_s') / cached.stat('wall_s'):.1f}×",
                min(r, rc) >= 20,
            )
        )
    re_ = _get(cases, "reanalyse")
    if cold and re_:
        r = cold.stat("work_s") / re_.stat("work_s")
        out.append(
            (
                "(no target) re-analysis of the cached Parquet events, analyses recomputed",
                f"{r:.1f}× faster than cold ({re_.stat('work_s'):.2f} s)",
                True,
            )
        )
    w1, w2 = _get(cases, "workers-1"), _get(cases, "workers-2")
    if w1 and w2:
        r = w1.stat("work_s") / w2.stat("work_s")
        out.append(
            (
                "2 workers ≥ 1.7× one worker",
                f"{r:.2f}× ({w1.stat('work_s'):.1f} s → {w2.stat('work_s'):.1f} s; "
                "see Scaling for the machine's own ceiling)",
                r >= 1.7,
            )
        )
    job = _get(cases, "job256")
    if job:
        out.append(
            (
                "256 ranks, bounded memory per worker",
                f"{_mb(job.stat('worker_peak'))} MB per worker, {_mb(job.stat('tree_peak'))} MB in all",
                True,
            )
        )
    return out


def scaling(cases: dict[str, Case], capacity: list[float]) -> list[str]:
    """Speed-up with workers, and why: task time (from Dask's task stream) versus wall time."""
    rows = [c for c in (_get(cases, n) for n in ("workers-1", "workers-2", "job256", "job256-cached")) if c]
    if not rows:
        return []
    base = _get(cases, "workers-1")
    out = [
        "| case | workers | ranks | work s | speed-up | task compute s | busy | mean ingest task s "
        "| mean analyse task s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in rows:
        t = c.median.out.get("tasks", {})
        n = c.inp.ranks
        comp = t.get("ingest_file", 0.0) + t.get("analyze_partition", 0.0)
        busy = comp / (c.workers * c.median.work_s) if c.workers else float("nan")
        sp = f"{base.stat('work_s') / c.stat('work_s'):.2f}×" if base and c.inp is base.inp else "–"
        out.append(
            f"| {c.name} | {c.workers} | {n} | {c.stat('work_s'):.2f} | {sp} | {comp:.1f} | {busy:.0%} "
            f"| {t.get('ingest_file', 0.0) / n:.3f} | {t.get('analyze_partition', 0.0) / n:.3f} |"
        )
    if capacity:
        out += [
            "",
            f"Machine capacity measured around these runs: two CPU-bound busy loops together got "
            f"{', '.join(f'{x:.2f}×' for x in capacity)} the iterations of one alone (2.00× on an idle "
            "2-core machine). That is the ceiling of the 2-worker speed-up here: the other processes on "
            "the machine take the rest. `busy` is the workers' summed task time over workers × wall "
            "time: near 100 % means no scheduling gaps; a task that takes longer with 2 workers than "
            "with 1 waited for a CPU.",
        ]
    return out


def scale_model(cases: dict[str, Case]) -> list[str]:
    job, jobc = _get(cases, "job256"), _get(cases, "job256-cached")
    if not job:
        return []
    w = job.workers
    per_rank = job.stat("work_s") * w / job.inp.ranks
    lines = [
        f"- 256-rank job on {w} workers: {job.stat('work_s'):.1f} s → {per_rank * 1e3:.0f} worker-ms per rank "
        f"({job.inp.json_bytes / job.inp.ranks / MB:.1f} MB JSON, {job.inp.events // job.inp.ranks:,} events "
        f"per rank; {job.inp.json_bytes / MB / job.stat('work_s'):.0f} MB/s in all).",
        f"- Peak RSS: {_mb(job.stat('worker_peak'))} MB per worker, {_mb(job.stat('tree_peak'))} MB "
        "for client + scheduler + workers.",
    ]
    if jobc:
        lines.append(
            f"- The same job again from the Parquet cache: {jobc.stat('work_s'):.1f} s "
            f"({jobc.stat('work_s') * w / job.inp.ranks * 1e3:.0f} worker-ms per rank)."
        )
    big = _get(cases, "cold")
    if big:
        lines.append(
            f"- One large trace, one core: {big.inp.json_bytes / MB / big.stat('work_s'):.0f} MB/s, "
            f"{big.inp.events / big.stat('work_s') / 1e3:.0f} k events/s."
        )
    return lines


def environment(repeat: int, loads: list[float]) -> dict[str, Any]:
    import importlib.metadata as md

    cpu = "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    versions = {"python": platform.python_version()}
    for pkg in ("msgspec", "pyarrow", "pandas", "numpy", "dask", "isal"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    if os.path.exists(HTA_PY):
        hv = subprocess.run(
            [
                HTA_PY,
                "-c",
                "import importlib.metadata as m; print(m.version('holistictraceanalysis'), m.version('pandas'))",
            ],
            capture_output=True,
            text=True,
        )
        if hv.returncode == 0:
            h, p = hv.stdout.split()
            versions["HTA"] = f"{h} (pandas {p})"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "repeat": repeat,
        "machine": f"{os.cpu_count()} cores ({cpu}), {_mem_gb():.0f} GB RAM, Linux",
        "load": f"{min(loads):.1f}–{max(loads):.1f} (1-min average; 2 cores, shared)" if loads else "?",
        "versions": versions,
    }


def _mem_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        return 0.0


ALL_CASES = (
    "cold",
    "cached",
    "reanalyse",
    "cold-gz",
    "cold-core",
    "hta",
    "floor",
    "hta-gz",
    "floor-gz",
    "workers-1",
    "workers-2",
    "job256",
    "job256-cached",
)
DEFAULT_CASES = (
    "cold",
    "cached",
    "reanalyse",
    "cold-gz",
    "cold-core",
    "hta",
    "floor",
    "workers-1",
    "workers-2",
    "job256",
    "job256-cached",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (median reported)")
    ap.add_argument(
        "--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated subset of: {', '.join(ALL_CASES)} (or 'all')"
    )
    ap.add_argument(
        "--source",
        default="kineto/single/h100_owlv2.json.gz",
        help="shared trace to tile (relative to ../shared/traces)",
    )
    ap.add_argument("--min-mb", type=float, default=300.0, help="big trace: at least this many MB of JSON")
    ap.add_argument("--min-events", type=int, default=1_000_000, help="big trace: at least this many events")
    ap.add_argument("--ranks", type=int, default=16, help="ranks of the 1-vs-2-workers job")
    ap.add_argument("--job-ranks", type=int, default=256)
    ap.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="skip the phase-by-phase profile of the cold and cached runs",
    )
    ap.add_argument("--quick", action="store_true", help="small inputs for a smoke run (not for the record)")
    ap.add_argument("--out", default=os.path.join(HERE, "out"), help="inputs and scratch (gitignored)")
    ap.add_argument("--results", default=os.path.join(HERE, "RESULTS.md"))
    a = ap.parse_args(argv)
    want = ALL_CASES if a.cases == "all" else tuple(c.strip() for c in a.cases.split(",") if c.strip())
    unknown = sorted(set(want) - set(ALL_CASES))
    if unknown:
        ap.error(f"unknown cases {unknown}; valid: {', '.join(ALL_CASES)}")
    if any(c.startswith("hta") for c in want) and not os.path.exists(HTA_PY):
        ap.error(
            f"HTA venv missing: python3 -m venv {os.path.dirname(os.path.dirname(HTA_PY))} && "
            f"{os.path.dirname(HTA_PY)}/pip install holistictraceanalysis==0.5.0 'pandas<3'"
        )
    if a.quick:
        a.min_mb, a.min_events, a.ranks, a.job_ranks = 30.0, 100_000, 4, 16
    inputs_dir = os.path.join(a.out, "inputs-quick" if a.quick else "inputs")
    work = os.path.join(a.out, "work")
    os.makedirs(inputs_dir, exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    source = os.path.join(SHARED, "traces", a.source)

    print("inputs:", flush=True)
    big, big_gz = build_big(inputs_dir, source, a.min_mb, a.min_events)
    ranks = build_ranks(inputs_dir, source, a.ranks, 1) if {"workers-1", "workers-2"} & set(want) else None
    job = None
    if {"job256", "job256-cached"} & set(want):
        job = build_job(
            inputs_dir,
            a.job_ranks,
            8 if not a.quick else 3,
            150,
            os.path.join(SHARED, "traces", "kineto", "single", "mi210_gpu_only.json.gz"),
        )

    spec = {
        "cold": ("dtrace", big, "parse + analyse, sync scheduler, one core", 0),
        "cached": ("dtrace", big, "again, unchanged input: cached events and per-part results, one core", 0),
        "reanalyse": (
            "dtrace",
            big,
            "again, analyses recomputed from the cached Parquet events (reuse_results=False), one core",
            0,
        ),
        "cold-gz": ("dtrace", big_gz, "parse + analyse .json.gz, one core", 0),
        "cold-core": ("dtrace core", big, "parse + breakdown/streams/steps only (HTA's scope), one core", 0),
        "hta": ("HTA", big, "TraceAnalysis + get_temporal_breakdown", 0),
        "hta-gz": ("HTA", big_gz, "TraceAnalysis + get_temporal_breakdown", 0),
        "floor": ("json+pandas", big, "json.load + DataFrame + busy union", 0),
        "floor-gz": ("json+pandas", big_gz, "json.load + DataFrame + busy union", 0),
        "workers-1": ("dtrace", ranks, "cold, LocalCluster 1 worker", 1),
        "workers-2": ("dtrace", ranks, "cold, LocalCluster 2 workers", 2),
        "job256": ("dtrace", job, "cold, LocalCluster 2 workers", 2),
        "job256-cached": ("dtrace", job, "from the Parquet cache, 2 workers", 2),
    }
    cases: dict[str, Case] = {}
    loads: list[float] = []
    capacity: list[float] = []
    for name in ALL_CASES:
        if name not in want:
            continue
        tool, inp, what, workers = spec[name]
        if workers and not capacity:
            capacity.append(calibrate())
            print(f"machine capacity now: 2 busy processes get {capacity[-1]:.2f}× the CPU of one", flush=True)
        print(f"{name}: {tool} on {inp.name} ({what})", flush=True)
        c = Case(name, tool, inp, what, workers=workers, extra={"reuse_results": False} if name == "reanalyse" else {})
        run_case(c, a.repeat, work, cached=name in ("cached", "reanalyse", "job256-cached"))
        loads += [r.load for r in c.runs]
        cases[name] = c
        if name == "workers-2":
            capacity.append(calibrate())
            print(f"machine capacity now: {capacity[-1]:.2f}×", flush=True)
    profiles = {}
    if a.profile and "cold" in cases:
        print("profile: where the time goes (cold, cached, re-analysed)", flush=True)
        cache = os.path.join(work, "cache-profile")
        for name in ("cold", "cached", "reanalyse"):
            args = {
                "inputs": big.paths,
                "out": os.path.join(work, f"res-profile-{name}"),
                "cache": cache,
                **({"reuse_results": False} if name == "reanalyse" else {}),
            }
            warm_page_cache(big.paths)
            r = measure([sys.executable, os.path.join(HERE, "cases.py"), "profile", json.dumps(args)], ONE_THREAD)
            profiles[name] = r.out
            loads.append(r.load)
    text = report(cases, environment(a.repeat, loads), a.results, profiles, capacity)
    with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(
            {n: {"tool": c.tool, "input": c.inp.name, "runs": [r.__dict__ for r in c.runs]} for n, c in cases.items()},
            f,
            indent=1,
        )
    shutil.rmtree(work, ignore_errors=True)
    print()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

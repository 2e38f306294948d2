"""The big job against its floor: ``dtrace analyze`` cold next to gunzip + the scanner alone.

Usage::

    python bench/floor.py                      # 32 ranks of the MI300 trace x19 (320 MB JSON each), 3 repeats
    python bench/floor.py --ranks 8 --repeat 1 # a smaller job, one run of each
    python bench/floor.py --job DIR            # any folder of Kineto traces (.json or .json.gz)

The job (unless ``--job``) is ``../shared/traces/kineto/single/mi300_resnet_rccl_rank0.json.gz``
tiled ``--times`` times in time per rank (:func:`dtrace.generate.tile.tile_trace`: 320 MB of JSON
and 1.07 M events a rank at x19), replicated to ``--ranks`` ranks with GPU durations perturbed per
rank, gzip; built once under ``bench/out/floor/`` and kept.

Each repeat runs, alternately, each in a fresh interpreter and measured from outside (wall time,
CPU time of the process tree):

- ``floor``: what any reader of these files must do before it builds a column: gunzip every input
  (isal, the decompressor dtrace uses) 4 MB at a time into one window per process, and run
  dtrace's compiled scanner over each block's complete events as it arrives (the block cut after
  its last ``}`` ``,`` ``{``, the rest carried over: how dtrace's reader goes through a file),
  one process per core (``--workers``, default all cores) taking the inputs largest first.
  Nothing is kept, written or analysed. The events array is located by the first
  ``"traceEvents"`` key and the last ``}`` ``]`` of the text (the layout Kineto writes, and
  ``tile_trace``); the report gives the scanner's record count (the complete ``X`` events, and
  any event it left to msgspec).
- ``whole``: the same work through one buffer the size of a file (each input gunzipped whole,
  then scanned in one call): the floor as this benchmark measured it until 2026-11-29. Its content
  passes through memory instead of the cache, and it costs ~1.6x the streamed floor; it is
  reported beside it, and its record count must equal the floor's.
- ``dtrace``: ``python -m dtrace analyze JOB -o OUT --no-progress`` into a new OUT (cold: no cache),
  its default local cluster; the phases come from OUT's manifest. With ``--old CHECKOUT`` that
  checkout's dtrace runs too (``PYTHONPATH`` set to it), alternated with this one's: before/after
  in one run.

The report gives the medians, the ratio dtrace / floor (the target is <= 1.5x) and where the
time above the floor goes (start, ingest, analyse, reduce), so a change can be aimed at the
phase that holds it. ``--write FILE`` appends the report to FILE (e.g. ``bench/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
SHARED = os.environ.get("DTRACE_SHARED", os.path.join(ROOT, "..", "shared"))
SOURCE = os.path.join(SHARED, "traces", "kineto", "single", "mi300_resnet_rccl_rank0.json.gz")

from run import ONE_THREAD, build_ranks, measure, warm_page_cache  # noqa: E402

_END = re.compile(rb"\}\s*\]")


def _scanner() -> Any:
    """dtrace's compiled scanner: a floor without it would measure something else."""
    from dtrace.readers._scanned import new_scanner

    scanner = new_scanner()
    if scanner is None:
        raise SystemExit("the compiled scanner is not built (pip install -e . builds it)")
    return scanner


def _scan(scanner: Any, buf: bytearray, lo: int, hi: int, path: str, what: str = "its events array") -> int:
    """The scanner's record count of ``buf[lo:hi]`` (a JSON array of events); the benchmark stops
    where the scanner does not read it."""
    with memoryview(buf) as mv, mv[lo:hi] as text:
        got = scanner.scan(text) if 0 <= lo < hi else None
    if got is None:
        raise SystemExit(f"{path}: the scanner did not read {what}; not a floor input")
    return int(got[0])


def _array_end(buf: bytearray, lo: int, hi: int) -> int:
    """Where the events array that starts at ``lo`` ends: after the last ``}`` ``]`` of
    ``buf[:hi]`` (-1: none in its last 64 KB)."""
    return max((m.end() for m in _END.finditer(buf, max(lo, hi - (1 << 16)), hi)), default=-1)


def gunzip_scan(path: str) -> dict[str, float]:
    """One input: its content gunzipped into one buffer, then its events array scanned in one
    call; the seconds of each and the scanner's record count."""
    from dtrace.readers._io import _gzip, is_gzip

    scanner = _scanner()
    t = time.process_time()
    if is_gzip(path):
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            size = int.from_bytes(f.read(4), "little")  # ISIZE: the content's size mod 2**32
        buf = _buffer(size)
        with _gzip.GzipFile(path, "rb") as g:
            got, view = 0, memoryview(buf)[:size]
            while got < size:
                n = g.readinto(view[got:])
                if not n:
                    break
                got += n
            if got < size or g.read(1):  # over 4 GB, or a size the trailer does not state
                raise SystemExit(f"{path}: content size differs from the gzip trailer's; not a floor input")
    else:
        size = os.path.getsize(path)
        buf = _buffer(size)
        with open(path, "rb") as f:
            if f.readinto(memoryview(buf)[:size]) != size:
                raise SystemExit(f"{path}: changed while read; not a floor input")
    gunzip = time.process_time() - t
    t = time.process_time()
    lo = buf.index(b"[", buf.index(b'"traceEvents"', 0, size), size)
    records = _scan(scanner, buf, lo, _array_end(buf, lo, size), path)
    return {"gunzip_s": gunzip, "scan_s": time.process_time() - t, "records": records, "json_bytes": size}


_SEP = re.compile(rb"\}\s*,\s*\{")


def gunzip_scan_streamed(path: str, block: int = 0) -> dict[str, float]:
    """One input the way dtrace's reader goes through it: gunzipped ``block`` bytes at a time
    (default the reader's, 4 MB) into one reused window, each block's complete events scanned as
    they arrive (the block cut after its last ``}`` ``,`` ``{``, the rest carried to the next one).
    The same work as :func:`gunzip_scan` with the content passing through the cache instead of a
    buffer the size of the file."""
    from dtrace.readers._io import BLOCK as READ_BLOCK
    from dtrace.readers._io import _gzip, is_gzip

    step = block or READ_BLOCK
    scanner = _scanner()
    buf = _buffer(4 * step)
    view = memoryview(buf)
    gunzip = scan = 0.0
    records = size = hi = 0
    lo = -1  # the events array's ``[``, once found
    with (_gzip.GzipFile if is_gzip(path) else open)(path, "rb") as f:
        while True:
            if hi + step > len(buf):
                raise SystemExit(f"{path}: an event longer than {3 * step} bytes; not a floor input")
            t = time.process_time()
            n = f.readinto(view[hi : hi + step])
            gunzip += time.process_time() - t
            hi, size = hi + n, size + n
            t = time.process_time()
            if lo < 0:
                at = buf.find(b'"traceEvents"', 0, hi)
                lo = buf.find(b"[", at, hi) if at >= 0 else -1
                if lo < 0 and n:
                    continue
            if not n:  # the last block: up to the array's end
                records += _scan(scanner, buf, lo, _array_end(buf, lo, hi), path)
                scan += time.process_time() - t
                break
            last = None
            for m in _SEP.finditer(buf, max(lo, hi - (1 << 18)), hi):
                last = m
            if last is not None:
                j = buf.index(b",", last.start(), last.end())  # the comma between the two events
                buf[j] = ord("]")
                records += _scan(scanner, buf, lo, j + 1, path, what="a block of its events")
                buf[j] = ord("[")
                buf[: hi - j] = buf[j:hi]  # the rest, after the new ``[``, to the window's start
                lo, hi = 0, hi - j
            scan += time.process_time() - t
    return {"gunzip_s": gunzip, "scan_s": scan, "records": records, "json_bytes": size}


_BUF = bytearray()


def _buffer(size: int) -> bytearray:
    """One content buffer per floor process, reused from file to file (grown when a file is larger):
    a fresh buffer per file would be mapped and zero-filled by the system page by page each time, a
    cost no streaming reader has (dtrace reads through one reused window)."""
    global _BUF
    if len(_BUF) < size:
        _BUF = bytearray()  # the old one freed before the larger one is made
        _BUF = bytearray(size)
    return _BUF


FLOORS = {"floor": gunzip_scan_streamed, "whole": gunzip_scan}
"""The floor (streamed, as the reader reads), and the same work through one buffer the size of a
file (the floor as this benchmark measured it until 2026-11-29, kept for comparison)."""


def floor_child(paths: list[str], workers: int, kind: str = "floor") -> None:
    """A floor, in this fresh interpreter: every input on ``workers`` processes; one JSON line."""
    import multiprocessing

    paths = sorted(paths, key=os.path.getsize, reverse=True)  # largest first: the pool ends together
    t = time.perf_counter()
    with multiprocessing.get_context("forkserver").Pool(workers) as pool:
        got = pool.map(FLOORS[kind], paths, chunksize=1)
    out = {
        "seconds": time.perf_counter() - t,
        "gunzip_cpu_s": sum(g["gunzip_s"] for g in got),
        "scan_cpu_s": sum(g["scan_s"] for g in got),
        "records": sum(g["records"] for g in got),
        "json_bytes": sum(g["json_bytes"] for g in got),
    }
    print(json.dumps(out), flush=True)


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", help="a folder of traces (default: the generated job)")
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--times", type=int, default=19, help="tiling of the source trace per rank (x19: 320 MB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="floor processes (default: all cores)")
    ap.add_argument("--old", metavar="CHECKOUT", help="also run this checkout's dtrace (before/after, alternated)")
    ap.add_argument("--write", metavar="FILE", help="append the report to FILE")
    ap.add_argument("--child-floor", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--child-kind", default="floor", choices=sorted(FLOORS), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child_floor:
        floor_child(a.child_floor, a.workers, a.child_kind)
        return 0

    if a.job:
        job = os.path.abspath(a.job)
        paths = sorted(os.path.join(job, f) for f in os.listdir(job) if f.endswith((".json", ".json.gz")))
        what = f"{job}: {len(paths)} traces"
    else:
        inp = build_ranks(os.path.join(HERE, "out", "floor"), SOURCE, a.ranks, a.times)
        paths = [os.path.abspath(p) for p in inp.paths]  # each checkout runs from its own root
        job = os.path.dirname(paths[0])
        what = f"{inp.note}: {len(paths)} files, {inp.json_bytes / 1e9:.2f} GB JSON, {inp.file_bytes / 1e6:.0f} MB gzip, {inp.events:,} events"
    print(what, flush=True)
    warm_page_cache(paths)
    trees = {**({"old": os.path.abspath(a.old)} if a.old else {}), "new": ROOT}
    envs = {
        k: {**os.environ, "PYTHONPATH": t + os.pathsep + os.environ.get("PYTHONPATH", "")} for k, t in trees.items()
    }
    floor_env = {**envs["new"], **ONE_THREAD}
    rows: dict[str, list[dict[str, Any]]] = {**{k: [] for k in FLOORS}, **{k: [] for k in trees}}
    work = tempfile.mkdtemp(prefix="dtrace-floor-")
    try:
        for i in range(a.repeat):
            for kind in FLOORS:
                load = _load()
                cmd = [sys.executable, __file__, "--workers", str(a.workers), "--child-kind", kind, "--child-floor"]
                r = measure([*cmd, *paths], floor_env)
                wall, cpu, got = r.wall_s, r.cpu_s, r.out
                if not got["records"]:
                    raise SystemExit("the floor scanned no event: not a Kineto job")
                rows[kind].append({"wall": wall, "cpu": cpu, "load": load, **got})
                print(
                    f"  [{i + 1}/{a.repeat}] {kind:6s} {wall:7.2f} s wall {cpu:7.2f} s CPU (load {load:.1f})",
                    flush=True,
                )
            for kind, env in envs.items():
                out_dir = os.path.join(work, f"{kind}{i}")
                load = _load()
                # from the checkout's root: ``python -m`` puts the current folder before PYTHONPATH
                cmd = [sys.executable, "-m", "dtrace", "analyze", job, "-o", out_dir, "--no-progress"]
                r = measure(cmd, env, parse=False, cwd=trees[kind])
                wall, cpu = r.wall_s, r.cpu_s
                with open(os.path.join(out_dir, "manifest.json")) as f:
                    man = json.load(f)
                rows[kind].append({"wall": wall, "cpu": cpu, "load": load, "phases": man.get("phases", {})})
                phases = " ".join(f"{k} {v:.1f}" for k, v in man.get("phases", {}).items())
                print(
                    f"  [{i + 1}/{a.repeat}] {kind:6s} {wall:7.2f} s wall {cpu:7.2f} s CPU (load {load:.1f}; {phases})",
                    flush=True,
                )
                shutil.rmtree(out_dir, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(what, rows, a.workers)
    print(text)
    if a.write:
        with open(a.write, "a") as f:
            f.write("\n" + text)
    return 0


def report(what: str, rows: dict[str, list[dict[str, Any]]], workers: int) -> str:
    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[kind])

    fw = med("floor", "wall")
    kinds = [k for k in ("old", "new") if k in rows]
    order = ["plan", "start", "ingest", "analyse", "reduce"]
    n = len(rows["floor"])
    loads = [r["load"] for k in rows for r in rows[k]]
    lines = [
        f"### The big job against its floor (`bench/floor.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"{what}; {os.cpu_count()} cores, floor on {workers} processes; median of {n}, "
        f"{' and '.join(['the floors', *kinds])} alternated; load {min(loads):.1f}–{max(loads):.1f}.",
        "",
        "| | wall s | CPU s | × floor (wall) | phases (median s) |",
        "|---|---:|---:|---:|---|",
    ]
    labels = {"floor": "floor: gunzip + scanner, streamed, all cores", "whole": "the same through a whole-file buffer"}
    for k, label in labels.items():
        w, c = med(k, "wall"), med(k, "cpu")
        gz, sc = med(k, "gunzip_cpu_s"), med(k, "scan_cpu_s")
        lines.append(
            f"| {label} ({int(med(k, 'records')):,} records) | {w:.2f} | {c:.2f} (gunzip {gz:.2f}, scan {sc:.2f}) "
            f"| {w / fw:.2f} | |"
        )
    for k in kinds:
        dw, dc = med(k, "wall"), med(k, "cpu")
        names = sorted({p for r in rows[k] for p in r["phases"]}, key=lambda p: order.index(p) if p in order else 9)
        pm = ", ".join(f"{p} {statistics.median(r['phases'].get(p, 0.0) for r in rows[k]):.2f}" for p in names)
        label = "`dtrace analyze`, cold" + (f" ({k})" if len(kinds) > 1 else "")
        lines.append(f"| {label} | {dw:.2f} | {dc:.2f} | **{dw / fw:.2f}×** | {pm} |")
    if len(kinds) > 1:
        lines.append(
            f"| old / new | {med('old', 'wall') / med('new', 'wall'):.2f}× | {med('old', 'cpu') / med('new', 'cpu'):.2f}× | | |"
        )
    if med("whole", "records") != med("floor", "records"):
        lines.append("| **the two floors scanned different record counts: the streamed floor is wrong** | | | | |")
    ratio = med("new", "wall") / fw
    lines += ["", f"Target: dtrace within 1.5× of the floor: {ratio:.2f}×, {'met' if ratio <= 1.5 else 'missed'}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

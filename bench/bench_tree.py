"""Benchmark: host → GPU tree build time and memory on a ≥ 1 M-event tiled trace.

Not a test. Tiles a real shared Kineto trace in time (:func:`dtrace.generate.tile.tile_trace`) into a
temporary file of at least ``--min-events`` events, reads it once, then times
:meth:`dtrace.calltree.Tree.from_part` (median of ``--repeat`` runs, default and with
``python_function`` events) and the per-op table, and reports the peak memory the build
allocates (``tracemalloc``, numpy and pandas allocations included) and the process's peak RSS.

Usage::

    python bench/bench_tree.py                         # h100_owlv2 × 8 ≈ 1.06 M events
    python bench/bench_tree.py --source PATH --times 10
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SOURCE = os.path.join(HERE, "..", "..", "shared", "traces", "kineto", "single", "h100_owlv2.json.gz")


def _timed(fn, repeat: int):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times), min(times)


def _peak_mb(fn) -> tuple[object, float]:
    tracemalloc.start()
    try:
        out = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=os.environ.get("DTRACE_BENCH_SOURCE", DEFAULT_SOURCE))
    ap.add_argument("--times", type=int, default=None, help="copies (default: enough for --min-events)")
    ap.add_argument("--min-events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", default=None, help="write the tiled trace here and keep it")
    args = ap.parse_args(argv)

    from dtrace.analyses.batch import prepare_part
    from dtrace.calltree import Tree
    from dtrace.generate.tile import tile_trace
    from dtrace.options import Options
    from dtrace.readers import detect

    src = os.path.abspath(args.source)
    if not os.path.exists(src):
        print(f"source trace not found: {src}", file=sys.stderr)
        return 2
    tmpdir = tempfile.mkdtemp(prefix="dtrace-bench-tree-")
    dst = args.keep or os.path.join(tmpdir, "tiled.json")
    try:
        t0 = time.perf_counter()
        times = args.times
        if times is None:
            one = tile_trace(src, dst, times=1)
            times = max(1, -(-args.min_events // one["events"]))
        info = tile_trace(src, dst, times=times)
        t_tile = time.perf_counter() - t0
        t0 = time.perf_counter()
        tf = detect(dst).read(dst)
        p = tf.parts[0]
        part = prepare_part(
            p.events.to_pandas(),
            p.collectives.to_pandas(),
            p.memcpy.to_pandas(),
            rank=0,
            device=p.device,
            fmt=tf.format,
            options=Options(),
            base_ns=int(tf.meta.get("base_time_ns") or 0),
        )
        t_read = time.perf_counter() - t0
        n_x = int(tf.meta.get("events", 0))
        print(
            f"source: {os.path.basename(src)} x {times} -> {info['events']:,} JSON events "
            f"({info['json_bytes'] / 2**20:,.0f} MiB), {n_x:,} complete events; tiled in {t_tile:.1f} s, "
            f"read + prepare {t_read:.1f} s"
        )
        print(f"host events {len(part.host):,}, GPU events {len(part.gpu):,}")
        for python in (False, True):
            tree, med, best = _timed(lambda python=python: Tree.from_batch(part, python=python), args.repeat)
            _, peak = _peak_mb(lambda python=python: Tree.from_batch(part, python=python))
            ops, ops_med, _ = _timed(tree.ops, args.repeat)
            s = tree.stats
            print(
                f"tree (python={python}): {tree.size:,} nodes ({s['host_nodes']:,} host, {s['gpu_nodes']:,} GPU, "
                f"{s['unlinked_gpu']:,} unlinked, depth {s['max_depth']}, {s['build_rounds']} jump rounds, "
                f"{s['partial_overlaps']} partial overlaps)"
            )
            print(
                f"  build: median {med:.3f} s, best {best:.3f} s ({tree.size / med / 1e6:.2f} M nodes/s); "
                f"peak allocated during build {peak:,.0f} MiB ({peak * 2**20 / max(tree.size, 1):,.0f} B/node)"
            )
            print(f"  ops table: median {ops_med:.3f} s, {len(ops)} op names")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"process peak RSS (reading included): {rss:,.0f} MiB")
    finally:
        if not args.keep and os.path.exists(dst):
            os.unlink(dst)
        os.rmdir(tmpdir) if os.path.isdir(tmpdir) and not os.listdir(tmpdir) else None
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Ingest speed of the Kineto reader: JSON bytes -> event columns, old code against new, one core.

``python bench/ingest.py`` tiles a real shared trace in time (:func:`dtrace.generate.tile.tile_trace`,
default ``kineto/single/mi300_resnet_rccl_rank0.json.gz`` to >= 300 MB of JSON) and runs, each
in a fresh interpreter with the libraries' thread pools at one thread, interleaved and
``--repeat`` times (median reported):

- ``decode floor``: msgspec typed decoding of the same bytes into a ``Struct`` of the 6 fields
  every event table needs (``ph cat name ts dur pid``), nothing else: what any msgspec reader
  pays before it builds a column;
- ``old reader``: :func:`read_kineto` of the ``--baseline`` git revision (its ``dtrace`` package
  extracted with ``git archive`` into a scratch folder and imported under another name);
- ``new reader, pure``: :func:`read_kineto` of this checkout on its pure-Python path
  (``DTRACE_PURE_SCAN=1``: msgspec structs);
- ``new reader``: :func:`read_kineto` of this checkout with the compiled scanner
  (``dtrace/readers/_scan.c``; the same as the pure row where the extension is not built);
- with ``--hta``: ``dtrace.analyze`` cold, old (``--baseline``) and new (empty cache, sync scheduler, one core; what
  ``bench/run.py``'s ``cold`` case runs) and HTA 0.5.0 (``bench/peer_hta.py``: parse +
  temporal breakdown) on the same file, the whole process measured from outside (wall time and
  the exact peak RSS from ``wait4``).

MB/s per core is JSON bytes per CPU second of the reading alone (``time.process_time`` inside
the child: imports excluded, and on a loaded shared machine CPU time is what the load disturbs
least); the wall-clock figure is given too. The children's tables are compared: the old reader
and the new one on both paths must give identical parts (every events and side table), or the
script fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
SHARED = os.environ.get("DTRACE_SHARED", os.path.join(ROOT, "..", "shared"))
MB = 1e6


def _one_core() -> None:
    import pyarrow

    pyarrow.set_cpu_count(1)
    pyarrow.set_io_thread_count(1)


def _digest(tf: Any) -> str:
    """A hash of every table of every part (events and side tables), to compare readers."""
    import xxhash

    h = xxhash.xxh3_128()
    for p in tf.parts:
        tables = {"events": p.events, "collectives": p.collectives, "memcpy": p.memcpy, **p.side}
        for name in sorted(tables):
            t = tables[name]
            h.update(f"{p.device}/{name}/{t.schema}/{t.num_rows}".encode())
            for col in t.columns:
                h.update(repr(col.to_pylist()).encode())
    return h.hexdigest()


def _env(kind: str) -> dict[str, str]:
    """The child's environment: one thread; the pure path forced for ``pure``, the scanner allowed otherwise."""
    from run import ONE_THREAD

    return {**ONE_THREAD, "DTRACE_PURE_SCAN": "1" if kind == "pure" else ""}


def child(a: argparse.Namespace) -> None:
    """One measurement in this fresh interpreter; prints one JSON line."""
    _one_core()
    if a.child == "floor":
        import msgspec

        event = msgspec.defstruct(
            "Event",
            [("ph", str, ""), ("cat", str | None, None), ("name", str, ""), ("ts", float | None, None)]
            + [("dur", float | None, None), ("pid", int | str | None, None)],
            gc=False,
        )
        doc_type = msgspec.defstruct("Doc", [("traceEvents", list[event], [])], gc=False)  # type: ignore[valid-type]
        with open(a.path, "rb") as f:
            data = f.read()
        decoder = msgspec.json.Decoder(doc_type)
        t, c = time.perf_counter(), time.process_time()
        doc = decoder.decode(data)
        n = len(doc.traceEvents)
        del doc
        out = {"seconds": time.perf_counter() - t, "cpu_s": time.process_time() - c, "events": n}
    elif a.child == "profile":
        out = profile(a.path)
    else:
        if a.child == "pure":
            os.environ["DTRACE_PURE_SCAN"] = "1"
        if a.child == "old":
            sys.path.insert(0, a.old_root)
            from dtrace_base.readers.kineto import read_kineto  # type: ignore[import-not-found]
        else:
            from dtrace.readers.kineto import read_kineto
        t, c = time.perf_counter(), time.process_time()
        tf = read_kineto(a.path)
        out = {"seconds": time.perf_counter() - t, "cpu_s": time.process_time() - c}
        out["events"] = sum(p.events.num_rows for p in tf.parts)
        if a.digest:
            out["digest"] = _digest(tf)
    print(json.dumps(out), flush=True)


def profile(path: str) -> dict[str, Any]:
    """CPU seconds of the new reader's phases on ``path``, measured by wrapping its functions
    (a few timer calls per block, nothing per event)."""
    from dtrace.readers import _chrome, _io, kineto

    spent: dict[str, float] = {}
    clock = time.process_time
    mark = {"yielded": 0.0}

    def timed(key: str, func: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            t = clock()
            try:
                return func(*args, **kw)
            finally:
                spent[key] = spent.get(key, 0.0) + clock() - t

        return wrapper

    chunks = _chrome.ChromeTrace.chunks

    def chunks_marked(self: Any) -> Any:
        for chunk in chunks(self):
            mark["yielded"] = clock()
            yield chunk
            mark["yielded"] = clock()
        mark["yielded"] = 0.0

    add_chunk = kineto._add_chunk

    def add_chunk_marked(*args: Any) -> Any:
        if mark["yielded"]:  # since the block was handed over: the previous block's structs freed
            spent["free the decoded structs"] = spent.get("free the decoded structs", 0.0) + clock() - mark["yielded"]
        return timed("columns from the structs (_add_chunk)", add_chunk)(*args)

    _chrome.ChromeTrace.chunks = chunks_marked  # type: ignore[method-assign]
    _chrome.ChromeTrace._decode_events = timed(
        "decode (scanner, msgspec for what it leaves)", _chrome.ChromeTrace._decode_events
    )  # type: ignore[method-assign]
    _io.Content.readinto = timed("read + hash bytes", _io.Content.readinto)  # type: ignore[method-assign]
    kineto._add_chunk = add_chunk_marked
    kineto._add_memory = timed("memory events (_add_memory)", kineto._add_memory)
    add_scanned = kineto._add_scanned

    def add_scanned_marked(*args: Any) -> Any:
        if mark["yielded"]:
            spent["free the previous block"] = spent.get("free the previous block", 0.0) + clock() - mark["yielded"]
        return timed("columns from the scanned block (_add_scanned)", add_scanned)(*args)

    kineto._add_scanned = add_scanned_marked
    t = clock()
    kineto.read_kineto(path)
    total = clock() - t
    spent["rest (boundaries, joining the columns, tables, side tables)"] = total - sum(spent.values())
    return {"seconds": total, "cpu_s": total, "phases": spent}


SECTION = "## Ingest, one core (`bench/ingest.py`)"  # run.py's KEPT_SECTION: it carries the section over
_said: list[str] = []


def say(line: str = "") -> None:
    """Print a line of the report and keep it for ``--write``."""
    _said.append(line)
    print(line, flush=True)


def write_section(path: str, lines: list[str], command: str) -> None:
    """Put ``lines`` as the last section of the results file ``path`` (replacing an older one;
    ``bench/run.py`` carries the section over when it rewrites the rest of the file)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = "# dtrace benchmark results\n"
    text = text.split(SECTION)[0].rstrip("\n")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    body = [SECTION, "", f"`{command}` on {stamp}; median of the runs, each in a fresh interpreter.", "", *lines]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n\n" + "\n".join(body).rstrip("\n") + "\n")


def extract_baseline(rev: str, dest: str) -> str:
    """The ``dtrace`` package of git revision ``rev``, as package ``dtrace_base`` under ``dest``."""
    tar = subprocess.run(["git", "-C", ROOT, "archive", rev, "dtrace"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=tar, check=True)
    os.rename(os.path.join(dest, "dtrace"), os.path.join(dest, "dtrace_base"))
    return dest


def build_input(out: str, source: str, min_mb: float) -> tuple[str, int, int]:
    from dtrace.generate.tile import tile_trace

    os.makedirs(out, exist_ok=True)
    name = os.path.basename(source).split(".")[0]
    path = os.path.join(out, f"{name}_{int(min_mb)}mb.json")
    info_path = path + ".info"
    if not (os.path.exists(path) and os.path.exists(info_path)):
        probe = tile_trace(source, os.path.join(out, "probe.json"), times=1)
        os.unlink(probe["path"])
        times = max(1, -(-int(min_mb * MB) // probe["json_bytes"]))
        info = tile_trace(source, path, times=times)
        with open(info_path, "w", encoding="utf-8") as f:
            json.dump(info, f)
    with open(info_path, encoding="utf-8") as f:
        info = json.load(f)
    return path, int(info["json_bytes"]), int(info["events"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="kineto/single/mi300_resnet_rccl_rank0.json.gz")
    ap.add_argument("--min-mb", type=float, default=300.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", default="integrate", help="git revision of the old reader")
    ap.add_argument("--hta", action="store_true", help="also dtrace cold (whole pipeline) and HTA 0.5.0")
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", "/work/venv-hta/bin/python"))
    ap.add_argument("--out", default=os.path.join(HERE, "out", "ingest"))
    ap.add_argument(
        "--write", nargs="?", const=os.path.join(HERE, "RESULTS.md"), help="put the report into this results file"
    )
    ap.add_argument("--child", choices=("floor", "old", "new", "pure", "profile"), help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--old-root", help=argparse.SUPPRESS)
    ap.add_argument("--digest", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0

    from run import ONE_THREAD, measure, warm_page_cache

    path, json_bytes, events = build_input(a.out, os.path.join(SHARED, "traces", a.source), a.min_mb)
    warm_page_cache([path])
    scratch = tempfile.mkdtemp(prefix="dtrace-ingest-")
    loads: list[float] = []
    try:
        old_root = extract_baseline(a.baseline, scratch)
        labels = {"floor": "decode floor", "old": "old reader", "pure": "new reader, pure", "new": "new reader"}
        rows: dict[str, list[Any]] = {label: [] for label in labels.values()}
        digests: dict[str, str] = {}
        for kind in ("old", "pure", "new"):  # one untimed run of each reader hashes its tables
            cmd = [sys.executable, __file__, "--child", kind, "--path", path, "--old-root", old_root, "--digest"]
            digests[kind] = measure(cmd, env=_env(kind)).out["digest"]
        for _ in range(a.repeat):
            for kind, label in labels.items():
                cmd = [sys.executable, __file__, "--child", kind, "--path", path, "--old-root", old_root]
                rows[label].append(measure(cmd, env=_env(kind)))
                loads.append(os.getloadavg()[0])
        if len(set(digests.values())) != 1:
            print(f"DIFFERENT TABLES: {digests}", file=sys.stderr)
            return 1
        from dtrace.readers import _scanned

        say(f"- input: {os.path.relpath(path, ROOT)} ({json_bytes / MB:.0f} MB JSON, {events:,} events)")
        say(
            "- tables: old reader, new reader pure and with the scanner identical "
            f"(digest {digests['new'][:16]}); compiled scanner built: {'yes' if _scanned.AVAILABLE else 'NO'}"
        )
        say()
        say("| what | MB/s per core (CPU) | CPU s | wall s | peak RSS MB |")
        say("|---|---:|---:|---:|---:|")
        med: dict[str, float] = {}
        for label, runs in rows.items():
            cpu = statistics.median(r.out["cpu_s"] for r in runs)
            wall = statistics.median(r.out["seconds"] for r in runs)
            rss = statistics.median(r.maxrss for r in runs)
            med[label] = cpu
            say(f"| {label} | {json_bytes / MB / cpu:.0f} | {cpu:.2f} | {wall:.2f} | {rss / MB:.0f} |")
        say()
        say(f"- new reader vs old: {med['old reader'] / med['new reader']:.2f}x less CPU per byte")
        say(f"- compiled scanner vs pure path: {med['new reader, pure'] / med['new reader']:.2f}x less CPU per byte")
        cmd = [sys.executable, __file__, "--child", "profile", "--path", path]
        prof = measure(cmd, env=ONE_THREAD).out
        say()
        say(f"New reader with the scanner, phases (CPU s, one profiled run; {events:,} events):")
        say()
        say("| phase | CPU s | ns per event |")
        say("|---|---:|---:|")
        for k, v in sorted(prof["phases"].items(), key=lambda kv: -kv[1]):
            say(f"| {k} | {v:.2f} | {v * 1e9 / events:.0f} |")
        say(f"| **total** | **{prof['cpu_s']:.2f}** | **{prof['cpu_s'] * 1e9 / events:.0f}** |")
        if a.hta:
            hta_cold(a, path, json_bytes, scratch, loads)
        say()
        say(f"- load average during the runs: {min(loads):.2f}-{max(loads):.2f} ({os.cpu_count()} cores)")
        if a.write:
            write_section(
                a.write, _said, "python bench/ingest.py " + " ".join(argv if argv is not None else sys.argv[1:])
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def hta_cold(a: argparse.Namespace, path: str, json_bytes: int, scratch: str, loads: list[float]) -> None:
    """dtrace cold (whole pipeline, one core; the ``--baseline`` revision and this checkout) against
    HTA 0.5.0 on the same file, interleaved."""
    from run import ONE_THREAD, measure

    trace_dir = os.path.join(scratch, "hta")
    os.makedirs(trace_dir)
    os.symlink(path, os.path.join(trace_dir, os.path.basename(path)))
    runs: dict[str, list[Any]] = {"dtrace cold, old": [], "dtrace cold": [], "HTA 0.5.0": []}
    for i in range(a.repeat):
        for label, package in (
            ("dtrace cold, old", {"package": "dtrace_base", "package_root": scratch}),
            ("dtrace cold", {}),
        ):
            work = os.path.join(scratch, f"run{i}")
            args = {"inputs": [path], "out": work + "/out", "cache": work + "/cache", "workers": 0, "one_core": True}
            cmd = [sys.executable, os.path.join(HERE, "cases.py"), "dtrace", json.dumps({**args, **package})]
            runs[label].append(measure(cmd, env=ONE_THREAD))
            loads.append(os.getloadavg()[0])
            shutil.rmtree(work, ignore_errors=True)
        runs["HTA 0.5.0"].append(
            measure([a.hta_python, os.path.join(HERE, "peer_hta.py"), json.dumps({"trace_dir": trace_dir})])
        )
        loads.append(os.getloadavg()[0])
    say()
    say("| whole process, one trace | wall s | CPU s | work s | work CPU s | peak RSS MB | RSS / JSON |")
    say("|---|---:|---:|---:|---:|---:|---:|")
    med = {}
    for label, rs in runs.items():
        row = [statistics.median(getattr(r, k) for r in rs) for k in ("wall_s", "cpu_s", "work_s", "work_cpu_s")]
        rss = statistics.median(r.maxrss for r in rs)
        med[label] = row
        cells = " | ".join(f"{v:.2f}" for v in row)
        say(f"| {label} | {cells} | {rss / MB:.0f} | {rss / json_bytes:.2f} |")
    d, h, o = med["dtrace cold"], med["HTA 0.5.0"], med["dtrace cold, old"]
    rss = {k: statistics.median(r.maxrss for r in rs) for k, rs in runs.items()}
    say()
    say(
        f"- dtrace cold, new vs old: {o[1] / d[1]:.2f}x less CPU (whole process), peak RSS "
        f"{rss['dtrace cold, old'] / MB:.0f} → {rss['dtrace cold'] / MB:.0f} MB"
    )
    say(
        f"- dtrace cold vs HTA: {h[0] / d[0]:.1f}x whole process wall, {h[1] / d[1]:.1f}x whole process CPU, "
        f"{h[2] / d[2]:.1f}x work wall, {h[3] / d[3]:.1f}x work CPU"
    )


if __name__ == "__main__":
    sys.exit(main())

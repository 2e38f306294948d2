"""What trusting the cache by content costs: the input fingerprint, and an "up to date" check.

Usage::

    python bench/bench_fingerprint.py                 # 512 MiB file + the 256-rank job
    python bench/bench_fingerprint.py --mb 2048 --skip-job

1. **Fingerprint speed.** A file of ``--mb`` MiB (incompressible bytes, in the OS page cache) is
   read and hashed the way dtrace fingerprints an input (:func:`dtrace.readers._io.file_fingerprint`:
   128-bit xxh3 over 4 MiB reads); beside it, reading alone, xxh3-128 of bytes in memory, and
   sha256 (what the cache recorded before) for scale.
2. **"Up to date".** The 256-rank job of ``bench/run.py`` (``dtrace.generate.synth``: 8 steps, ~150
   kernels per step, gzip; built under ``bench/out/inputs/job256`` if missing) is analysed once;
   then an unchanged re-run returns the previous results after fingerprinting every input and
   every results table (:func:`dtrace.api.up_to_date`). Timed: that check alone, the whole
   ``dtrace.analyze`` call, and the whole ``dtrace analyze`` process.

Each figure is the median of ``--repeat`` runs; results are printed as a markdown table and saved
to ``bench/out/fingerprint.json``.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import xxhash  # noqa: E402

from dtrace.readers._io import file_fingerprint  # noqa: E402

MiB = 1 << 20


def _median_s(func, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        func()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _read_all(path: str) -> None:
    with open(path, "rb") as f:
        while f.read(4 * MiB):
            pass


def fingerprint_speed(mb: int, repeat: int) -> list[dict]:
    """GB/s of reading, hashing and both, on a file of ``mb`` MiB in the page cache."""
    d = tempfile.mkdtemp(prefix="dtrace-fp-")
    path = os.path.join(d, "input.bin")
    try:
        block = os.urandom(4 * MiB)
        with open(path, "wb") as f:
            for _ in range(mb // 4):
                f.write(block)
        size = os.path.getsize(path)
        _read_all(path)  # into the page cache
        with open(path, "rb") as f:
            data = f.read()
        rows = [
            ("read the file (4 MiB reads, no hash)", lambda: _read_all(path)),
            ("file_fingerprint: read + xxh3-128", lambda: file_fingerprint(path)),
            ("xxh3-128 of bytes in memory", lambda: xxhash.xxh3_128_hexdigest(data)),
            ("sha256 of bytes in memory (for scale)", lambda: hashlib.sha256(data).hexdigest()),
        ]
        out = []
        for what, func in rows:
            s = _median_s(func, repeat)
            out.append({"what": what, "bytes": size, "seconds": round(s, 4), "GB_per_s": round(size / s / 1e9, 2)})
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def job_inputs(ranks: int) -> list[str]:
    d = os.path.join(HERE, "out", "inputs", f"job{ranks}")
    files = sorted(glob.glob(os.path.join(d, "rank-*.json.gz")))
    if len(files) != ranks:
        from dtrace.generate.synth import generate

        print(f"generating a {ranks}-rank job in {d} ...", flush=True)
        shutil.rmtree(d, ignore_errors=True)
        generate(d, ranks=ranks, steps=8, kernels_per_step=150, seed=11, gzip=True)
        files = sorted(glob.glob(os.path.join(d, "rank-*.json.gz")))
    return files


def up_to_date_cost(ranks: int, repeat: int) -> dict:
    import dtrace
    from dtrace import api
    from dtrace.analyses import ANALYSES
    from dtrace.ingest.inputs import DEFAULT_MAX_INPUT_SIZE, expand_inputs, parse_size, refuse_irregular
    from dtrace.options import Options
    from dtrace.results import intact, load

    files = job_inputs(ranks)
    size = sum(os.path.getsize(f) for f in files)
    out = os.path.join(HERE, "out", "fingerprint-work", f"job{ranks}")
    shutil.rmtree(out, ignore_errors=True)
    print(f"analysing the {ranks}-rank job once ({size / 1e6:.0f} MB of gzip) ...", flush=True)
    t = time.perf_counter()
    first = dtrace.analyze(files, out)
    cold = time.perf_counter() - t
    assert first.ok, first.errors

    def call() -> None:
        assert dtrace.analyze(files, out).manifest.get("up_to_date") is True

    listed, refused = refuse_irregular(expand_inputs(files, exclude=[out]))
    settings = {"ranks": {}, "format": None, "max_input_size": parse_size(DEFAULT_MAX_INPUT_SIZE)}

    def check() -> None:
        assert api.up_to_date(out, listed, refused, Options(), list(ANALYSES), settings) is not None

    manifest = load(out).manifest
    cli = [sys.executable, "-m", "dtrace", "analyze", *files, "-o", out, "--fmt", "json"]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def process() -> None:
        subprocess.run(cli, check=True, stdout=subprocess.DEVNULL, env=env)

    call()  # warm: page cache, imports
    return {
        "ranks": ranks,
        "input_bytes": size,
        "tables": len(manifest["tables"]),
        "cold_analysis_s": round(cold, 2),
        "fingerprint_inputs_s": round(_median_s(lambda: [file_fingerprint(f) for f in files], repeat), 4),
        "fingerprint_tables_s": round(_median_s(lambda: intact(out, manifest), repeat), 4),
        "up_to_date_check_s": round(_median_s(check, repeat), 4),
        "analyze_call_s": round(_median_s(call, repeat), 4),
        "cli_process_s": round(_median_s(process, repeat), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=512, help="size of the fingerprinted file (MiB)")
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-job", action="store_true", help="only the fingerprint speed")
    a = ap.parse_args()
    result: dict = {"machine": f"{os.cpu_count()} cores", "fingerprint": fingerprint_speed(a.mb, a.repeat)}
    print("\n| what | MiB | s | GB/s |\n|---|---:|---:|---:|")
    for r in result["fingerprint"]:
        print(f"| {r['what']} | {r['bytes'] / MiB:.0f} | {r['seconds']:.3f} | {r['GB_per_s']:.2f} |")
    if not a.skip_job:
        job = result["up_to_date"] = up_to_date_cost(a.ranks, a.repeat)
        print(
            f"\n{job['ranks']}-rank job, {job['input_bytes'] / 1e6:.0f} MB of inputs, {job['tables']} tables "
            f"(cold analysis {job['cold_analysis_s']:.1f} s):\n"
        )
        print("| step | s |\n|---|---:|")
        for k, what in (
            ("fingerprint_inputs_s", "fingerprint every input"),
            ("fingerprint_tables_s", "fingerprint every results table"),
            ("up_to_date_check_s", "api.up_to_date (both, and the manifest)"),
            ("analyze_call_s", "dtrace.analyze, up to date"),
            ("cli_process_s", "dtrace analyze, whole process, up to date"),
        ):
            print(f"| {what} | {job[k]:.3f} |")
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", "fingerprint.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

"""HTA 0.5.0 on one trace directory, run by ``bench/run.py`` with the HTA venv's interpreter.

``bench/.venv-hta/bin/python bench/peer_hta.py 'JSON-ARGS'`` (``{"trace_dir": ...}``) times
``TraceAnalysis(trace_dir=...)`` (parsing) plus ``get_temporal_breakdown()`` and prints one JSON
line. It imports nothing from dtrace: the venv holds only HTA and its dependencies
(``python3 -m venv bench/.venv-hta && bench/.venv-hta/bin/pip install
holistictraceanalysis==0.5.0 'pandas<3'``; with pandas 3 HTA 0.5.0 fails on some traces).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time


def main() -> None:
    a = json.loads(sys.argv[1])
    logging.disable(logging.WARNING)
    t = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    imp = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    analysis = TraceAnalysis(trace_dir=a["trace_dir"], include_last_profiler_step=True)
    parse = time.perf_counter() - t
    df = analysis.get_temporal_breakdown(visualize=False)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    out = {
        "seconds": seconds,
        "cpu_s": cpu,
        "parse_s": parse,
        "import_s": imp,
        "check": {
            "parts": int(len(df)),
            "computation_us": float(df["compute_time(us)"].sum()),
            "idle_us": float(df["idle_time(us)"].sum()),
            "total_us": float(df["kernel_time(us)"].sum()),
        },
    }
    sys.stdout.flush()
    print(json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()

"""Make ``cupti_counters.csv``: HTA 0.5.0's CUPTI counter analysis of the shared range-profiled trace.

Run with HTA installed (not a dtrace dependency), from the repository root::

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0 pandas==2.3.3
    /tmp/hta-venv/bin/python tests/data/hta_counters/record_counters.py

It runs ``TraceAnalysis.get_cupti_counter_data_with_operators()`` on rank 0 of
``kineto/cupti/benchmark_result_924719_1679055439_trace.json.gz`` and writes one row per counter
range, in HTA's order (by ``ts``): ``range`` (the row's position), ``name``, ``ts_us`` (the range's
``ts`` in the trace file), ``launch_correlation`` (the ``correlation`` of the ``cudaLaunchKernel``
HTA paired the range with: its ``index_runtime`` row), ``top_level_op``, ``bottom_level_op``,
``op_stack`` (the names joined by ``" > "``), the nine SASS instruction counters as HTA's columns
hold them, and ``flops``: ``Σ w·counter`` with HTA's own weights
(``hta.analyzers.cupti_counter_analysis.CUDA_SASS_INSTRUCTION_COUNTER_FLOPS``, which HTA defines
but does not apply). tests/test_counters.py compares dtrace's ``kernel_counters`` with it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TRACE = os.path.join(
    ROOT, "..", "shared", "traces", "kineto", "cupti", "benchmark_result_924719_1679055439_trace.json.gz"
)
OUT = os.path.join(HERE, "cupti_counters.csv")


def main() -> int:
    import pandas as pd
    from hta.analyzers.cupti_counter_analysis import CUDA_SASS_INSTRUCTION_COUNTER_FLOPS
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(TRACE, tmp)
        ta = TraceAnalysis(trace_dir=tmp)
        (df,) = ta.get_cupti_counter_data_with_operators(ranks=[0])
        full = ta.t.get_trace(0)
        counters = sorted(CUDA_SASS_INSTRUCTION_COUNTER_FLOPS)
        out = pd.DataFrame(
            {
                "range": range(len(df)),
                "name": df["name"].to_numpy(),
                "ts_us": (df["ts"] + ta.t.min_ts).astype("int64").to_numpy(),
                "launch_correlation": full.loc[df["index_runtime"].to_numpy(), "correlation"]
                .astype("int64")
                .to_numpy(),
                "top_level_op": df["top_level_op"].to_numpy(),
                "bottom_level_op": df["bottom_level_op"].to_numpy(),
                "op_stack": [" > ".join(s) for s in df["op_stack"]],
                **{c: df[c].astype("int64").to_numpy() for c in counters},
                "flops": sum(df[c].astype("float64") * w for c, w in CUDA_SASS_INSTRUCTION_COUNTER_FLOPS.items()),
            }
        )
    out.to_csv(OUT, index=False)
    print(f"{OUT}: {len(out)} counter ranges", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Make ``a100_5streams.csv``: HTA 0.5.0's frequent CUDA kernel sequences of a shared trace.

Run with HTA installed (not a dtrace dependency), from the repository root::

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install HolisticTraceAnalysis==0.5.0 pandas==2.3.3
    /tmp/hta-venv/bin/python tests/data/hta_sequences/record_sequences.py

For each operator name of :data:`OPERATORS` it runs
``TraceAnalysis.get_frequent_cuda_kernel_sequences(operator_name, min_pattern_len=3)`` on rank 0
of ``kineto/single/a100_5streams_sendrecv_rank0.json.gz`` and writes one row per pattern:
``operator_name``, ``op`` (the root op, the pattern's first name), ``sequence`` (the kernel names
joined by ``" | "``), ``length``, ``count``, ``gpu_us`` and ``cpu_us`` (HTA's "GPU kernel
duration (us)" and "CPU op duration (us)"). ``a100_5streams_roots.csv`` lists the op instances
HTA started from (its "root nodes": the matching ops of the shallowest call-stack depth among
the matches, with at least 3 kernels below them): ``operator_name``, ``op``, ``ts_us`` (the
instance's ``ts`` in the trace file), ``depth`` (HTA's) and ``iteration``.
tests/test_kernel_sequences.py compares dtrace's kernel sequences with both.

HTA reads this trace only: on the other shared traces 0.5.0 stops in its call-stack build
(``ValueError: Unexpected case`` on zero-duration events).
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
TRACE = os.path.join(ROOT, "..", "shared", "traces", "kineto", "single", "a100_5streams_sendrecv_rank0.json.gz")
OPERATORS = [
    "binary_cross_entropy",
    "BinaryCrossEntropyWithLogitsBackward0",
    "SelectBackward0",
    "permute_2D_sparse_data",
    "asynchronous_complete_cumsum",
    "CompiledFunction",
]
OUT = os.path.join(HERE, "a100_5streams.csv")
ROOTS = os.path.join(HERE, "a100_5streams_roots.csv")


def roots(trace: object, name: str) -> list[dict[str, object]]:
    """The instances HTA's sequence search starts from, read back from the columns its call graph
    leaves in the rank's frame: ops whose name contains ``name``, at the least depth among them,
    with 3 kernels or more below."""
    df = trace.get_trace(0)  # type: ignore[attr-defined]
    names = trace.symbol_table.get_sym_table()  # type: ignore[attr-defined]
    text = df["name"].map(lambda i: names[i])
    hit = df.loc[text.str.contains(name, regex=False) & df["stream"].eq(-1)]
    hit = hit.loc[hit["depth"].eq(hit["depth"].min()) & hit["num_kernels"].ge(3)]
    return [
        {
            "operator_name": name,
            "op": names[r.name],
            "ts_us": int(r.ts + trace.min_ts),  # type: ignore[attr-defined]
            "depth": int(r.depth),
            "iteration": int(r.iteration),
        }
        for r in hit.itertuples(index=False)
    ]


def main() -> int:
    import pandas as pd
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    rows, starts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(TRACE, tmp)
        ta = TraceAnalysis(trace_dir=tmp)
        for name in OPERATORS:
            df = ta.get_frequent_cuda_kernel_sequences(
                operator_name=name, output_dir=tmp, min_pattern_len=3, rank=0, visualize=False
            )
            starts += roots(ta.t, name)
            for r in df.itertuples(index=False):
                op, *kernels = r.pattern.split("|")
                rows.append(
                    {
                        "operator_name": name,
                        "op": op,
                        "sequence": " | ".join(kernels),
                        "length": len(kernels),
                        "count": int(r.count),
                        "gpu_us": float(r[2]),
                        "cpu_us": float(r[3]),
                    }
                )
    pd.DataFrame(rows).to_csv(OUT, index=False)
    pd.DataFrame(starts).to_csv(ROOTS, index=False)
    print(f"{OUT}: {len(rows)} patterns; {ROOTS}: {len(starts)} root instances", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

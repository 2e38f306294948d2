"""Record HTA 0.5.0's comm/comp overlap of the shared two-rank trace (tests/test_comm_overlap.py).

Run with HTA in its own environment (it pins its own pandas):

    python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis==0.5.0 pandas==2.3.3
    /tmp/hta/bin/python tests/data/hta_overlap/record_overlap.py ../shared/traces/kineto/hta-2rank

writes ``hta_2rank.csv`` beside this script: HTA's ``get_comm_comp_overlap`` (rank,
comp_comm_overlap_pctg) with the HTA version.
"""

import os
import shutil
import sys
import tempfile


def main(trace_dir: str) -> None:
    import hta  # HTA's own environment only (the suite collects this file)
    from hta.trace_analysis import TraceAnalysis

    work = tempfile.mkdtemp()
    try:
        for name in os.listdir(trace_dir):  # HTA wants the traces alone in a folder
            shutil.copy(os.path.join(trace_dir, name), work)
        ta = TraceAnalysis(trace_dir=work, include_last_profiler_step=True)  # every step, as dtrace
        df = ta.get_comm_comp_overlap(visualize=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    df["hta_version"] = getattr(hta, "__version__", "0.5.0")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hta_2rank.csv")
    df.to_csv(out, index=False)
    print(df.to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1])

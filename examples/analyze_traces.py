"""Analyse the bundled 2-rank traces and print where GPU time goes.

Run: python examples/analyze_traces.py [OUT]
"""

import os
import sys

import dtrace

HERE = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "results")

results = dtrace.analyze(os.path.join(HERE, "traces"), out, scheduler="sync")
bd = results.breakdown.set_index("rank")
for rank, row in bd.iterrows():
    total = row["total_ns"]
    print(
        f"rank {rank}: compute {row['computation_ns'] / total:6.1%}  "
        f"exposed comm {row['exposed_comm_ns'] / total:6.1%}  idle {row['idle_ns'] / total:6.1%}  "
        f"of {total / 1e6:.1f} ms"
    )

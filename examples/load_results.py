"""Load a results directory into pandas and look at the busiest streams.

Run: python examples/load_results.py OUT   (OUT from `dtrace analyze ... -o OUT`)
"""

import sys

import dtrace

results = dtrace.load(sys.argv[1] if len(sys.argv) > 1 else "results")
print(results)
streams = results.streams.sort_values("busy_ns", ascending=False)
print(streams[["rank", "stream", "events", "busy_ns", "comm_ns"]].head(10).to_string(index=False))

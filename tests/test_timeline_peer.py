"""The default timeline includes a peer of the straggler's process groups (issue 19, item 21).

The default tracks are the flagged stragglers, the fastest and the median rank; when those two
share no process group with the straggler, no collective of the exported ranks joins it, and no
flow arrow reaches the rank the timeline is about. A generated job (seed 0: the fastest and the
median rank are in the other tensor-parallel group and in other data-parallel pairs) is checked
against its ground truth's process groups.
"""

from __future__ import annotations

import json

import dtrace
from dtrace.generate.synth import generate


def test_a_flow_arrow_reaches_the_straggler(tmp_path):
    truth = generate(
        str(tmp_path / "job"), ranks=16, steps=2, seed=0, kernels_per_step=12, faults=["compute:rank=5:slow=0.5"]
    )
    dtrace.analyze(str(tmp_path / "job"), str(tmp_path / "out"), scheduler="sync")
    trace = dtrace.timeline(str(tmp_path / "out"))
    tracks = {t["rank"]: t["role"] for t in trace["otherData"]["tracks"]}
    assert tracks[5] == "straggler"
    peers = {r for g in truth["process_groups"] if 5 in g["ranks"] for r in g["ranks"]} - {5}
    shared = [r for r in tracks if r in peers]
    assert shared, (tracks, peers)
    pid = {
        e["pid"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and "rank 5 " in str(e.get("args", {}).get("name", "")) + " "
    }
    flows = [e for e in trace["traceEvents"] if e.get("ph") in ("s", "t", "f")]
    assert any(e["pid"] in pid for e in flows), json.dumps(tracks)

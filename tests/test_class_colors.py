"""One colour per kernel class everywhere: in every chart of a report and in a comparison
(issue 19, item 19).

Each chart numbered its classes in its own order (the classes chart by total time, the top
kernels chart by the order of its kernels, ``compare`` by its categories), so one class had
different colours in different charts. The trace built here orders its classes differently by
total time and by top kernel: ``elementwise`` has the single longest kernel, ``gemm`` the most
time.
"""

from __future__ import annotations

import json
import re

from testpaths import shared

import dtrace
from dtrace.cli.main import main


def trace(path, rank: int) -> str:
    ev, t, corr = [], 100.0, 0
    kernels = [("vectorized_elementwise_kernel_big", 90.0)] + [(f"sm80_xmma_gemm_{i}", 40.0) for i in range(4)]
    kernels += [("flash_fwd_kernel", 30.0), ("triton_poi_fused_0", 5.0)]
    for name, dur in kernels:
        corr += 1
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t - 3,
                "dur": 2.0,
                "args": {"correlation": corr},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": t,
                "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": corr},
            }
        )
        t += dur + 10
    path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": ev}))
    return str(path)


def legends(html: str) -> dict[str, dict[str, str]]:
    """Per chart: its legend's colour of each name."""
    out = {}
    for m in re.finditer(r'<figure class="chart" data-chart="([^"]+)">(.*?)</figure>', html, re.S):
        keys = re.findall(r'<span class="key"><i style="background:([^"]+)"></i>([^<]*)</span>', m.group(2))
        if keys:
            out[m.group(1)] = {name: color for color, name in keys}
    return out


def test_one_colour_per_class_in_report_and_compare(tmp_path, capsys):
    for r in (0, 1):
        trace(tmp_path / f"rank-{r}.json", r)
    dtrace.analyze(
        [str(tmp_path / "rank-0.json"), str(tmp_path / "rank-1.json")], str(tmp_path / "a"), scheduler="sync"
    )
    dtrace.analyze(
        [
            shared("kineto", "hta-2rank", "sampled_rank-0.json.gz"),
            shared("kineto", "hta-2rank", "sampled_rank-1.json.gz"),
        ],
        str(tmp_path / "b"),
        scheduler="sync",
    )
    seen: dict[str, set[str]] = {}
    for out in ("a", "b"):
        assert main(["report", str(tmp_path / out), "-o", str(tmp_path / f"{out}.html")]) == 0
        charts = legends((tmp_path / f"{out}.html").read_text())
        assert {"classes", "top-kernels"} <= set(charts), charts
        for chart in charts.values():
            for name, color in chart.items():
                seen.setdefault(name, set()).add(color)
            colours = [c for n, c in chart.items() if not n.startswith("(")]
            assert len(set(colours)) == len(colours), chart  # no two classes share a colour in a chart
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "c.html")]) == 0
    for name, color in legends((tmp_path / "c.html").read_text())["compare-categories"].items():
        seen.setdefault(name, set()).add(color)
    assert {"gemm", "elementwise", "attention"} <= set(seen)
    assert all(len(colors) == 1 for colors in seen.values()), seen
    capsys.readouterr()

"""Shortened names keep the part that differs, and ``--wide`` shows them whole (issue 19, item 18).

Names were cut until rows could not be told apart: ``dtrace kernels --top 8`` showed
``split_embedding_bac…`` three times, ``ops`` cut op names to 15 characters in a narrow terminal,
``diff`` listed only_a/only_b rows under one cut name, and the report's "Top kernels" showed
``cutlass::Kernel<…>(…)`` four times. Traces with such names are built here; every check reads
the rows as printed.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

import dtrace
from dtrace.cli.main import main
from dtrace.render.text import render

EMBEDDING = [
    "void split_embedding_backward_codegen_adagrad_unweighted_kernel_cta_per_row_1<float, float, int>(long)",
    "void split_embedding_backward_codegen_adagrad_unweighted_kernel_warp_per_row_1<float, float, int>(long)",
    "void split_embedding_backward_codegen_adagrad_weighted_kernel_cta_per_row_1<float, float, int>(long)",
]
CUTLASS = [
    f"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_{tile}_32x3_{lay}_align4>"
    f"(cutlass_80_tensorop_s1688gemm_{tile}_32x3_{lay}_align4::Params)"
    for tile, lay in (("128x128", "nn"), ("256x128", "nn"), ("64x64", "nn"), ("128x128", "tn"))
]
OPS = [f"aten::_fused_rms_norm_backward_{x}" for x in ("first", "second", "third")]


def trace(path, kernels, ops=(), rank=0, scale=1.0):
    """A Kineto trace: each kernel launched once per op (or alone), durations growing with the index."""
    ev, t, corr = [], 100.0, 0
    for j, k in enumerate(kernels):
        op = ops[j % len(ops)] if ops else None
        corr += 1
        dur = (10.0 + j) * scale
        if op:
            ev.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": t - 5, "dur": 4.0})
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t - 4,
                "dur": 2.0,
                "args": {"correlation": corr},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": k,
                "pid": 0,
                "tid": 7,
                "ts": t,
                "dur": dur,
                "args": {"device": 0, "stream": 7, "correlation": corr},
            }
        )
        t += 40.0
    path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": ev}))
    return str(path)


def name_cells(text: str, first_col: str = "#") -> list[str]:
    """The name column of a printed terminal table whose rows start with a row number."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s{2,}(.+?)\s{2,}", line)
        if m:
            rows.append(m.group(2))
    return rows


def test_kernels_keep_the_part_that_differs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    path = trace(tmp_path / "rank-0.json", EMBEDDING + CUTLASS)
    assert main(["kernels", path, "--top", "8"]) == 0
    names = name_cells(capsys.readouterr().out)
    assert len(names) == 7 and len(set(names)) == 7, names
    assert sum("warp_per" in n for n in names) == 1 and sum("256x128" in n for n in names) == 1
    assert main(["kernels", path, "--top", "8", "--wide"]) == 0
    out = capsys.readouterr().out
    assert all(k.removeprefix("void ") in out or k in out for k in EMBEDDING)


def test_ops_in_a_narrow_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "70")
    path = trace(tmp_path / "rank-0.json", EMBEDDING[:3], ops=OPS)
    assert main(["ops", path]) == 0
    text = capsys.readouterr().out
    rows = [ln.split()[0] for ln in text.splitlines() if ln.strip().startswith("aten")]
    assert len(rows) % 3 == 0 and len(set(rows)) == 3, text  # in every block of columns
    assert all(any(r.endswith(op.rsplit("_", 1)[1]) for r in rows) for op in OPS)
    assert main(["ops", path, "--wide"]) == 0
    text = capsys.readouterr().out
    assert all(op in text for op in OPS)


def test_diff_rows_only_in_one_run(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = trace(tmp_path / "a" / "rank-0.json", CUTLASS[:2])
    b = trace(tmp_path / "b" / "rank-0.json", CUTLASS[2:])
    dtrace.analyze(a, str(tmp_path / "ra"), scheduler="sync")
    dtrace.analyze(b, str(tmp_path / "rb"), scheduler="sync")
    assert main(["diff", str(tmp_path / "ra"), str(tmp_path / "rb"), "--level", "kernel"]) == 0
    text = capsys.readouterr().out
    keys = [ln.split("  ")[0].strip() for ln in text.splitlines() if "cutlass" in ln]
    assert len(keys) == 4 and len(set(keys)) == 4, text


def test_report_top_kernels(tmp_path, capsys):
    path = trace(tmp_path / "rank-0.json", CUTLASS)
    dtrace.analyze(path, str(tmp_path / "r"), scheduler="sync")
    assert main(["report", str(tmp_path / "r"), "-o", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    chart = html[html.index('data-chart="top-kernels"') :]
    chart = chart[: chart.index("</figure>")]
    labels = re.findall(r"</title>([^<]*cutlass[^<]*)</text>", chart)
    assert len(labels) == 4 and len(set(labels)) == 4, labels
    cells = re.findall(r'<td class="nm"[^>]*>([^<]*cutlass[^<]*)</td>', html)
    assert len(cells) >= 4 and len(set(cells[:4])) == 4, cells
    capsys.readouterr()


@pytest.mark.parametrize("width", [16, 24, 40, 60])
def test_distinct_at_any_width(width):
    from dtrace.render.text import distinct_names

    names = EMBEDDING + CUTLASS + OPS + [EMBEDDING[0]]
    short = distinct_names(names, width)
    assert all(len(s) <= width + 4 for s in short)  # room for a [k] suffix only where nothing else helps
    assert len(set(short[:-1])) == len(names) - 1 and short[-1] == short[0]  # equal names stay equal
    text = render(pd.DataFrame({"name": names, "total_ns": range(len(names))}), "table", width=40)
    assert len(set(name_cells_plain(text))) == len(names) - 1


def name_cells_plain(text: str) -> list[str]:
    return [ln.rsplit(None, 1)[0].strip() for ln in text.splitlines()[2:] if ln.strip() and ln.strip()[-1].isdigit()]

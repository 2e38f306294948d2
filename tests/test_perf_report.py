"""``dtrace perf-report``: TraceLens's perf-report sheets from a results folder (docs/perf_report.md).

Compared with TraceLens's own sheets of the shared traces (../shared/traces/reference): the
``gpu_timeline`` of h100_owlv2 and mi210_gpu_only to 1 µs and 0.01 %, the ``unified_perf_summary``
of h100_owlv2 per (op, Input Dims, Input type) both tools model (counts equal, GFLOPS and data
moved within 0.1 % but for the two rows where dtrace differs on purpose, kernel time to the ns
rounding of each event, as tests/test_opperf_tracelens.py does), and the ``coll_analysis`` of
mi300_resnet_rccl_rank0 to the ns. Then the workbook read back with openpyxl, the CSV folder, every
rank of the two-rank HTA job (send/recv collectives), ``--rank``, ``--top``, and the one-line
message when openpyxl is missing.
"""

from __future__ import annotations

import ast
import csv
import io
import math
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from testpaths import shared

import dtrace
from dtrace.cli.main import main
from dtrace.render import perf_report as pr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXED = ["gpu_timeline", "ops_summary_by_category", "ops_summary", "ops_unique_args", "unified_perf_summary"]


def _analyze(tmp_path_factory, *path: str) -> str:
    out = str(tmp_path_factory.mktemp("perf_report") / "out")
    res = dtrace.analyze(shared(*path), out, scheduler="sync", compat="tracelens")
    assert res.ok, res.errors
    return out


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    return _analyze(tmp_path_factory, "kineto", "single", "h100_owlv2.json.gz")


@pytest.fixture(scope="module")
def hta(tmp_path_factory):
    return _analyze(tmp_path_factory, "kineto", "hta-2rank")


def _reference(name: str) -> pd.DataFrame:
    return pd.read_csv(shared("reference", name), keep_default_na=False)


# -- against TraceLens ----------------------------------------------------------------------------
@pytest.mark.parametrize("trace", ["h100_owlv2", "mi210_gpu_only"])
def test_gpu_timeline_is_tracelens(trace, tmp_path_factory, h100):
    out = h100 if trace == "h100_owlv2" else _analyze(tmp_path_factory, "kineto", "single", f"{trace}.json.gz")
    ref = _reference(f"{trace}.tracelens_gpu_timeline.csv")
    sheet = pr.perf_report_sheets(dtrace.load(out), rank=0)["gpu_timeline"]
    assert sheet.columns.tolist() == ref.columns.tolist() == ["type", "time ms", "percent"]
    assert sheet["type"].tolist() == ref["type"].tolist()
    assert np.abs(sheet["time ms"].to_numpy() - ref["time ms"].astype(float).to_numpy()).max() <= 1e-3  # 1 µs
    assert np.abs(sheet["percent"].to_numpy() - ref["percent"].astype(float).to_numpy()).max() <= 0.01


KEY = ["name", "Input Dims", "Input type"]
# dtrace differs here on purpose (docs/semantics.md, "Op performance model"; pinned with the figures
# worked out by hand in tests/test_opperf_tracelens.py): linalg_norm writes its reduced shape, an
# in-place add_ writes its self type
DIFFERS = {
    ("aten::linalg_norm", "((1, 5184, 768), (), (), (), ())", "('c10::BFloat16', '', 'ScalarList', 'Scalar', '')"),
    ("aten::add_", "((1, 5184, 4), (5184, 4), ())", "('c10::BFloat16', 'float', 'Scalar')"),
}


def _by_key(df: pd.DataFrame, count: str, tflops: str) -> pd.DataFrame:
    return df.groupby(KEY, sort=False).agg(
        count=(count, "sum"),
        us=("Kernel Time (µs)_sum", "sum"),
        gflops=("GFLOPS", "first"),
        mb=("Data Moved (MB)", "first"),
        tflops=(tflops, "first"),
        rows=(count, "size"),
    )


def test_unified_perf_summary_is_tracelens(h100):
    ref = _reference("h100_owlv2.tracelens_unified_perf_summary.csv")
    ref = ref.loc[ref["GFLOPS"] != ""].copy()
    for col in ("GFLOPS", "Data Moved (MB)", "TFLOPS/s_mean", "Kernel Time (µs)_sum"):
        ref[col] = pd.to_numeric(ref[col], errors="coerce")  # "": TraceLens has no figure (a bool tensor's bytes)
    sheet = pr.perf_report_sheets(dtrace.load(h100), rank=0)["unified_perf_summary"]
    assert sheet.columns[:5].tolist() == ["name", "op category", "Input Dims", "Input type", "Input Strides"]
    ours = sheet.loc[sheet["GFLOPS"].notna()]
    m = _by_key(ref, "operation_count", "TFLOPS/s_mean").merge(
        _by_key(ours, "operation_count", pr.TFLOPS), how="left", left_index=True, right_index=True, suffixes=("", "_d")
    )
    both = m.loc[m["count_d"].notna()]
    assert len(both) >= 50 and len(both) >= 0.9 * len(m)  # the keys are written the way TraceLens writes them
    assert (both["count"] == both["count_d"]).all()
    # TraceLens has no size for bool: a bf16 tensor copied into a bool mask reads 2 bytes, writes 1
    cast = both.loc[both["mb"].isna()]
    assert len(cast) == 1 and cast.index[0][0] == "aten::copy_" and cast["mb_d"].iloc[0] == 25 * (1 + 2) / 2**20
    mb_close = np.isclose(both["mb_d"], both["mb"], rtol=1e-3) | both["mb"].isna()
    close = np.isclose(both["gflops_d"], both["gflops"], rtol=1e-3) & mb_close
    assert set(both.index[~close]) == DIFFERS
    # the same GPU events: kernel time to the ns rounding of each event
    assert ((both["us_d"] - both["us"]).abs() <= 0.002 * both["count"] + 1e-6 * both["us"]).all()
    # dtrace's TFLOP/s is total FLOPs over total time, TraceLens's the mean of per-instance rates:
    # never above it (a mean of rates is at least the harmonic mean), equal for uniform instances
    one = both.loc[(both["rows"] == 1) & (both["rows_d"] == 1)]
    assert (one["tflops_d"] <= one["tflops"] * (1 + 1e-3) + 1e-9).all()
    assert np.isclose(one["tflops_d"], one["tflops"], rtol=0.01).mean() > 0.9


# TraceLens's bundled MI300X figures (peer_numbers.md, "Added later"), given as a dtrace GPU spec
TRACELENS_MI300X = {
    "name": "MI300X",
    "mem_bw_gbps": 5300,
    "max_achievable_tflops": {"matrix_bf16": 708, "matrix_fp16": 654, "matrix_fp8": 1273, "matrix_fp32": 163,
                              "vector_bf16": 163, "vector_fp32": 81},
}  # fmt: skip


@pytest.fixture(scope="module")
def mi300(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("perf_report") / "out")
    path = shared("kineto", "single", "mi300_resnet_rccl_rank0.json.gz")
    res = dtrace.analyze(path, out, scheduler="sync", compat="tracelens", gpu_spec=TRACELENS_MI300X)
    assert res.ok, res.errors
    return out


def test_roofline_columns_are_tracelens(mi300):
    """With TraceLens's MI300X figures, each row's roofline time of one instance and its bound are
    TraceLens's wherever the FLOPs and bytes agree."""
    ref = _reference("mi300_resnet_rccl_rank0.tracelens_unified_perf_summary_mi300x.csv")
    ref = ref.loc[ref["GFLOPS"] != ""].copy()
    sheet = pr.perf_report_sheets(dtrace.load(mi300), rank=0)["unified_perf_summary"]
    cols = ["GFLOPS", "Data Moved (MB)", "Roofline Time (µs)_first", "Roofline Bound"]
    m = (
        ref.groupby(KEY)[cols]
        .first()
        .merge(sheet.groupby(KEY)[cols].first(), left_index=True, right_index=True, suffixes=("", "_d"))
    )
    for col in cols[:3]:
        m[col] = pd.to_numeric(m[col], errors="coerce")
    agree = np.isclose(m["GFLOPS_d"], m["GFLOPS"], rtol=1e-3)
    agree &= np.isclose(m["Data Moved (MB)_d"], m["Data Moved (MB)"], rtol=1e-3)
    same = m.loc[agree & m["Roofline Time (µs)_first"].notna()]  # TraceLens: no roofline without FLOPs
    assert len(same) >= 60
    # dtrace keeps a row's roofline in whole ns (count × per instance): 0.5 ns of rounding
    assert np.allclose(same["Roofline Time (µs)_first_d"], same["Roofline Time (µs)_first"], rtol=1e-3, atol=5e-4)
    assert (same["Roofline Bound_d"] == same["Roofline Bound"]).all()


def test_coll_analysis_is_tracelens(mi300):
    ref = _reference("mi300_resnet_rccl_rank0.tracelens_coll_analysis.csv")
    sheet = pr.perf_report_sheets(dtrace.load(mi300), rank=0)["coll_analysis"]
    assert sheet.columns.tolist() == [
        "rank", "Process Group Name", "Process Group Ranks", "Collective name", "Group size", "stream",
        pr.MSG_MB, "dur_sum", "dur_mean", "dur_std", "dur_min", "dur_max", "operation_count",
    ]  # fmt: skip
    names = {"allreduce": "all_reduce", "broadcast": "broadcast"}
    for _, r in ref.iterrows():
        row = sheet.loc[
            (sheet["Collective name"] == names[r["Collective name"]])
            & np.isclose(sheet[pr.MSG_MB], float(r["In msg size (MB)_first"]))
        ]
        assert len(row) == 1, r.to_dict()
        row = row.iloc[0]
        assert row["Process Group Ranks"] == r["Process Group Ranks"] and row["Process Group Name"] == "0"
        assert (row["rank"], row["Group size"], row["stream"]) == (0, 8, 4)
        assert row["operation_count"] == int(r["operation_count"])
        for col in ("dur_sum", "dur_mean", "dur_std", "dur_min", "dur_max"):
            assert row[col] == pytest.approx(float(r[col]), abs=1e-3), col
    # RCCL kernels without collective args (TraceLens lists none of them): one row, no process group
    (other,) = sheet.loc[sheet["Process Group Name"] == "", "Collective name"].tolist()
    assert other == "other"


# -- the workbook and the CSV folder ---------------------------------------------------------------
def test_workbook_read_back(h100, tmp_path, capsys):
    openpyxl = pytest.importorskip("openpyxl")
    path = str(tmp_path / "report.xlsx")
    assert main(["perf-report", h100, "-o", path]) == 0
    assert f"perf report: {path}" in capsys.readouterr().out
    sheets = pr.perf_report_sheets(dtrace.load(h100))
    wb = openpyxl.load_workbook(path, read_only=False)
    assert wb.sheetnames == list(sheets) == [*FIXED, "GEMM", "CONV_fwd", "NORM_fwd", "elementwise", "reduce"]
    for name, df in sheets.items():
        ws = wb[name]
        assert [c.value for c in ws[1]] == df.columns.tolist() and ws.freeze_panes == "A2"
        assert ws.max_row == len(df) + 1 and len(name) <= 31
        assert all(8 <= ws.column_dimensions[c].width <= 62 for c in ws.column_dimensions)
    back = pd.read_excel(path, sheet_name=None, engine="openpyxl")
    assert back["gpu_timeline"].columns[:3].tolist() == ["rank", "device", "type"]
    pd.testing.assert_frame_equal(back["gpu_timeline"], sheets["gpu_timeline"], check_dtype=False)
    uni, want = back["unified_perf_summary"], sheets["unified_perf_summary"]
    assert uni["name"].tolist() == want["name"].tolist()
    assert np.allclose(uni["Kernel Time (µs)_sum"], want["Kernel Time (µs)_sum"])
    assert uni["GFLOPS"].isna().tolist() == want["GFLOPS"].isna().tolist()  # a missing figure is an empty cell


def test_workbook_cells_are_text_and_fit(tmp_path):
    """A name that starts with ``=`` is stored as text, never a formula; control characters are shown
    as escapes; a cell longer than Excel holds is cut; a sheet longer than Excel holds is refused."""
    openpyxl = pytest.importorskip("openpyxl")
    df = pd.DataFrame({"name": ['=HYPERLINK("http://x")', "k\x1b[2J", "x" * 40_000], "v": [1.5, np.inf, np.nan]})
    wb = openpyxl.load_workbook(io.BytesIO(pr.workbook_bytes({"s": df})))
    cells = [(c.value, c.data_type) for c in wb["s"]["A"][1:]]
    assert cells[0] == ('=HYPERLINK("http://x")', "s") and cells[1][0] == "k\\x1b[2J"
    assert len(cells[2][0]) == pr.EXCEL_MAX_TEXT
    assert [c.value for c in wb["s"]["B"][1:]] == [1.5, None, None]
    with pytest.raises(dtrace.errors.UsageError, match="more than an Excel sheet holds.*--top N.*--csv-dir"):
        pr.check_sheets({"big": pd.DataFrame({"a": np.zeros(pr.EXCEL_MAX_ROWS)})})
    with pytest.raises(dtrace.errors.UsageError, match="1 to 31 characters"):
        pr.check_sheets({"x" * 32: df})


def test_csv_folder(h100, tmp_path, capsys):
    folder = tmp_path / "csvs"
    assert main(["perf-report", h100, "--csv-dir", str(folder), "--rank", "0"]) == 0
    assert "perf report CSV files:" in capsys.readouterr().out
    sheets = pr.perf_report_sheets(dtrace.load(h100), rank=0)
    assert sorted(os.listdir(folder)) == sorted(f"{n}.csv" for n in sheets)
    assert not os.path.exists(f"{h100}_perf_report_rank0.xlsx")  # --csv-dir alone writes no workbook
    with open(folder / "gpu_timeline.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["type", "time ms", "percent"] and [r[0] for r in rows[1:]] == [t for t, _ in pr.TIMELINE_ROWS]
    back = pd.read_csv(folder / "unified_perf_summary.csv", keep_default_na=False)
    assert back.columns.tolist() == sheets["unified_perf_summary"].columns.tolist()
    # the tuples read back as TraceLens writes them
    dims = back.loc[back["Input Dims"] != "", "Input Dims"]
    assert len(dims) > 50 and all(isinstance(ast.literal_eval(d), tuple) for d in dims)


# -- every rank, one rank ---------------------------------------------------------------------------
def _tracelens_rows(rank: int) -> dict[str, float]:
    """TraceLens's breakdown of sampled_rank-N (µs), from reference/peer_numbers.md."""
    with open(shared("reference", "peer_numbers.md"), encoding="utf-8") as f:
        m = re.search(rf"^\| kineto/hta-2rank/sampled_rank-{rank} \|(.*)\|\s*$", f.read(), re.MULTILINE)
    assert m
    # its columns: computation, exposed_comm, exposed_memcpy, busy, idle, total, comm, memcpy
    return dict(zip([t for t, _ in pr.TIMELINE_ROWS], [float(v) for v in m.group(1).split("|")]))


def test_every_rank_of_a_two_rank_job(hta, tmp_path, capsys):
    res = dtrace.load(hta)
    sheets = pr.perf_report_sheets(res)
    for name, df in sheets.items():
        assert df.columns[:2].tolist() == ["rank", "device"], name
        assert sorted(set(df["rank"])) == [0, 1], name
    tl = sheets["gpu_timeline"]
    assert len(tl) == 16
    for rank in (0, 1):
        want = _tracelens_rows(rank)
        mine = tl.loc[tl["rank"] == rank].set_index("type")["time ms"] * 1e3
        for kind, us in want.items():
            assert abs(mine[kind] - us) <= 1.0, (rank, kind, mine[kind], us)
    # the collectives are send/recv without collective args: per rank and stream, no process group
    coll = sheets["coll_analysis"]
    assert set(coll["Collective name"]) == {"send_recv"} and set(coll["Process Group Name"]) == {""}
    members = res.collectives
    assert coll["operation_count"].sum() == len(members)
    got = coll.groupby("rank")["dur_sum"].sum()
    want = members.groupby("rank")["duration_ns"].sum() / 1e3
    assert np.allclose(got.sort_index().to_numpy(), want.sort_index().to_numpy())
    # per GPU, the op time is the same in every op sheet, and the shares add up to 100 %
    by_cat = sheets["ops_summary_by_category"].groupby("rank")["total_direct_kernel_time_ms"].sum()
    by_op = sheets["ops_summary"].groupby("rank")["total_direct_kernel_time_ms"].sum()
    by_args = sheets["unified_perf_summary"].groupby("rank")["Kernel Time (µs)_sum"].sum() / 1e3
    assert np.allclose(by_cat, by_op) and np.allclose(by_cat, by_args)
    last = sheets["ops_unique_args"].groupby("rank")["Cumulative Percentage (%)"].last()
    assert np.allclose(last, 100)


def test_rank_selection(hta, tmp_path, capsys):
    res = dtrace.load(hta)
    every = pr.perf_report_sheets(res)
    one = pr.perf_report_sheets(res, rank=1)
    assert pr.perf_report_sheets(res, rank=1, device=1)["gpu_timeline"].equals(one["gpu_timeline"])
    for name, df in one.items():
        mine = every[name].loc[every[name]["rank"] == 1].drop(columns="device").reset_index(drop=True)
        if name != "coll_analysis":  # TraceLens's coll_analysis has a rank column; the others none
            mine = mine.drop(columns="rank")
        pd.testing.assert_frame_equal(df, mine, check_dtype=False)
    assert "rank" not in one["gpu_timeline"].columns and one["coll_analysis"]["rank"].eq(1).all()
    for argv, message in (
        (["--rank", "5"], f"no rank 5 in {hta}; ranks: 0-1"),
        (["--rank", "1:3"], f"rank 1 has no device 3 in {hta}; its devices: 1"),
        (["--rank", "x"], "argument --rank: 'x': give a rank R or R:D"),
        (["--rank", "1:"], "argument --rank: '1:': give a rank R or R:D"),
        (
            ["--rank", "9" * 400],
            "give a rank R or R:D (rank and device): 99999999999999999999…(400 characters) is out of range",
        ),
        (["-o", "report.csv"], "-o report.csv: the workbook's name ends in .xlsx (CSV files: --csv-dir DIR)"),
    ):
        assert main(["perf-report", hta, "--csv-dir", str(tmp_path / "c"), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("dtrace perf-report: error: ") and message in err and err.count("\n") == 1, err
    assert pr.perf_report_sheets(res, rank=0, top=3)["unified_perf_summary"].shape[0] == 3
    top = pr.perf_report_sheets(res, top=2)
    assert top["ops_unique_args"].groupby("rank").size().tolist() == [2, 2]
    assert top["ops_unique_args"]["Percentage (%)"].sum() < 200  # still shares of each GPU's whole op time
    with pytest.raises(dtrace.errors.UsageError, match="without its rank"):
        pr.perf_report_sheets(res, device=1)


def test_default_workbook_beside_out(hta, capsys):
    pytest.importorskip("openpyxl")
    assert main(["perf-report", hta]) == 0
    assert main(["perf-report", hta, "--rank", "1:1", "--top", "5"]) == 0
    assert os.path.isfile(f"{hta}_perf_report.xlsx") and os.path.isfile(f"{hta}_perf_report_rank1_device1.xlsx")


def test_missing_openpyxl_says_how_to_install(hta, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "openpyxl", None)  # `import openpyxl` raises ImportError
    target = tmp_path / "r.xlsx"
    assert main(["perf-report", hta, "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'dtrace[xlsx]'" in err and "--csv-dir" in err
    assert not target.exists()
    assert main(["perf-report", hta, "--csv-dir", str(tmp_path / "c")]) == 0  # CSV files need no openpyxl
    assert len(os.listdir(tmp_path / "c")) == len(pr.perf_report_sheets(dtrace.load(hta)))


# -- small parts ------------------------------------------------------------------------------------
def test_formats_and_categories():
    assert list(pr.SHEETS) == FIXED
    texts = pd.Series(["[[16,5185,64],[16,64,5185]]", '["c10::BFloat16","","Scalar"]', "[[1024]]", "", "[[[1,2]],[]]"])
    assert pr.tuple_text(texts).tolist() == [
        "((16, 5185, 64), (16, 64, 5185))",
        "('c10::BFloat16', '', 'Scalar')",
        "((1024,),)",
        "",
        "(((1, 2),), ())",
    ]
    cats = {
        ("aten::mm", "gemm", False): "GEMM",
        ("aten::convolution", "conv", False): "CONV_fwd",
        ("aten::_scaled_dot_product_flash_attention_backward", "attention", True): "SDPA_bwd",
        ("aten::native_batch_norm_backward", "norm", True): "NORM_bwd",
        ("aten::copy_", "copy", False): "elementwise",
        ("aten::sum", "reduce", False): "reduce",
        ("aten::_foreach_add_", "unmodelled", False): "multi_tensor_apply",
        ("vllm::moe_forward", "unmodelled", False): "other",
    }
    assert {k: pr.op_category(*k) for k in cats} == cats
    assert set(pr.CATEGORY_SHEETS) <= {c for pair in pr.FAMILY_CATEGORY.values() for c in pair}


def test_empty_and_missing_tables():
    with pytest.raises(dtrace.errors.ResultsError, match="no breakdown, op_perf or collectives"):
        pr.perf_report_sheets({})
    with pytest.raises(dtrace.errors.ResultsError, match="op_perf has no"):
        pr.perf_report_sheets({"op_perf": pd.DataFrame({"rank": [0], "device": [0], "op": ["x"]})})
    empty_ops = pd.DataFrame({c: [] for c in ["rank", "device", *pr.OP_PERF_COLUMNS]})
    sheets = pr.perf_report_sheets({"op_perf": empty_ops})
    assert list(sheets) == FIXED[1:] and all(len(df) == 0 for df in sheets.values())
    idle = pd.DataFrame({"rank": [0], "device": [0], **{c: [0] for _, c in pr.TIMELINE_ROWS}})
    assert math.isnan(pr.gpu_timeline(idle)["percent"][0])  # no GPU time: no share of it


def test_help_imports_no_data_library():
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dtrace", "perf-report", "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "pip install 'dtrace[xlsx]'" in " ".join(run.stdout.split())
    imported = {m.group(1) for m in re.finditer(r"^import time:.*\|\s*(\S+)\s*$", run.stderr, re.MULTILINE)}
    assert "dtrace.cli.perf_report" in imported
    assert not {m for m in imported if m.split(".")[0] in ("pandas", "numpy", "pyarrow", "dask", "openpyxl")}

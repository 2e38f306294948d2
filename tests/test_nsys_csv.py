"""``nsys stats`` CSVs: old and new headers, preambles, ``None``, missing columns; the summary path
of ``dtrace analyze``; ``cuda_gpu_trace`` as events; the GPU Performance Analyser report
(``dtrace nsys-stats``) checked against the numbers its README prints."""

import json
import os
import sqlite3

import numpy as np
import pandas as pd
import pytest
from testpaths import shared

import dtrace
from dtrace.cli.main import main
from dtrace.errors import InputError
from dtrace.readers import detect
from dtrace.readers._stats_csv import kernel_summary, memop_summary, nvtx_projection, read_report
from dtrace.readers.nsys_csv import read_nsys_csv

PREAMBLE = (
    "Generating SQLite file run.sqlite from run.nsys-rep\n"
    "Processing [run.sqlite] with [/opt/nvidia/nsight-systems/2024.5/reports/cuda_gpu_kern_sum.py]... \n"
    "\n ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n"
)
KERN_NEW = (
    "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
    '60.0,6000,3,2000.0,2000.0,1000,3000,1000.0,"void gemm_kernel<float, 128>(int, float*)"\n'
    "30.0,3000,2,1500.0,1500.0,1000,2000,707.1,ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)\n"
    "10.0,1000,1,1000.0,1000.0,1000,1000,0.0,loop_fusion_1\n"
)
KERN_OLD = (
    "Time(%),Total Time (ns),Instances,Average,Minimum,Maximum,StdDev,Name\n"
    '60.0,6000,3,2000.0,1000,3000,1000.0,"void gemm_kernel<float, 128>(int, float*)"\n'
    "30.0,3000,2,1500.0,1000,2000,707.1,ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)\n"
    "10.0,1000,1,1000.0,1000,1000,0.0,loop_fusion_1\n"
)
MEM_NEW = (
    "Time (%),Total Time (ns),Count,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Operation\n"
    "80.0,800,2,400.0,400.0,300,500,141.4,[CUDA memcpy Device-to-Device]\n"
    "20.0,200,4,50.0,50.0,50,50,0.0,[CUDA memset]\n"
)
MEM_OLD = (
    "Time(%),Total Time (ns),Operations,Average,Minimum,Maximum,StdDev,Operation\n"
    "80.0,800,2,400.0,300,500,141.4,[CUDA memcpy DtoD]\n"
    "20.0,200,4,50.0,50,50,0.0,[CUDA memset]\n"
)
NVTX = (
    "Name,Projected Start (ns),Projected Duration (ns),Orig Start (ns),Orig Duration (ns),Style,PID,TID,"
    "NumGPUOps,Lvl,NumChild,RangeId,ParentId,RangeStack\n"
    "iter,100,9000,50,9500,PushPop,11,11,4,0,1,1,None,:1\n"
    "fwd,120,3000,60,3100,PushPop,11,11,2,1,0,2,1,:1:2\n"
    "iter,20000,8000,19950,8500,PushPop,11,11,3,0,0,3,None,:3\n"
    "idle,None,None,30000,100,PushPop,11,11,0,0,0,4,None,:4\n"
)
TRACE_NEW = (
    "Start (ns),Duration (ns),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
    "Bytes (MB),Throughput (MB/s),SrcMemKd,DstMemKd,Device,Ctx,GreenCtx,Strm,Name\n"
    "1000,500,11,1,1,1,128,1,1,32,0.0,0.0,,,,,0,1,,7,gemm_kernel\n"
    "1200,800,12,1,1,1,128,1,1,32,0.0,0.0,,,,,0,1,,9,ncclDevKernel_AllReduce_Sum_f32_RING_LL\n"
    "2500,100,13,,,,,,,,,,4.194,41940.0,Device,Device,0,1,,8,[CUDA memcpy Device-to-Device]\n"
    "3000,50,14,,,,,,,,,,0.001,20.0,Device,,0,1,,8,[CUDA memset]\n"
    "1000,700,21,1,1,1,128,1,1,32,0.0,0.0,,,,,1,2,,7,gemm_kernel\n"
)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_old_and_new_headers_parse_to_the_same_numbers(tmp_path):
    new = kernel_summary(write(tmp_path, "a_cuda_gpu_kern_sum.csv", PREAMBLE + KERN_NEW))
    old = kernel_summary(write(tmp_path, "b_gpukernsum.csv", KERN_OLD))
    cols = ["name", "count", "total_ns", "mean_ns", "min_ns", "max_ns", "std_ns"]
    pd.testing.assert_frame_equal(new[cols], old[cols])
    assert new["name"].iloc[0] == "void gemm_kernel<float, 128>(int, float*)"  # quoted comma kept
    assert new["total_ns"].tolist() == [6000, 3000, 1000] and new["count"].tolist() == [3, 2, 1]
    assert new["median_ns"].tolist() == [2000.0, 1500.0, 1000.0] and old["median_ns"].isna().all()
    mnew = memop_summary(write(tmp_path, "a_cuda_gpu_mem_time_sum.csv", MEM_NEW))
    mold = memop_summary(write(tmp_path, "b_gpumemtimesum.csv", MEM_OLD))
    assert mnew["count"].tolist() == mold["count"].tolist() == [2, 4]
    assert mnew["total_ns"].tolist() == mold["total_ns"].tolist() == [800, 200]
    # a unit other than ns scales to ns
    us = kernel_summary(
        write(tmp_path, "c_cuda_gpu_kern_sum.csv", KERN_NEW.replace("Total Time (ns)", "Total Time (us)"))
    )
    assert us["total_ns"].tolist() == [6_000_000, 3_000_000, 1_000_000]


def test_nvtx_projection_with_literal_none(tmp_path):
    proj = nvtx_projection(write(tmp_path, "a_nvtx_gpu_proj_trace.csv", NVTX))
    assert proj["name"].tolist() == ["iter", "fwd", "iter", "idle"]
    assert np.isnan(proj["proj_dur_ns"].iloc[3]) and np.isnan(proj["parent_id"].iloc[0])
    assert proj["proj_dur_ns"].iloc[:3].tolist() == [9000, 3000, 8000]


def test_missing_columns_and_bad_values_are_one_line_errors(tmp_path):
    p = write(tmp_path, "x_cuda_gpu_kern_sum.csv", KERN_NEW.replace("Instances,", "").replace(",3,2000.0", ",2000.0"))
    with pytest.raises(InputError) as ei:
        kernel_summary(p)
    msg = str(ei.value)
    assert msg.startswith(p) and "Instances" in msg and "\n" not in msg
    p2 = write(tmp_path, "y_cuda_gpu_kern_sum.csv", KERN_NEW.replace("6000,3", "6000,three"))
    with pytest.raises(InputError, match="non-numeric value 'three'"):
        kernel_summary(p2)
    p3 = write(tmp_path, "z_cuda_gpu_kern_sum.csv", "SKIPPED: z.sqlite does not contain CUDA kernel data.\n")
    with pytest.raises(InputError, match="SKIPPED"):
        kernel_summary(p3)
    p4 = write(tmp_path, "w_nvtx_gpu_proj_trace.csv", "Name,Orig Start (ns)\nx,1\n")
    with pytest.raises(InputError, match=r"Projected Start \(ns\)"):
        nvtx_projection(p4)


def test_analyze_summary_path_tables_and_manifest(tmp_path):
    d = tmp_path / "csvs"
    d.mkdir()
    write(d, "run_rank3_cuda_gpu_kern_sum.csv", PREAMBLE + KERN_NEW)
    write(d, "run_rank3_cuda_gpu_mem_time_sum.csv", MEM_NEW)
    write(d, "run_rank3_nvtx_gpu_proj_trace.csv", NVTX)
    r = dtrace.analyze(str(d), str(tmp_path / "out"), scheduler="sync", iters=2, summary_gpus=2)
    assert not r.errors and r.manifest["n_parts"] == 1
    k = r.kernels.set_index("name")
    assert set(k["rank"]) == {3} and set(k["device"]) == {-1}
    gemm = k.loc["void gemm_kernel<float, 128>(int, float*)"]
    assert (gemm["count"], gemm["total_ns"], gemm["kind"], gemm["class"]) == (3, 6000, "kernel", "gemm")
    assert gemm["total_per_iter_ns"] == 6000 / 4 and gemm["gpus"] == 2 and gemm["iters"] == 2
    assert k.loc["[CUDA memset]", "kind"] == "memset"
    assert r.nccl.set_index("collective").loc["AllGather", "total_ns"] == 3000
    mem = r.memops.set_index("op")
    assert (mem.loc["D2D", "count"], mem.loc["memset", "total_ns"]) == (2, 200)
    nv = r.nvtx_ranges.set_index("name")
    assert (nv.loc["iter", "count"], nv.loc["iter", "proj_ns"], nv.loc["iter", "gpu_events"]) == (2, 17000, 7)
    assert (nv.loc["idle", "with_gpu"], nv.loc["idle", "proj_ns"]) == (0, 0)
    assert pd.isna(nv.loc["iter", "computation_ns"])  # a summary cannot give a range's breakdown
    assert len(r.breakdown) == 0
    ins = [i for i in r.manifest["inputs"] if i.get("summary")]
    assert len(ins) == 3 and all(i["status"] == "ok" and i["ranks"] == [[3, -1]] for i in ins)
    assert "breakdown" in ins[0]["absent_tables"] and "breakdown" in r.manifest["absent_tables"]
    again = dtrace.load(str(tmp_path / "out"))
    assert again.kernels["total_ns"].dtype.kind in "iu" or str(again.kernels["total_ns"].dtype) == "Int64"
    assert int(again.kernels["total_ns"].sum()) == 6000 + 3000 + 1000 + 800 + 200


def test_analyze_cli_on_csvs_and_a_bad_csv(tmp_path, capsys):
    d = tmp_path / "csvs"
    d.mkdir()
    write(d, "a_rank0_cuda_gpu_kern_sum.csv", KERN_NEW)
    write(d, "b_rank1_cuda_gpu_kern_sum.csv", KERN_NEW.replace("Instances", "Calls").replace("Name\n", "Nom\n"))
    rc = main(["analyze", str(d), "-o", str(tmp_path / "out"), "--sync", "--no-progress"])
    err = [i for i in dtrace.load(str(tmp_path / "out")).manifest["inputs"] if i["status"] == "error"]
    assert rc == 1 and len(err) == 1
    assert err[0]["error"].startswith(str(d / "b_rank1_cuda_gpu_kern_sum.csv")) and "\n" not in err[0]["error"]
    assert "Name/Operation" in err[0]["error"]


def _breakdown(tf, part):
    from dtrace.analyses import run_analyses
    from dtrace.analyses.batch import prepare_part as prepare
    from dtrace.options import Options

    p = prepare(
        part.events.to_pandas(),
        part.collectives.to_pandas(),
        part.memcpy.to_pandas(),
        rank=part.local_index,
        device=part.device,
        fmt=tf.format,
        options=Options(),
    )
    return run_analyses(p, only={"breakdown"})["breakdown"]


def test_cuda_gpu_trace_csv_is_read_as_events(tmp_path):
    new = write(tmp_path, "t_cuda_gpu_trace.csv", PREAMBLE.replace("kern_sum", "gpu_trace") + TRACE_NEW)
    old = write(tmp_path, "u_cuda_gpu_trace.csv", TRACE_NEW.replace("Ctx,GreenCtx,", "Ctx,").replace(",1,,", ",1,"))
    assert detect(new).name == detect(old).name == "nsys-csv"
    for p in (new, old):
        tf = read_nsys_csv(p)
        assert [pt.device for pt in tf.parts] == [0, 1]
        side = tf.parts[0].memcpy.to_pandas()
        assert side["copy_kind"].astype(str).tolist() == ["D2D"] and side["bytes"].tolist() == [4_194_000]
        ev = tf.parts[0].events.to_pandas()
        assert ev["kind"].astype(str).tolist() == ["kernel", "kernel", "memcpy", "memset"]
        assert tf.parts[0].collectives.num_rows == 1
    bd = pd.concat([_breakdown(tf, pt) for pt in read_nsys_csv(new).parts]).set_index("device")
    # device 0: gemm [1000,1500), nccl [1200,2000), memcpy [2500,2600), memset [3000,3050)
    assert (bd.loc[0, "computation_ns"], bd.loc[0, "exposed_comm_ns"], bd.loc[0, "exposed_memcpy_ns"]) == (
        500,
        500,
        150,
    )
    assert (bd.loc[0, "total_ns"], bd.loc[1, "busy_ns"]) == (2050, 700)
    with pytest.raises(InputError, match="summary"):
        read_nsys_csv(write(tmp_path, "k_cuda_gpu_kern_sum.csv", KERN_NEW))


def test_a_long_name_costs_its_own_bytes_only(tmp_path):
    """The names are coded from their distinct texts: one kernel name of 100 KB (the CSV's field
    limit is 128 KiB) among 2,000 events is kept whole, and reading allocates nothing near
    2,000 x 100 KB (NumPy's fixed-width strings made every row as wide as the longest name, four
    bytes a character: 800 MB here)."""
    import tracemalloc

    long = "k" * 100_000
    rows = [
        f"{1000 + 10 * i},5,{i},1,1,1,128,1,1,32,0.0,0.0,,,,,0,1,,7,{long if i == 7 else 'gemm_kernel'}\n"
        for i in range(2000)
    ]
    p = write(tmp_path, "t_cuda_gpu_trace.csv", TRACE_NEW.splitlines(keepends=True)[0] + "".join(rows))
    tracemalloc.start()
    try:
        tf = read_nsys_csv(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    names = tf.parts[0].events.column("name").to_pylist()
    assert names.count(long) == 1 and names.count("gemm_kernel") == 1999
    assert peak < 64 << 20, f"peak {peak / 1e6:.0f} MB"


# -- the GPU Performance Analyser report --------------------------------------------------
# Its README's example prints (iters 5, gpus 1): classes others 397.67 ms / 7590, gemm 34150.57 /
# 6815, fmha 2778.96 / 2400, fusion 2408.65 / 22580 (kernel total 39735.860 ms); NCCL AllGather
# 11718.85 / 805, ReduceScatter 4623.31 / 395, AllReduce 36.14 / 20 (total 16378.295 ms); 5 NVTX
# ranges totalling 42890.084 ms. CSVs with those totals must reproduce its printed figures.
SEED_KERNELS = [
    ("void cutlass_others_kernel", 397_670_000, 7590),
    ("sm90_xmma_gemm_bf16", 34_150_570_000, 6815),
    ("fmha_fwd_kernel", 2_778_960_000, 2400),
    ("loop_fusion_7", 2_408_660_000, 22580),
    ("ncclDevKernel_AllGather_RING_LL", 11_718_850_000, 805),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 4_623_310_000, 395),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 36_135_000, 20),
]
SEED_MEM = [
    ("[CUDA memcpy D2D]", 153_280_000, 905),
    ("[CUDA memset]", 42_850_000, 7635),
    ("[CUDA memcpy H2D]", 50_000, 15),
]
SEED_TAG = "TSL:XlaModule:#hlo_module=pjit__train_step,program_id=11#"
SEED_NVTX = [8_578_016_800] * 4 + [42_890_084_000 - 4 * 8_578_016_800]


def _sum_csv(rows, last):
    head = (
        f"Time (%),Total Time (ns),{'Instances' if last == 'Name' else 'Count'},Avg (ns),Med (ns),Min (ns),"
        f"Max (ns),StdDev (ns),{last}\n"
    )
    return head + "".join(f"1.0,{t},{n},{t / n:.1f},{t / n:.1f},{t // n},{t // n},0.0,{name}\n" for name, t, n in rows)


@pytest.fixture
def seed_csvs(tmp_path):
    write(tmp_path, "llama_cuda_gpu_kern_sum.csv", _sum_csv(SEED_KERNELS, "Name"))
    write(tmp_path, "llama_cuda_gpu_mem_time_sum.csv", _sum_csv(SEED_MEM, "Operation"))
    rows = "".join(
        f'"{SEED_TAG}",{i * 10**10},{d},{i * 10**10},{d + 5},PushPop,1,1,100,0,0,{i},None,:{i}\n'
        for i, d in enumerate(SEED_NVTX)
    )
    write(tmp_path, "llama_nvtx_gpu_proj_trace.csv", NVTX.splitlines()[0] + "\n" + rows)
    config = tmp_path / "config.json"
    config.write_text(
        """{
    "inputs": [ // as in the tool's README, comments and trailing commas included
        {"format": "csv", "title": "Llama2-70B-From-CSV",
         "nsys_csv_file_path": {"kernel_sum": "llama_cuda_gpu_kern_sum.csv",
                                "nvtx_proj_trace": "llama_nvtx_gpu_proj_trace.csv",
                                "mem_time_sum": "llama_cuda_gpu_mem_time_sum.csv"},
         "analysis_args": {"num_of_iters": 5, "num_of_gpus": 1, "nvtx_tag_of_iter": "%s",}}
    ],
    "kernel_to_class_map": {"gemm": "gemm", "fusion": "fusion", "fmha": "fmha",},
}"""
        % SEED_TAG
    )
    return tmp_path, str(config)


SEED_LINES = [
    "===== Llama2-70B-From-CSV =====",
    "Kernel time per iteration: 7947.172 (ms)",
    "Kernel instances per iteration: 7877",
    "Kernel total time: 39735.860 (ms)",
    "Kernel total instances: 39385",
    "NCCL time per iteration: 3275.659 (ms)",
    "NCCL instances per iteration: 244",
    "NCCL total time: 16378.295 (ms)",
    "NCCL total instances: 1220",
    "NVTX range count: 5",
    "NVTX average range time: 8578.017 (ms)",
    "NVTX total range time: 42890.084 (ms)",
    "Estimated non-hidden NCCL, mem ops and bubble time per range: 630.845 (ms)",
    "Estimated non-hidden NCCL, mem ops and bubble time per range: 7.35 (%)",
    "Estimated non-hidden NCCL, mem ops and bubble total time: 3154.224 (ms)",
    "Estimated non-hidden NCCL, mem ops and bubble total time: 7.35 (%)",
]
SEED_ROWS = {  # class: (TimePerIter, InstancePerIter, %, TotalTime, TotalInstance)
    "gemm": ["6830.11", "1363", "85.94", "34150.57", "6815", "85.94"],
    "fmha": ["555.79", "480", "6.99", "2778.96", "2400", "6.99"],
    "others": ["79.53", "1518", "1.00", "397.67", "7590", "1.00"],
    "AllGather": ["2343.77", "161", "11718.85", "805"],
    "ReduceScatter": ["924.66", "79", "4623.31", "395"],
    "[CUDA memcpy D2D]": ["30.66", "181", "153.28", "905"],
    "[CUDA memset]": ["8.57", "1527", "42.85", "7635"],
}


def test_report_reproduces_the_tools_example(seed_csvs, capsys):
    tmp_path, config = seed_csvs
    out = tmp_path / "stats"
    assert main(["nsys-stats", config, "-o", str(out)]) == 0
    text = capsys.readouterr().out
    lines = [ln.rstrip() for ln in text.splitlines()]
    for want in SEED_LINES:
        assert want in lines, want
    for key, cells in SEED_ROWS.items():
        got = [ln[len(key) :].split() for ln in lines if ln.startswith(key + " ")]
        assert got == [cells], (key, got)
    assert (out / "report.txt").read_text() == text.split("results:")[0].rstrip("\n") + "\n"
    saved = dtrace.load(str(out))
    s = saved.stats_summary.iloc[0]
    assert (s["kernel_total_ns"], s["nccl_instances"], s["nvtx_count"]) == (39_735_860_000, 1220, 5)
    assert set(saved.stats_classes["class"]) == {"gemm", "fmha", "fusion", "others"}
    # the same CSVs given on the command line give the same figures
    assert (
        main(
            [
                "nsys-stats",
                *sorted(str(p) for p in tmp_path.glob("llama_*.csv")),
                "--iters",
                "5",
                "--nvtx-tag",
                SEED_TAG,
                "--classmap",
                config,
                "--title",
                "Llama2-70B-From-CSV",
            ]
        )
        == 0
    )
    again = [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]
    assert [ln for ln in again if ln in SEED_LINES] == [ln for ln in lines if ln in SEED_LINES]


def test_report_from_an_nsys_sqlite_matches_sql(capsys):
    p = shared("nsys", "rtx4060ti_4streams.sqlite")
    con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
    k_total, k_n = con.execute("select sum(end - start), count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    h2d = con.execute("select sum(end - start), count(*) from CUPTI_ACTIVITY_KIND_MEMCPY where copyKind = 1").fetchone()
    con.close()
    assert main(["nsys-stats", p]) == 0
    lines = [ln.rstrip() for ln in capsys.readouterr().out.splitlines()]
    assert f"Kernel total time: {k_total / 1e6:.3f} (ms)" in lines
    assert f"Kernel total instances: {k_n}" in lines
    row = next(ln.split() for ln in lines if ln.startswith("[CUDA memcpy Host-to-Device]"))
    assert row[-2:] == [f"{h2d[0] / 1e6:.2f}", str(h2d[1])]


def test_config_errors_name_the_entry(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"inputs": [{"format": "csv", "nsys_csv_file_path": {"kernel_sum": None}}]}))
    assert main(["nsys-stats", str(bad)]) == 2
    bad.write_text(
        json.dumps(
            {
                "inputs": [
                    {
                        "format": "csv",
                        "nsys_csv_file_path": {"kernel_sum": "k.csv"},
                        "analysis_args": {"num_of_iters": 0},
                    }
                ]
            }
        )
    )
    assert main(["nsys-stats", str(bad)]) == 2


def test_mixed_event_and_summary_inputs(tmp_path):
    from synth_formats import write_nsys_sqlite

    write_nsys_sqlite(str(tmp_path / "job_rank0.sqlite"), steps=1)
    write(tmp_path, "job_rank1_cuda_gpu_kern_sum.csv", KERN_NEW)
    r = dtrace.analyze(str(tmp_path), scheduler="sync")
    assert not r.errors
    k = r.kernels
    assert sorted(set(zip(k["rank"], k["device"]))) == [(0, 0), (1, -1)]
    assert str(k["count"].dtype) in ("Int64", "int64") and k["count"].notna().all()
    assert k.loc[k["rank"] == 0, "gpus"].eq(1).all()
    assert len(r.breakdown) == 1 and r.manifest["n_parts"] == 2
    assert (
        os.path.basename([i for i in r.manifest["inputs"] if i.get("summary")][0]["path"])
        == "job_rank1_cuda_gpu_kern_sum.csv"
    )
    assert read_report(str(tmp_path / "job_rank1_cuda_gpu_kern_sum.csv"))[0] == "cuda_gpu_kern_sum"


def test_nsys_stats_takes_the_engine_and_model_of_a_regex_class_map(tmp_path, capsys):
    """Issue 31: ``nsys-stats X.sqlite --classmap vllm_engine_model.json`` said "choose one with
    --model", then ``--engine vllm --model llama`` was "unrecognized arguments"."""
    import shutil

    report = tmp_path / "r.sqlite"
    shutil.copy(shared("nsys", "rtx4060ti_4streams.sqlite"), report)
    cmap = shared("classmaps", "vllm_engine_model.json")
    assert main(["nsys-stats", str(report), "--classmap", cmap]) == 2
    assert "choose one with --model" in capsys.readouterr().err
    assert main(["nsys-stats", str(report), "--classmap", cmap, "--engine", "vllm", "--model", "llama"]) == 0
    out = capsys.readouterr().out
    assert "Kernel Statistic:" in out and "Class" in out

"""JAX profiler traces: both xprof layouts, TraceLens reference numbers, derived lines, steps,
collectives, multi-host ranks and broken inputs.

Expected numbers come from the raw JSON read with gzip/json + numpy in this file, from
``traces/reference/peer_numbers.md`` (TraceLens) or from the synthetic generator's truth.
"""

import gzip
import json
import os

import numpy as np
import pandas as pd
import pytest
from rawtrace import union_len
from synth_formats import write_jax_trace
from testpaths import shared

import dtrace
from dtrace.errors import InputError
from dtrace.readers import detect
from dtrace.readers.jax import hlo_collective, read_jax

CLASSIC = ("jax", "mi300x8_conv.trace.json.gz")
VIEWER = ("jax", "mi300x8_conv.trace_viewer_layout.json.gz")

# peer_numbers.md, "TraceLens, JAX (jax/mi300x8_conv), per GPU, only Stream #… threads (ms)"
TRACELENS_BUSY_MS = [3.995965, 3.345845, 3.524285, 3.403364, 3.493365, 3.464884, 3.403004, 3.502165]
TRACELENS_TOTAL_MS = [138.470832, 112.106106, 106.992671, 95.261145, 91.596080, 92.938503, 104.221477, 90.563059]
GPU0_DEFAULT_COMPUTATION_MS = 3.436644  # rocclr copy kernels counted as memcpy


def to_ns(us):
    us = np.asarray(us, dtype=np.float64)
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)


def raw_stream_events(path):
    """GPU events on 'Stream #' threads per GPU index, from the raw JSON."""
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    pname = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    tname = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    out = {}
    for pid, name in pname.items():
        if "/device:GPU:" not in name:
            continue
        k = int(name.rsplit(":", 1)[1])
        g = [
            e
            for e in ev
            if e.get("ph") == "X" and e["pid"] == pid and tname.get((pid, e["tid"]), "").startswith("Stream #")
        ]
        out[k] = pd.DataFrame(
            {"name": [e["name"] for e in g], "start": to_ns([e["ts"] for e in g]), "dur": to_ns([e["dur"] for e in g])}
        )
    return out


def part_tables(tf, compat):
    """breakdown, streams and kernels of every part of a read file (no Dask, no other analyses)."""
    from dtrace.analyses import run_analyses
    from dtrace.analyses.batch import prepare_part as prepare
    from dtrace.options import Options

    out = {}
    for part in tf.parts:
        pd_part = prepare(
            part.events.to_pandas(),
            part.collectives.to_pandas(),
            part.memcpy.to_pandas(),
            rank=part.local_index,
            device=part.device,
            fmt=tf.format,
            options=Options(compat=compat),
        )
        for name, df in run_analyses(pd_part, only={"breakdown", "streams", "kernels"}).items():
            out.setdefault(name, []).append(df)
    return {k: pd.concat(v, ignore_index=True) for k, v in out.items()}


@pytest.fixture(scope="module")
def shared_results():
    files = {"classic": read_jax(shared(*CLASSIC)), "viewer": read_jax(shared(*VIEWER))}
    return {(key, compat): part_tables(tf, compat) for key, tf in files.items() for compat in ("default", "tracelens")}


def test_detected_as_jax_not_kineto():
    for rel in (CLASSIC, VIEWER):
        assert detect(shared(*rel)).name == "jax"


def test_both_layouts_give_identical_per_gpu_results(shared_results):
    for compat in ("default", "tracelens"):
        a, b = shared_results["classic", compat], shared_results["viewer", compat]
        for table in ("breakdown", "streams", "kernels"):
            x = a[table].sort_values(list(a[table].columns[:3])).reset_index(drop=True)
            y = b[table].sort_values(list(b[table].columns[:3])).reset_index(drop=True)
            pd.testing.assert_frame_equal(x, y)
        assert a["breakdown"]["rank"].tolist() == list(range(8))
        assert a["breakdown"]["device"].tolist() == list(range(8))


def test_tracelens_numbers_per_gpu(shared_results):
    for key in ("classic", "viewer"):
        bd = shared_results[key, "tracelens"]["breakdown"].sort_values("device")
        np.testing.assert_allclose(bd["computation_ns"] / 1e6, TRACELENS_BUSY_MS, atol=1e-3)
        np.testing.assert_allclose(bd["busy_ns"] / 1e6, TRACELENS_BUSY_MS, atol=1e-3)
        np.testing.assert_allclose(bd["total_ns"] / 1e6, TRACELENS_TOTAL_MS, atol=1e-3)
        assert (bd["memcpy_ns"] == 0).all()  # TraceLens' JAX rule: rocclr copy kernels are compute


def test_default_mode_counts_rocclr_copies_as_memcpy(shared_results):
    bd = shared_results["classic", "default"]["breakdown"].sort_values("device")
    assert abs(bd["computation_ns"].iloc[0] / 1e6 - GPU0_DEFAULT_COMPUTATION_MS) <= 1e-3
    raw = raw_stream_events(shared(*CLASSIC))[0]
    copy = raw["name"].str.startswith("__amd_rocclr_copyBuffer")
    assert copy.sum() == 35
    assert bd["memcpy_ns"].iloc[0] == union_len(
        raw["start"][copy].to_numpy(), (raw["start"] + raw["dur"])[copy].to_numpy()
    )
    assert (bd["busy_ns"].to_numpy() / 1e6 - TRACELENS_BUSY_MS < 1e-3).all()


def test_only_stream_threads_count_as_gpu_work(shared_results):
    raw = raw_stream_events(shared(*CLASSIC))
    bd = shared_results["classic", "default"]["breakdown"].set_index("device")
    for k, df in raw.items():
        start, end = df["start"].to_numpy(), (df["start"] + df["dur"]).to_numpy()
        assert bd.loc[k, "gpu_events"] == len(df)
        assert bd.loc[k, "busy_ns"] == union_len(start, end)
        assert bd.loc[k, "first_ns"] == start.min()  # ts in µs → ns, relative to the profile start
        assert bd.loc[k, "last_ns"] == end.max()
    # the mistake to avoid: the derived lines would make GPU 1 look ~95 ms busy
    assert bd.loc[1, "busy_ns"] < 4_000_000


def test_launch_links_by_correlation_and_bind_id():
    """Classic: args.correlation_id; newer layout: bind_id of gpu_launch events. Same links."""
    linked = {}
    for key, rel in (("classic", CLASSIC), ("viewer", VIEWER)):
        tf = read_jax(shared(*rel))
        counts = []
        for part in tf.parts:
            ev = part.events.to_pandas()
            kind = ev["kind"].astype(str)
            gpu = ev[kind.isin(["kernel", "memcpy", "memset"])]
            rt = ev[kind == "runtime"]
            counts.append(int(gpu["correlation"].isin(rt["correlation"]).sum()))
        linked[key] = counts
    with gzip.open(shared(*CLASSIC), "rt") as f:
        ev = json.load(f)["traceEvents"]
    host_corr = {
        e["args"]["correlation_id"]
        for e in ev
        if e.get("pid") == 701 and e.get("ph") == "X" and "correlation_id" in (e.get("args") or {})
    }
    raw = [
        sum(
            1
            for e in ev
            if e.get("pid") == k + 1 and e.get("ph") == "X" and (e.get("args") or {}).get("correlation_id") in host_corr
        )
        for k in range(8)
    ]
    assert linked["classic"] == raw
    assert linked["viewer"] == raw


def test_synthetic_layouts_steps_collectives_and_memcpy(tmp_path):
    truth = write_jax_trace(str(tmp_path / "c.trace.json.gz"), layout="classic", n_gpus=2, steps=3, seed=3)
    write_jax_trace(str(tmp_path / "v.trace.json.gz"), layout="viewer", n_gpus=2, steps=3, seed=3)
    res = {k: dtrace.analyze(str(tmp_path / f"{k}.trace.json.gz"), scheduler="sync") for k in ("c", "v")}
    for _k, r in res.items():
        assert not r.errors
        bd = r.breakdown.set_index("device")
        st = r.steps
        for dev, events in truth["gpu"].items():
            g = pd.DataFrame(events)
            start, end = to_ns(g["ts"]), to_ns(g["ts"]) + to_ns(g["dur"])
            comp = g["kind"].eq("kernel") & ~g["name"].str.contains("nccl")
            comm = g["name"].str.contains("nccl")
            mem = g["kind"].isin(["memcpy", "memset"])
            assert bd.loc[dev, "gpu_events"] == len(g)  # derived XLA Ops/Modules lines excluded
            assert bd.loc[dev, "busy_ns"] == union_len(start, end)
            assert bd.loc[dev, "computation_ns"] == union_len(start[comp], end[comp])
            assert bd.loc[dev, "comm_ns"] == union_len(start[comm], end[comm])
            assert bd.loc[dev, "memcpy_ns"] == union_len(start[mem], end[mem])
            # the Steps line: three GPU-time windows, each step's events assigned by start
            mine = st[st["device"] == dev].sort_values("step")
            assert mine["step"].tolist() == [0, 1, 2]
            for step, grp in g.groupby("step"):
                s, e = to_ns(grp["ts"]), to_ns(grp["ts"]) + to_ns(grp["dur"])
                row = mine[mine["step"] == step].iloc[0]
                assert row["step_ns"] == e.max() - s.min()
                assert row["events"] == len(grp)
        # hlo_op all-gather-start.N → all_gather (classic); the kernel name says it when args are stripped
        coll = r.collectives
        assert set(coll["op"]) == {"all_gather"}
        assert sorted(coll.groupby("collective")["rank"].nunique().unique().tolist()) == [2]
        mem = r.memops.set_index(["device", "op"])
        assert mem.loc[(0, "memset"), "count"] == 3
    pd.testing.assert_frame_equal(res["c"].breakdown, res["v"].breakdown)
    pd.testing.assert_frame_equal(res["c"].steps, res["v"].steps)
    # classic args carry memcpy_details: direction and size in the memcpy side table
    part = read_jax(str(tmp_path / "c.trace.json.gz")).parts[0]
    side = part.memcpy.to_pandas()
    assert side["copy_kind"].astype(str).tolist() == ["D2D"] * 3 and side["bytes"].tolist() == [4096] * 3
    colls = part.collectives.to_pandas()
    assert colls["collective"].astype(str).tolist() == ["all_gather"] * 3


def test_hlo_collective_names():
    assert hlo_collective("all-gather-start.3", "ncclDevKernel_Generic") == "all_gather"
    assert hlo_collective("all-reduce.1", "x") == "all_reduce"
    assert hlo_collective("reduce-scatter", "x") == "reduce_scatter"
    assert hlo_collective("collective-permute-start", "x") == "send_recv"
    assert hlo_collective(None, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce_scatter"
    assert hlo_collective(None, "ncclDevKernel_Generic_4") == "unknown"


def test_multi_host_files_number_ranks_consecutively(tmp_path):
    """One file per host (2 GPUs each): ranks 0..3 across hosts, cross-rank tables over all."""
    truths = []
    for h in range(2):
        truths.append(
            write_jax_trace(
                str(tmp_path / f"host{h}.trace.json.gz"),
                layout="viewer",
                host=f"host{h}",
                n_gpus=2,
                steps=2,
                seed=10 + h,
                slow_gpu=1 if h == 1 else None,
            )
        )
    r = dtrace.analyze(str(tmp_path), scheduler="sync", rank_by="order")
    assert not r.errors
    bd = r.breakdown.sort_values("rank")
    assert bd["rank"].tolist() == [0, 1, 2, 3]
    assert bd["device"].tolist() == [0, 1, 0, 1]
    for rank, (h, dev) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        g = pd.DataFrame(truths[h]["gpu"][dev])
        s, e = to_ns(g["ts"]), to_ns(g["ts"]) + to_ns(g["dur"])
        assert bd.loc[bd["rank"] == rank, "busy_ns"].item() == union_len(s, e)
    # collectives match across the 4 ranks (one replica group, by order)
    inst = r.collectives.groupby("collective")["rank"].nunique()
    assert len(inst) == 2 and (inst == 4).all()
    assert sorted(r.ranks["rank"].tolist()) == [0, 1, 2, 3]
    # without rank numbering several files without a stated rank fail, naming the option
    r2 = dtrace.analyze(str(tmp_path), scheduler="sync")
    assert len(r2.errors) == 2 and all("--rank-by order" in e for e in r2.errors)


def test_truncated_gzip_is_a_one_line_error_naming_the_file(tmp_path):
    good = tmp_path / "good.trace.json.gz"
    write_jax_trace(str(good), n_gpus=1, steps=1)
    data = good.read_bytes()
    bad = tmp_path / "bad.trace.json.gz"
    bad.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(InputError) as ei:
        read_jax(str(bad))
    assert str(ei.value).startswith(str(bad)) and "\n" not in str(ei.value)
    r = dtrace.analyze([str(good), str(bad)], scheduler="sync", rank_by="order")
    assert len(r.errors) == 1 and r.errors[0].startswith(os.path.abspath(bad)) and "\n" not in r.errors[0]
    assert len(r.breakdown) == 1


def test_trace_without_gpu_planes_and_xplane_without_xprof(tmp_path, monkeypatch):
    p = tmp_path / "cpu.trace.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump(
            {
                "traceEvents": [
                    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:TPU:0"}},
                    {"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0},
                ]
            },
            f,
        )
    with pytest.raises(InputError, match="no /device:GPU"):
        read_jax(str(p))
    xp = tmp_path / "host.xplane.pb"
    xp.write_bytes(b"\x0a\x03abc")
    import builtins

    real_import = builtins.__import__

    def no_xprof(name, *a, **kw):
        if name.startswith(("xprof", "tensorboard_plugin_profile")):
            raise ImportError(name)
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_xprof)
    assert detect(str(xp)).name == "jax"
    with pytest.raises(InputError) as ei:
        read_jax(str(xp))
    assert str(ei.value).startswith(str(xp)) and "xprof" in str(ei.value)


def test_xplane_is_converted_with_xprof_when_installed(tmp_path, monkeypatch):
    """The conversion path, with a stand-in for xprof's converter returning trace-viewer JSON."""
    import sys
    import types

    src = tmp_path / "src.trace.json.gz"
    truth = write_jax_trace(str(src), n_gpus=2, steps=1)
    with gzip.open(src, "rb") as f:
        payload = f.read()
    calls = []

    def xspace_to_tool_data(paths, tool, params):
        calls.append((list(paths), tool))
        return payload, "application/json"

    convert = types.ModuleType("xprof.convert.raw_to_tool_data")
    convert.xspace_to_tool_data = xspace_to_tool_data
    package = types.ModuleType("xprof.convert")
    package.raw_to_tool_data = convert
    monkeypatch.setitem(sys.modules, "xprof", types.ModuleType("xprof"))
    monkeypatch.setitem(sys.modules, "xprof.convert", package)
    monkeypatch.setitem(sys.modules, "xprof.convert.raw_to_tool_data", convert)
    xp = tmp_path / "host0.xplane.pb"
    xp.write_bytes(b"\x0a\x03abc")
    tf = read_jax(str(xp))
    assert calls == [([str(xp)], "trace_viewer")]
    assert tf.path == str(xp) and [p.device for p in tf.parts] == [0, 1]
    kinds = tf.parts[1].events.to_pandas()["kind"].astype(str)
    assert int(kinds.isin(["kernel", "memcpy", "memset"]).sum()) == len(truth["gpu"][1])


@pytest.mark.parametrize("as_text", [True, False], ids=["trace_viewer", "perfetto"])
def test_step_trace_annotations_are_steps(tmp_path, as_text):
    """Issue 19, item 6: ``jax.profiler.StepTraceAnnotation("train", step_num=N)`` is a host event
    named ``train`` on the Python thread with ``args.step_num`` (a string in xprof's trace viewer
    JSON, ``{"step_num": "0", "_r": "1"}``; a number in other exports). Three of them are put
    into the shared classic-layout trace; each GPU event belongs to the window holding its
    launch (its own start when it has none), as computed here from the raw JSON."""
    with gzip.open(shared(*CLASSIC), "rt") as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    pname = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    tname = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    host = next(p for p, n in pname.items() if n.endswith("/host:CPU"))
    python = next(t for (p, t), n in tname.items() if p == host and n == "python")
    launch = {
        int(e["args"]["correlation_id"]): e["ts"]
        for e in ev
        if e.get("ph") == "X" and e["pid"] == host and "correlation_id" in (e.get("args") or {})
    }
    gpu = [
        (int(pname[e["pid"]].rsplit(":", 1)[1]), e)
        for e in ev
        if e.get("ph") == "X"
        and "/device:GPU:" in pname.get(e["pid"], "")
        and tname.get((e["pid"], e["tid"]), "").startswith("Stream #")
    ]
    when = sorted(set(launch.values()))
    cuts = [when[0] - 1.0] + [(when[len(when) * k // 3 - 1] + when[len(when) * k // 3]) / 2 for k in (1, 2)]
    cuts.append(when[-1] + 1.0)
    for i in range(3):
        num = str(i) if as_text else i
        ev.append(
            {
                "ph": "X",
                "pid": host,
                "tid": python,
                "name": "train",
                "ts": cuts[i],
                "dur": cuts[i + 1] - cuts[i],
                "args": {"step_num": num, "_r": "1" if as_text else 1},
            }
        )
    path = tmp_path / "annotated.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)

    want: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for k, e in gpu:
        corr = int((e.get("args") or {}).get("correlation_id", -1))
        t = launch.get(corr, e["ts"])
        step = next((i for i in range(3) if to_ns(cuts[i]) <= to_ns(t) < to_ns(cuts[i + 1])), None)
        if step is not None:
            start = int(to_ns(e["ts"]))
            want.setdefault((k, step), []).append((start, start + int(to_ns(e["dur"]))))
    res = dtrace.analyze(str(path), scheduler="sync")
    assert res.ok
    steps = res.steps.set_index(["device", "step"])
    assert sorted(steps.index) == sorted(want) and {s for _, s in want} == {0, 1, 2}
    for key, spans in want.items():
        assert steps.loc[key, "events"] == len(spans), key
        assert steps.loc[key, "step_ns"] == max(e for _, e in spans) - min(s for s, _ in spans), key
    assert (res.breakdown["steps"] == 3).all()


def test_two_unranked_jax_profiles_fail_without_naming_a_kineto_field(tmp_path):
    """Two JAX profiles without a process index in their names: each fails with a line that says
    how to number them, and does not name Kineto's distributedInfo (issue 31)."""
    jax_dir = shared("jax")
    res = dtrace.analyze(jax_dir, tmp_path / "out", scheduler="sync")
    assert len(res.errors) == 2
    for e in res.errors:
        assert "cannot tell this trace's rank" in e and "--rank-by order" in e
        assert "distributedInfo" not in e

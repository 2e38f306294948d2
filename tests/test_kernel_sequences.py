"""Kernel sequences of top-level ops (issue 32, item 3): ``kernel_sequences`` and
``kernel_sequences_xrank``, HTA's frequent CUDA kernel sequences for every op at once.

(a) A hand-built two-rank Kineto job whose expected sequences, counts and times come from its own
    description, (b) the tables of a real shared job against a plain json/gzip reading of its
    files, (c) HTA 0.5.0's ``get_frequent_cuda_kernel_sequences`` on a shared trace (its output
    stored in tests/data/hta_sequences/ by record_sequences.py there, so HTA is not needed here).
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from rawtrace import to_ns
from testpaths import ROOT, shared

import dtrace
from dtrace.analyses.sequences import SEPARATOR, kernel_sequences, launched_below, sequence_keys, top_level_ops
from dtrace.calltree.model import Tree
from dtrace.cli.main import main
from dtrace.errors import UsageError
from dtrace.explore.tree import load_part
from dtrace.options import Options
from dtrace.reduce.sequences import kernel_sequences_xrank

HTA = os.path.join(ROOT, "tests", "data", "hta_sequences")

# -- (a) a hand-built job --------------------------------------------------------------------------
# Each top-level op instance: (thread, op, ts, dur, launches); a launch is (kernel, kind, launch ts,
# GPU ts, GPU dur, stream, wrapper) where wrapper names a cpu_op nested in the instance around the
# launch call (None: the instance launches it itself). Times in µs.
LINEAR = [("gemm", "kernel", 1, 0, 5, 7, "aten::addmm"), ("bias", "kernel", 12, 6, 2, 7, None)]
LINEAR += [("relu", "kernel", 15, 9, 1, 7, "aten::relu")]


def _linear(ts: int, gpu: int, gemm_us: int = 5, swap: bool = False) -> tuple:
    """One ``aten::linear``: gemm (in ``aten::addmm``), bias, relu (in ``aten::relu``); ``swap``
    starts bias on another stream before gemm, so its sequence is bias | gemm | relu."""
    launches = []
    for name, kind, lts, gts, dur, stream, wrap in LINEAR:
        dur = gemm_us if name == "gemm" else dur
        if swap and name == "bias":
            gts, dur, stream = -10, 3, 8
        launches.append((name, kind, ts + lts, gpu + gts + (10 if swap and name != "bias" else 0), dur, stream, wrap))
    return (1, "aten::linear", ts, 40 if swap else 30, launches)


def job(rank: int) -> list[tuple]:
    """Rank 0: two linear (gemm | bias | relu), one swapped, an aten::mm with 2 GPU events, an
    aten::copy_ (memcpy, cast, cast), a backward op with 3 kernels below two nested ops. Rank 1:
    gemm 6 µs and no copy_."""
    gemm = 5 + rank
    out = [_linear(10, 100, gemm), _linear(50, 120, gemm), _linear(90, 140, gemm, swap=True)]
    mm = [("gemm", "kernel", 141, 170, 4, 7, None), ("Memset (Device)", "memset", 143, 175, 1, 7, None)]
    out.append((1, "aten::mm", 140, 10, mm))
    if rank == 0:
        copy = [("Memcpy HtoD (Pageable -> Device)", "memcpy", 301, 320, 4, 7, None)]
        copy += [("cast", "kernel", 305, 325, 2, 7, None), ("cast", "kernel", 308, 328, 2, 7, None)]
        out.append((1, "aten::copy_", 300, 20, copy))
    bwd = [("gemm_bwd_a", "kernel", 603, 700, 3, 7, None), ("gemm_bwd_b", "kernel", 610, 704, 3, 7, None)]
    bwd += [("reduce", "kernel", 620, 708, 1, 7, None)]
    out.append((2, "autograd::engine::evaluate_function: MmBackward0", 600, 50, bwd))
    return out


CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
LAUNCH = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}


def kineto(rank: int) -> dict:
    """The Kineto document of :func:`job`: annotations around everything, a launch under an
    annotation only (its kernel belongs to no op), the backward op's kernels two ops down."""

    def x(cat, name, tid, ts, dur, **args):
        pid = 0 if cat in CAT.values() else 1
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    ev = [x("user_annotation", "ProfilerStep#1", 1, 0, 1000), x("user_annotation", "## forward ##", 1, 1, 500)]
    corr = 0
    for tid, op, ts, dur, launches in job(rank):
        ev.append(x("cpu_op", op, tid, ts, dur))
        if op.startswith("autograd"):
            ev += [x("cpu_op", "MmBackward0", tid, ts + 1, dur - 5), x("cpu_op", "aten::mm", tid, ts + 2, dur - 10)]
        for name, kind, lts, gts, gdur, stream, wrap in launches:
            corr += 1
            if wrap:
                ev.append(x("cpu_op", wrap, tid, lts - 0.5, 3))
            ev.append(x("cuda_runtime", LAUNCH[kind], tid, lts, 1, correlation=corr))
            ev.append(x(CAT[kind], name, stream, gts, gdur, device=0, stream=stream, correlation=corr))
    corr += 1
    ev.append(x("cuda_runtime", "cudaLaunchKernel", 1, 200, 2, correlation=corr))  # under annotations only
    ev.append(x("kernel", "orphan", 7, 210, 1, device=0, stream=7, correlation=corr))
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": ev}


def expected(rank: int, min_len: int = 3) -> pd.DataFrame:
    """The ``kernel_sequences`` rows of :func:`job`, from its description alone (ns)."""
    acc: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for _tid, op, _ts, dur, launches in job(rank):
        if len(launches) < min_len:
            continue
        by_start = sorted(launches, key=lambda k: k[3])
        seq = SEPARATOR.join(k[0] for k in by_start)
        row = acc[(op, seq, len(launches))]
        row[0] += 1
        row[1] += sum(k[4] for k in launches) * 1000
        row[2] += (max(k[3] + k[4] for k in launches) - by_start[0][3]) * 1000
        row[3] += dur * 1000
    rows = [(rank, 0, op, s, n, *v) for (op, s, n), v in acc.items()]
    cols = ["rank", "device", "op", "sequence", "length", "count", "gpu_ns", "span_ns", "host_ns"]
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values(["count", "op", "sequence"], ascending=[False, True, True]).reset_index(drop=True)


@pytest.fixture(scope="module")
def hand_job(tmp_path_factory):
    d = tmp_path_factory.mktemp("seq")
    paths = []
    for rank in (0, 1):
        p = d / f"rank{rank}.json"
        p.write_text(json.dumps(kineto(rank)))
        paths.append(str(p))
    out = d / "out"
    dtrace.analyze(paths, str(out), scheduler="sync")
    return paths, str(out)


def test_hand_built_sequences(hand_job):
    paths, out = hand_job
    res = dtrace.load(out)
    got = res.kernel_sequences
    want = pd.concat([expected(0), expected(1)], ignore_index=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert got.dtypes["gpu_ns"] == np.int64 and got.dtypes["rank"] == np.int32
    # by hand: each of rank 0's two plain linears runs gemm 5 + bias 2 + relu 1 µs over 10 µs (0..10)
    lin = got.loc[(got["rank"] == 0) & (got["op"] == "aten::linear")].set_index("sequence")
    plain = lin.loc["gemm | bias | relu"]
    assert (plain["count"], plain["gpu_ns"], plain["span_ns"], plain["host_ns"]) == (2, 16_000, 20_000, 60_000)
    # the swapped one: bias 130..133 µs (stream 8), gemm 150..155, relu 159..160: 9 µs over 30
    assert lin.loc["bias | gemm | relu", ["count", "gpu_ns", "span_ns"]].tolist() == [1, 9_000, 30_000]
    assert not got["op"].isin(["aten::mm", "aten::addmm", "MmBackward0"]).any()  # too short / not top-level
    assert not got["sequence"].str.contains("orphan").any()


def test_min_len_option(hand_job):
    paths, _ = hand_job
    for n in (1, 2, 4):
        got = kernel_sequences(load_part(paths[0], options=Options(sequence_min_len=n)))
        pd.testing.assert_frame_equal(got, expected(0, n), check_dtype=False)
    assert "aten::mm" in kernel_sequences(load_part(paths[0], options=Options(sequence_min_len=2)))["op"].tolist()
    with pytest.raises(UsageError, match="sequence_min_len"):
        Options(sequence_min_len=0)


def test_cross_rank_table(hand_job):
    _, out = hand_job
    xr = dtrace.load(out).kernel_sequences_xrank
    first = xr.iloc[0]
    assert (first["op"], first["sequence"]) == ("aten::linear", "gemm | bias | relu")
    assert (first["parts"], first["count"]) == (2, 4)
    assert (first["gpu_ns"], first["median_gpu_ns"], first["max_rank"], first["span_ns"]) == (34_000, 17_000, 1, 40_000)
    assert (first["median_count"], first["min_count"], first["max_count"], first["host_ns"]) == (2.0, 2, 2, 120_000)
    assert xr["op"].tolist() == [
        "aten::linear",
        "aten::linear",
        "autograd::engine::evaluate_function: MmBackward0",
        "aten::copy_",
    ]  # count, then GPU time, largest first
    swapped = xr.iloc[1]
    assert (swapped["count"], swapped["gpu_ns"], swapped["median_gpu_ns"], swapped["max_rank"]) == (2, 19_000, 9_500, 1)
    assert xr.iloc[3]["parts"] == 1
    empty = kernel_sequences_xrank({}, Options())["kernel_sequences_xrank"]
    assert not len(empty) and "median_gpu_ns" in empty.columns


def test_cli(hand_job, capsys):
    paths, out = hand_job
    assert main(["sequences", out, "--op", "linear", "--fmt", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("op,sequence,length,parts,count") and len(lines) == 3
    assert lines[1].startswith("aten::linear,gemm | bias | relu,3,2,4,")
    assert main(["sequences", out, "--rank", "1", "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "1. aten::linear: 2 × 3 kernels on rank 1 device 0; GPU 18.0 µs" in text and "     relu" in text
    assert "2 more sequences not shown" in text
    assert main(["sequences", paths[0], "--op", "mm", "--min-len", "2", "--fmt", "csv"]) == 0  # a trace file
    body = capsys.readouterr().out.splitlines()[1:]
    assert [ln.split(",")[2] for ln in body] == ["aten::mm"]  # case-sensitive, as HTA: not MmBackward0
    assert main(["sequences", out, "--op", "nope"]) == 2
    assert "no kernel sequence of ops whose name contains 'nope'" in capsys.readouterr().err
    assert main(["sequences", out, "--op", "aten::mm", "--min-len", "2"]) == 2
    assert "--sequence-min-len 2 keeps shorter ones" in capsys.readouterr().err


def test_sequence_keys_exact_despite_collisions():
    rng = np.random.default_rng(7)
    length = rng.integers(1, 5, 400)
    first = np.concatenate([[0], np.cumsum(length)[:-1]])
    codes = rng.integers(0, 3, int(length.sum()))
    seqs = [tuple(codes[f : f + n]) for f, n in zip(first, length)]
    for base in (None, np.uint64(0), np.uint64(1)):  # 0 and 1: hashes collide all the time
        key, n = sequence_keys(codes, first, length) if base is None else sequence_keys(codes, first, length, base)
        assert n == len(set(seqs))
        firsts = {}
        for k, s in zip(key.tolist(), seqs):
            assert firsts.setdefault(s, k) == k
        assert len(set(firsts.values())) == n


# -- (b) a real job against a plain reading of its files -----------------------------------------
HOST_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"}


def raw_sequences(path: str, min_len: int = 3) -> pd.DataFrame:
    """``kernel_sequences`` of one Kineto trace from its JSON alone: per (pid, tid), a cpu_op that
    starts before the end of the current outermost cpu_op is below it, else it is the next
    outermost; a launch call belongs to the outermost op it starts in; GPU events join launch
    calls by ``args.correlation`` (the first call of an id); an op's GPU events in start order
    (ties in file order)."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    start = to_ns(np.array([e["ts"] for e in ev], float)) + base
    end = start + to_ns(np.array([e.get("dur", 0) for e in ev], float))
    ops, launch_op = [], {}
    by_thread = defaultdict(list)
    for i, e in enumerate(ev):
        if e.get("cat") in HOST_CATS:
            by_thread[(str(e["pid"]), str(e["tid"]))].append(i)
    for rows in by_thread.values():
        rows.sort(key=lambda i: (start[i], -(end[i] - start[i])))
        cur = None
        for i in rows:
            inside = cur is not None and start[i] < end[cur]
            if ev[i]["cat"] == "cpu_op" and not inside:
                cur = i
                ops.append(i)
            elif ev[i]["cat"] in ("cuda_runtime", "cuda_driver") and inside:
                launch_op.setdefault(int((ev[i].get("args") or {}).get("correlation", -1)), cur)
    kernels = defaultdict(list)
    for i, e in enumerate(ev):
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            op = launch_op.get(int((e.get("args") or {}).get("correlation", -1)))
            if op is not None:
                kernels[op].append((start[i], i, e["name"], end[i] - start[i], end[i]))
    acc: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for op in ops:
        ks = sorted(kernels.get(op, []))
        if len(ks) < min_len:
            continue
        row = acc[(ev[op]["name"], SEPARATOR.join(k[2] for k in ks), len(ks))]
        row[0] += 1
        row[1] += sum(int(k[3]) for k in ks)
        row[2] += int(max(k[4] for k in ks) - ks[0][0])
        row[3] += int(end[op] - start[op])
    rows = [(o, s, n, *v) for (o, s, n), v in acc.items()]
    return pd.DataFrame(rows, columns=["op", "sequence", "length", "count", "gpu_ns", "span_ns", "host_ns"])


def _by_key(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["op", "sequence"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def hta_job(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hta2") / "out")
    dtrace.analyze(shared("kineto", "hta-2rank"), out, scheduler="sync")
    return dtrace.load(out)


def test_real_job_against_raw_json(hta_job):
    got = hta_job.kernel_sequences
    raws = []
    for rank in (0, 1):
        raw = raw_sequences(shared("kineto", "hta-2rank", f"sampled_rank-{rank}.json.gz"))
        mine = got.loc[got["rank"] == rank].drop(columns=["rank", "device"])
        assert len(raw) >= 30
        pd.testing.assert_frame_equal(_by_key(mine), _by_key(raw), check_dtype=False)
        raws.append(raw.assign(rank=rank))
    both = pd.concat(raws, ignore_index=True)
    g = both.groupby(["op", "sequence"])
    want = g.agg(parts=("count", "size"), count=("count", "sum"), gpu_ns=("gpu_ns", "sum"), host_ns=("host_ns", "sum"))
    want["median_gpu_ns"] = g["gpu_ns"].median().round().astype(np.int64)
    xr = hta_job.kernel_sequences_xrank.set_index(["op", "sequence"]).loc[want.index]
    for col in want.columns:
        assert xr[col].tolist() == want[col].tolist(), col
    counts = hta_job.kernel_sequences_xrank["count"].to_numpy()
    assert (np.diff(counts) <= 0).all()


# -- (c) HTA 0.5.0 -----------------------------------------------------------------------------------
def test_against_hta():
    """HTA starts from the ops whose name contains ``operator_name`` at the shallowest call-stack
    depth among them; dtrace from every top-level op. Every instance HTA started from is a
    top-level op here, and over those instances dtrace's sequences, counts, GPU and host times
    are HTA's exactly. dtrace's table counts more instances, for HTA's reasons:

    - HTA drops the last profiler step (its events after the last ``ProfilerStep#`` start);
    - the shallowest depth: ``fbgemm::permute_2D_sparse_data`` runs at depth 2 (under
      ``## sparse_data_dist ##``) and at depth 8 (inside the forward pass's annotations); HTA
      keeps depth 2 only, dtrace both — no cpu_op is above either;
    - HTA's call stack of the backward thread places steps 551-553 one level deeper than step 550
      (below an ``aten::item`` of the previous step), so for backward ops only step 550 counts;
    - ``CompiledFunction`` matches the forward ``CompiledFunction`` (depth 3) and the backward
      ``evaluate_function: CompiledFunctionBackward`` (depth 2): HTA keeps the backward one only;
      dtrace has rows for both top-level ops.
    """
    path = shared("kineto", "single", "a100_5streams_sendrecv_rank0.json.gz")
    hta = pd.read_csv(os.path.join(HTA, "a100_5streams.csv"))
    roots = pd.read_csv(os.path.join(HTA, "a100_5streams_roots.csv"))
    part = load_part(path)
    tree = Tree.of_batch(part)
    top = top_level_ops(tree)
    names = tree.names[np.asarray(tree.name.codes)[top]]
    at = pd.Series(np.arange(top.size), index=pd.MultiIndex.from_arrays([names, tree.start_ns[top]]))
    base = int(part.parts["base_ns"].iloc[0])
    keys = pd.MultiIndex.from_arrays([roots["op"], roots["ts_us"].to_numpy(np.int64) * 1000 + base])
    assert keys.isin(at.index).all()  # every root of HTA is a top-level op here
    owner, gpu = launched_below(tree, top)
    mine = []
    for name, rs in roots.groupby("operator_name", sort=False):
        idx = at.loc[pd.MultiIndex.from_arrays([rs["op"], rs["ts_us"].to_numpy(np.int64) * 1000 + base])].to_numpy()
        acc: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
        for i in idx.tolist():  # the roots: tens
            g = gpu[owner == i]
            seq = SEPARATOR.join(str(tree.names[c]) for c in np.asarray(tree.name.codes)[g])
            row = acc[(str(names[i]), seq)]
            row[0] += 1
            row[1] += int((tree.end_ns[g] - tree.start_ns[g]).sum())
            row[2] += int(tree.end_ns[top[i]] - tree.start_ns[top[i]])
        mine += [(name, op, s, *v) for (op, s), v in acc.items()]
    mine_df = pd.DataFrame(mine, columns=["operator_name", "op", "sequence", "count", "gpu_ns", "host_ns"])
    theirs = hta.assign(gpu_ns=(hta["gpu_us"] * 1000).astype(np.int64), host_ns=(hta["cpu_us"] * 1000).astype(np.int64))
    cols = ["operator_name", "op", "sequence", "count", "gpu_ns", "host_ns"]
    key = ["operator_name", "op", "sequence", "count", "gpu_ns"]
    pd.testing.assert_frame_equal(
        mine_df.sort_values(key).reset_index(drop=True), theirs[cols].sort_values(key).reset_index(drop=True)
    )
    assert len(theirs) == 13
    # the table over every top-level instance: what HTA leaves out, counted
    table = kernel_sequences(part).set_index(["op", "sequence"])
    bce = theirs.loc[theirs["operator_name"] == "binary_cross_entropy"].iloc[0]
    assert (bce["count"], table.loc[(bce["op"], bce["sequence"]), "count"]) == (32, 40)  # + the last step's 8
    perm = table.loc["fbgemm::permute_2D_sparse_data", "count"].sum()
    assert (theirs.loc[theirs["operator_name"] == "permute_2D_sparse_data", "count"].sum(), perm) == (12, 25)
    assert "CompiledFunction" in table.index.get_level_values("op")
    # one step: the instances that start inside its window
    step = kernel_sequences(load_part(path, options=Options(step=550))).set_index(["op", "sequence"])
    assert step.loc[(bce["op"], bce["sequence"]), "count"] == 8

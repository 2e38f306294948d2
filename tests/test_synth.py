"""The synthetic cluster-job generator: realistic Kineto traces, consistent collectives, faults."""

import gzip
import json
import os
import time
from collections import defaultdict

import numpy as np
import pytest
from testpaths import shared

from dtrace.cli.main import main as cli
from dtrace.errors import UsageError
from dtrace.generate import synth
from dtrace.readers import detect

SMALL = dict(steps=2, kernels_per_step=30)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def ns(t):
    """µs with 3 decimals (as written) → integer ns, exactly."""
    return int(round(t * 1000))


@pytest.fixture(scope="module")
def job64(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("job64"))
    t0 = time.perf_counter()
    truth = synth.generate(
        d,
        ranks=64,
        seed=1,
        faults=["compute:rank=9:slow=0.25", "link:rank=50:slow=0.5"],
        clock_offset_ns=4_000_000,
        **SMALL,
    )
    return d, truth, time.perf_counter() - t0


def test_generates_64_ranks_quickly_with_ground_truth(job64):
    d, truth, seconds = job64
    assert seconds < 10  # ~0.3 s on an idle 2-core machine
    files = sorted(f for f in os.listdir(d) if f.startswith("rank-"))
    assert len(files) == 64 and all(f.endswith(".json.gz") for f in files)
    with open(os.path.join(d, "ground_truth.json")) as f:
        assert json.load(f) == truth
    assert truth["stragglers"] == [9, 50] and truth["tp"] == 8 and truth["dp"] == 8
    assert [f["kind"] for f in truth["faults"]] == ["compute", "link"]
    groups = truth["process_groups"]
    assert len(groups) == 16 and all(len(g["ranks"]) == 8 for g in groups)
    # every rank is in one TP and one DP group; the groups share ranks
    member = defaultdict(list)
    for g in groups:
        for r in g["ranks"]:
            member[r].append(g["kind"])
    assert all(sorted(v) == ["dp", "tp"] for v in member.values()) and len(member) == 64


def test_trace_looks_like_kineto(job64):
    d, truth, _ = job64
    doc = load(os.path.join(d, "rank-13.json.gz"))
    assert doc["distributedInfo"]["rank"] == 13 and doc["distributedInfo"]["world_size"] == 64
    assert isinstance(doc["baseTimeNanoseconds"], int) and doc["deviceProperties"][0]["id"] == 13 % 8
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    by_cat = defaultdict(list)
    for e in ev:
        by_cat[e["cat"]].append(e)
    assert {"cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset", "user_annotation"} <= set(by_cat)
    steps = sorted(e["name"] for e in by_cat["user_annotation"])
    assert steps == ["ProfilerStep#1", "ProfilerStep#2"]
    # every GPU activity is linked to a launch call by correlation, and to a host op by External id
    launches = {
        e["args"]["correlation"]: e
        for e in by_cat["cuda_runtime"] + by_cat["cuda_driver"]
        if "External id" in e["args"]
    }
    ops = {e["args"]["External id"]: e for e in by_cat["cpu_op"]}
    gpu = by_cat["kernel"] + by_cat["gpu_memcpy"] + by_cat["gpu_memset"]
    for k in gpu:
        launch = launches[k["args"]["correlation"]]
        assert launch["args"]["External id"] == k["args"]["External id"]
        op = ops[k["args"]["External id"]]
        assert ns(op["ts"]) <= ns(launch["ts"]) and ns(launch["ts"]) + ns(launch["dur"]) <= ns(op["ts"]) + ns(op["dur"])
        assert ns(k["ts"]) >= ns(launch["ts"])  # a kernel starts after its launch call
    names = " ".join(k["name"] for k in by_cat["kernel"])
    for part in ("gemm", "cutlass", "flash_fwd", "flash_bwd", "layer_norm", "elementwise", "triton_", "Adam"):
        assert part in names, part
    streams = {k["args"]["stream"] for k in by_cat["kernel"]}
    nccl = [k for k in by_cat["kernel"] if k["name"].startswith("ncclDevKernel")]
    assert len(streams - {k["args"]["stream"] for k in nccl}) >= 2  # several compute streams
    for k in nccl:
        a = k["args"]
        for key in (
            "Collective name",
            "Process Group Name",
            "Process Group Ranks",
            "Group size",
            "Seq",
            "In msg nelems",
            "Out msg nelems",
            "dtype",
        ):
            assert key in a, key
        assert 13 in json.loads(a["Process Group Ranks"]) and a["Group size"] == 8
    assert all(m["args"]["bytes"] > 0 for m in by_cat["gpu_memcpy"] + by_cat["gpu_memset"])
    # per stream, GPU work never overlaps
    for s in streams:
        on = sorted((ns(k["ts"]), ns(k["ts"]) + ns(k["dur"])) for k in by_cat["kernel"] if k["args"]["stream"] == s)
        assert all(a[1] <= b[0] for a, b in zip(on, on[1:]))


def _nccl_by_instance(d, truth):
    """(group, seq) → {rank: (start_ns, end_ns)} in true time (host clock offsets removed), from raw JSON."""
    off = truth["host_clock_offsets_ns"]
    out = defaultdict(dict)
    for r in range(truth["ranks"]):
        doc = load(os.path.join(d, f"rank-{r}.json.gz"))
        base = doc["baseTimeNanoseconds"] - off[r // truth["gpus_per_host"]]
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel"):
                a = e["args"]
                s = base + ns(e["ts"])
                out[(a["Process Group Name"], a["Seq"])][r] = (s, s + ns(e["dur"]))
    return out


def test_collectives_end_together_after_the_last_arrival(job64):
    d, truth, _ = job64
    inst = _nccl_by_instance(d, truth)
    per_step = truth["collectives_per_step"]
    assert len(inst) == truth["steps"] * (truth["dp"] * per_step["tp"] + truth["tp"] * per_step["dp"])
    slow_groups = {g["name"] for g in truth["process_groups"] if 50 in g["ranks"]}
    transfer = defaultdict(list)
    for (group, _seq), by_rank in inst.items():
        assert len(by_rank) == 8
        starts = np.array([v[0] for v in by_rank.values()])
        ends = np.array([v[1] for v in by_rank.values()])
        assert ends.max() - ends.min() <= 1_600  # everyone ends together (1.5 µs jitter)
        assert ends.min() > starts.max()  # ... after the last rank arrived
        transfer[group in slow_groups].append(ends.min() - starts.max())
    # the groups holding the slow-link rank transfer 1.5x longer (same message sizes on both sides)
    assert np.median(transfer[True]) > 1.3 * np.median(transfer[False])


def test_compute_straggler_arrives_last_in_its_groups(job64):
    d, truth, _ = job64
    inst = _nccl_by_instance(d, truth)
    groups9 = {g["name"] for g in truth["process_groups"] if 9 in g["ranks"]}
    last = [max(by_rank, key=lambda r: by_rank[r][0]) for (g, _), by_rank in inst.items() if g in groups9]
    assert len(last) > 0 and all(r == 9 for r in last)

    # its kernels are 25 % longer than the same kernels elsewhere
    def gemm(r):
        doc = load(os.path.join(d, f"rank-{r}.json.gz"))
        return np.median(
            [
                e["dur"]
                for e in doc["traceEvents"]
                if e.get("cat") == "kernel" and e["name"].startswith("sm90_xmma_gemm")
            ]
        )

    assert gemm(9) / np.median([gemm(r) for r in (1, 2, 17, 33)]) == pytest.approx(1.25, abs=0.05)


def test_launch_straggler_is_host_bound(tmp_path):
    truth = synth.generate(tmp_path, ranks=16, faults=["launch:rank=3:slow=0.3"], clock_offset_ns=0, **SMALL)

    def host_wait(r):
        """GPU idle time on the main compute stream before kernels launched after the previous one ended."""
        doc = load(os.path.join(tmp_path, f"rank-{r}.json.gz"))
        ev = doc["traceEvents"]
        launch = {
            e["args"]["correlation"]: ns(e["ts"]) + ns(e["dur"])
            for e in ev
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "External id" in e.get("args", {})
        }
        k = sorted(
            (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), launch[e["args"]["correlation"]])
            for e in ev
            if e.get("cat") == "kernel" and e["args"]["stream"] == 7
        )
        return sum(b[0] - a[1] for a, b in zip(k, k[1:]) if b[2] > a[1])

    assert truth["stragglers"] == [3]
    assert host_wait(3) > 10 * max(host_wait(4), 1_000)  # its compute stream waits for launches


def _compute_ns(truth) -> float:
    """The step's compute time as the faults define it: the base durations of its compute kernels."""
    ops = synth._schedule(truth["layers"], truth["streams"], truth["tp"], truth["dp"])
    return float(sum(o.dur_ns for o in ops if o.kind == "kernel"))


def test_loader_fault_stalls_before_the_first_launch(tmp_path):
    truth = synth.generate(tmp_path, ranks=16, faults=["loader:rank=5:slow=0.5"], **SMALL)
    assert truth["stragglers"] == [5] and truth["faults"][0]["kind"] == "loader"
    name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    for r in (5, 4):
        ev = load(os.path.join(tmp_path, f"rank-{r}.json.gz"))["traceEvents"]
        loader = [e for e in ev if e.get("name") == name]
        steps = sorted((e for e in ev if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
        if r != 5:
            assert not loader  # only the faulty rank has it
            continue
        assert len(loader) == len(steps) == 2 and all(e["cat"] == "user_annotation" for e in loader)
        for stall, step in zip(sorted(loader, key=lambda e: e["ts"]), steps):
            # at the step's start, slow × the step's compute time long, before any launch of the step
            assert ns(stall["ts"]) == ns(step["ts"])
            assert abs(ns(stall["dur"]) - 0.5 * _compute_ns(truth)) <= 1
            end = ns(stall["ts"]) + ns(stall["dur"])
            launches = [
                ns(e["ts"])
                for e in ev
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and ns(step["ts"]) <= ns(e["ts"]) < ns(step["ts"]) + ns(step["dur"])
            ]
            assert min(launches) > end


def test_sync_fault_waits_for_the_gpu_before_the_optimizer(tmp_path):
    truth = synth.generate(tmp_path, ranks=16, faults=["sync:rank=6:slow=0.2"], **SMALL)
    assert truth["stragglers"] == [6]
    ev = load(os.path.join(tmp_path, "rank-6.json.gz"))["traceEvents"]
    syncs = sorted((e for e in ev if e.get("name") == "cudaStreamSynchronize"), key=lambda e: e["ts"])
    items = sorted((e for e in ev if e.get("name") == "aten::item"), key=lambda e: e["ts"])
    assert len(syncs) == 4 and len(items) == 2  # the fault's .item() and the step's own final sync, per step
    kernels = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"]["stream"] != 52]
    adam = sorted(ns(e["ts"]) for e in ev if e.get("name") == "Optimizer.step#AdamW.step")
    for item, sync in zip(items, syncs[0::2]):
        a, b = ns(sync["ts"]), ns(sync["ts"]) + ns(sync["dur"])
        assert a > ns(item["ts"]) + ns(item["dur"])
        # it returns right after the compute streams' last activity before it (nothing else runs on
        # them until the optimizer, launched slow × the step's compute time after it returned)
        before = [ns(e["ts"]) + ns(e["dur"]) for e in kernels if e["args"]["stream"] != 56 and ns(e["ts"]) < b]
        assert max(before) < b <= max(before) + 5_000
        nxt = min(t for t in adam if t > b)
        assert nxt - b >= 0.2 * _compute_ns(truth)
    other = load(os.path.join(tmp_path, "rank-7.json.gz"))["traceEvents"]
    assert sum(e.get("name") == "cudaStreamSynchronize" for e in other) == 2
    assert not any(e.get("name") == "aten::item" for e in other)


def test_without_the_new_faults_the_bytes_are_those_of_earlier_versions(tmp_path):
    """SHA-256 of files written by dtrace before the loader and sync faults existed (commit 2509bd2,
    numpy 2.4): a job that uses no new option must not change by a byte (numpy's random streams
    are the only other input; regenerate these if a numpy upgrade changes them)."""
    import hashlib

    synth.generate(tmp_path, ranks=2, steps=1, seed=4, kernels_per_step=10, gzip=False)
    digests = [hashlib.sha256((tmp_path / f"rank-{r}.json").read_bytes()).hexdigest() for r in range(2)]
    assert digests == [
        "1a200f96a93114d5c32c0678309c389504b7a4249f3934a1bc0990b8d3053951",
        "3abddb70ebfebd2023eb6cb71b74b34df0a1482d435272a9b25ce74d5e4c9be6",
    ]


def test_reader_reads_generated_traces(job64):
    d, truth, _ = job64
    path = os.path.join(d, "rank-50.json.gz")
    tf = detect(path).read(path)
    assert tf.format == "kineto" and tf.rank_hint == 50 and len(tf.parts) == 1 and tf.parts[0].device == 2
    coll = tf.parts[0].collectives.to_pandas()
    per_step = truth["collectives_per_step"]
    assert len(coll) == truth["steps"] * (per_step["tp"] + per_step["dp"])
    assert set(coll["collective"].astype(str)) == {"all_reduce", "reduce_scatter"}
    assert (coll["seq"] >= 1).all() and (coll["group_size"] == 8).all() and (coll["bytes"] > 0).all()


def test_same_seed_same_bytes(tmp_path):
    a = synth.generate(tmp_path / "a", ranks=8, seed=5, gzip=False, **SMALL)
    b = synth.generate(tmp_path / "b", ranks=8, seed=5, gzip=False, **SMALL)
    assert a["host_clock_offsets_ns"] == b["host_clock_offsets_ns"]
    for r in range(8):
        assert (tmp_path / "a" / f"rank-{r}.json").read_bytes() == (tmp_path / "b" / f"rank-{r}.json").read_bytes()


def test_small_jobs_and_bad_arguments(tmp_path):
    one = synth.generate(tmp_path / "one", ranks=1, steps=1, kernels_per_step=10)
    assert one["tp"] == 1 and one["dp"] == 1 and one["collectives_per_step"] == {"tp": 0, "dp": 0}
    two = synth.generate(tmp_path / "two", ranks=2, steps=1, kernels_per_step=10)
    assert two["tp"] == 1 and two["dp"] == 2 and two["collectives_per_step"]["dp"] > 0
    with pytest.raises(UsageError, match="outside the job's ranks"):
        synth.generate(tmp_path / "x", ranks=4, faults=["compute:rank=4"])
    with pytest.raises(UsageError, match="valid: compute, launch, link"):
        synth.parse_fault("disk:rank=1")
    with pytest.raises(UsageError, match="does not divide"):
        synth.generate(tmp_path / "x", ranks=6, tp=4)
    assert synth.parse_fault("link:rank=9:slow=0.5") == synth.Fault("link", 9, 0.5)


def test_cli_synth(tmp_path, capsys):
    out = tmp_path / "job"
    assert (
        cli(
            [
                "synth",
                str(out),
                "--ranks",
                "16",
                "--steps",
                "2",
                "--kernels-per-step",
                "30",
                "--fault",
                "compute:rank=5:slow=0.2",
                "--fault",
                "launch:rank=9",
                "--clock-offset-ms",
                "3",
                "--no-gzip",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "wrote 16 ranks x 2 steps" in text and "compute rank 5 +20%" in text
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["stragglers"] == [5, 9] and truth["clock_offset_ns"] == 3_000_000
    assert len(list(out.glob("rank-*.json"))) == 16
    assert cli(["synth", str(out), "--fault", "compute:slow=0.2"]) == 2
    assert "names no rank" in capsys.readouterr().err


def test_from_trace_tiles_and_replicates(tmp_path, capsys):
    src = shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")
    with gzip.open(src, "rt") as f:
        n_kernels = sum(1 for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel")
    out = tmp_path / "tiled"
    assert cli(["synth", str(out), "--from-trace", src, "--tile", "2", "--ranks", "2"]) == 0
    assert "tiled 2x" in capsys.readouterr().out
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["generator"] == "dtrace.generate.tile" and truth["ranks"] == 2 and truth["stragglers"] == []
    for r in range(2):
        path = str(out / f"rank-{r}.json.gz")
        tf = detect(path).read(path)
        assert tf.rank_hint == r
        kinds = tf.parts[0].events.column("kind").to_pylist()
        assert kinds.count("kernel") == 2 * n_kernels


def test_docstring_examples():
    import doctest

    failed, attempted = doctest.testmod(synth)
    assert attempted > 0 and failed == 0

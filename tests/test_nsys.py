"""Nsight Systems SQLite reports: the shared RTX 4060 Ti report checked against SQL written here,
synthetic multi-process and multi-rank reports, NVTX ranges as windows and as steps, version
tolerance (missing tables and columns) and broken inputs."""

import os
import sqlite3

import numpy as np
import pandas as pd
import pytest
from rawtrace import union_len
from synth_formats import ITER_TAG, global_id, write_nsys_sqlite
from testpaths import shared

import dtrace
from dtrace.errors import InputError
from dtrace.readers import detect
from dtrace.readers.nsys import read_nsys, split_gid

RTX = ("nsys", "rtx4060ti_4streams.sqlite")


def sql(path, q):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def rtx():
    return dtrace.analyze(shared(*RTX), scheduler="sync")


def test_rtx_counts_and_times_match_sql(rtx):
    p = shared(*RTX)
    assert detect(p).name == "nsys"
    assert not rtx.errors
    origin = sql(p, "select utcEpochNs from TARGET_INFO_SESSION_START_TIME")[0][0]
    gpu = sql(
        p,
        "select start, end, 'k' from CUPTI_ACTIVITY_KIND_KERNEL union all "
        "select start, end, 'm' from CUPTI_ACTIVITY_KIND_MEMCPY",
    )
    s = np.array([r[0] for r in gpu]) + origin
    e = np.array([r[1] for r in gpu]) + origin
    kern = np.array([r[2] == "k" for r in gpu])
    bd = rtx.breakdown.iloc[0]
    assert (bd["rank"], bd["device"]) == (0, sql(p, "select distinct deviceId from CUPTI_ACTIVITY_KIND_KERNEL")[0][0])
    assert bd["gpu_events"] == len(gpu) == 16
    assert bd["first_ns"] == s.min() and bd["last_ns"] == e.max()  # session start + relative ns
    assert bd["busy_ns"] == union_len(s, e)
    assert bd["computation_ns"] == union_len(s[kern], e[kern])
    assert bd["memcpy_ns"] == union_len(s[~kern], e[~kern])
    assert (
        bd["streams"]
        == sql(
            p,
            "select count(distinct streamId) from (select streamId from "
            "CUPTI_ACTIVITY_KIND_KERNEL union select streamId from CUPTI_ACTIVITY_KIND_MEMCPY)",
        )[0][0]
    )
    # kernels table: names through StringIds, copies named as nsys stats names them
    k = rtx.kernels.set_index("name")
    for name, n, total in sql(
        p,
        "select s.value, count(*), sum(k.end - k.start) from CUPTI_ACTIVITY_KIND_KERNEL k "
        "join StringIds s on s.id = k.demangledName group by s.value",
    ):
        assert (k.loc[name, "count"], k.loc[name, "total_ns"]) == (n, total)
    for _kind, label, n, total in sql(
        p,
        "select m.copyKind, e.label, count(*), sum(m.end - m.start) from "
        "CUPTI_ACTIVITY_KIND_MEMCPY m join ENUM_CUDA_MEMCPY_OPER e on e.id = m.copyKind "
        "group by m.copyKind",
    ):
        assert (k.loc[f"[CUDA memcpy {label}]", "count"], k.loc[f"[CUDA memcpy {label}]", "total_ns"]) == (n, total)
    mem = rtx.memops.set_index("op")
    for kind, n, nbytes in sql(
        p, "select copyKind, count(*), sum(bytes) from CUPTI_ACTIVITY_KIND_MEMCPY group by copyKind"
    ):
        op = {1: "H2D", 2: "D2H"}[kind]
        assert (mem.loc[op, "count"], mem.loc[op, "bytes"]) == (n, nbytes)


def test_rtx_runtime_launches_link_by_correlation():
    p = shared(*RTX)
    tf = read_nsys(p)
    assert len(tf.parts) == 1 and tf.rank_per_device
    ev = tf.parts[0].events.to_pandas()
    kind = ev["kind"].astype(str)
    rt = ev[kind == "runtime"]
    n_rt = sql(p, "select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    assert len(rt) == n_rt
    linked = sql(
        p,
        "select count(*) from (select correlationId from CUPTI_ACTIVITY_KIND_KERNEL union all "
        "select correlationId from CUPTI_ACTIVITY_KIND_MEMCPY) g where g.correlationId in "
        "(select correlationId from CUPTI_ACTIVITY_KIND_RUNTIME)",
    )[0][0]
    gpu = ev[kind.isin(["kernel", "memcpy"])]
    assert int(gpu["correlation"].isin(rt["correlation"]).sum()) == linked == 16
    # globalTid packs pid/tid: pid = gtid // 0x1000000 % 0x1000000, tid = gtid % 0x1000000
    gtid = sql(p, "select globalTid from CUPTI_ACTIVITY_KIND_RUNTIME limit 1")[0][0]
    assert set(rt["pid"]) == {gtid // 0x1000000 % 0x1000000} and set(rt["tid"]) == {gtid % 0x1000000}
    assert (
        split_gid(np.array([gtid]))[0][0]
        == sql(p, "select pid from PROCESSES p join CUPTI_ACTIVITY_KIND_KERNEL k on k.globalPid = p.globalPid limit 1")[
            0
        ][0]
    )


def expected_ranges(truth, pid, dev):
    """Per NVTX range name: owned events (launched inside on the range's thread), projected span."""
    g = pd.DataFrame(truth["gpu"][(pid, dev)])
    out = {}
    for r in truth["nvtx"][pid]:
        own = g[(g["launch"] >= r["start"]) & (g["launch"] < r["end"])]
        o = out.setdefault(r["name"], {"count": 0, "events": 0, "proj": 0, "non_comm": 0})
        o["count"] += 1
        o["events"] += len(own)
        o["proj"] += int(own["end"].max() - own["start"].min())
        nc = own[(own["kind"] == "kernel") & ~own["name"].str.contains("nccl")]
        o["non_comm"] += int((nc["end"] - nc["start"]).sum())
    return out


def test_multi_process_report_parts_nvtx_ranges_and_steps(tmp_path):
    path = str(tmp_path / "node.sqlite")
    truth = write_nsys_sqlite(path, processes=((100, 0), (200, 1)), steps=3, seed=1)
    tf = read_nsys(path)
    assert [(p.device, p.local_index) for p in tf.parts] == [(0, 0), (1, 1)]
    for part, pid in zip(tf.parts, (100, 200)):
        ev = part.events.to_pandas()
        host = ev[ev["device"] == -1]
        assert set(host["pid"]) == {pid}  # each part gets its own process's host events only
        ann = host[host["kind"].astype(str) == "annotation"]
        assert sorted(ann["name"].astype(str)) == sorted(r["name"] for r in truth["nvtx"][pid])  # mark dropped
        assert set(ann["tid"]) == {pid + 1}
    r = dtrace.analyze(path, scheduler="sync", step_pattern="^TSL:XlaModule")
    assert not r.errors
    origin = truth["session_start"]
    for rank, (pid, dev) in enumerate(((100, 0), (200, 1))):
        g = pd.DataFrame(truth["gpu"][(pid, dev)])
        bd = r.breakdown[r.breakdown["rank"] == rank].iloc[0]
        assert bd["device"] == dev and bd["gpu_events"] == len(g)
        assert bd["busy_ns"] == union_len(g["start"], g["end"])
        assert bd["first_ns"] == origin + g["start"].min()
        # the iteration tag (one name, repeated) is the step definition: steps 0, 1, 2 in time order
        st = r.steps[r.steps["rank"] == rank].sort_values("step")
        assert st["step"].tolist() == [0, 1, 2]
        for step, grp in g.groupby("step"):
            row = st[st["step"] == step].iloc[0]
            assert row["events"] == len(grp) and row["step_ns"] == grp["end"].max() - grp["start"].min()
        # NVTX ranges as windows: the GPU work each range launched
        nr = r.nvtx_ranges[r.nvtx_ranges["rank"] == rank].set_index("name")
        for name, exp in expected_ranges(truth, pid, dev).items():
            row = nr.loc[name]
            assert (row["count"], row["with_gpu"], row["gpu_events"]) == (exp["count"], exp["count"], exp["events"])
            assert row["proj_ns"] == exp["proj"] and row["non_comm_kernel_ns"] == exp["non_comm"]
            assert (
                row["computation_ns"] + row["exposed_comm_ns"] + row["exposed_memcpy_ns"] + row["idle_ns"]
                == row["total_ns"]
                == row["proj_ns"]
            )
    # an iteration tag's window holds all of the step's GPU work
    tag = r.nvtx_ranges[r.nvtx_ranges["name"] == ITER_TAG]
    assert (tag["gpu_events"] == 18).all()


def test_processes_sharing_a_device_id_stay_separate(tmp_path):
    """CUDA_VISIBLE_DEVICES per rank: every process reports device 0; still one part each."""
    path = str(tmp_path / "node.sqlite")
    truth = write_nsys_sqlite(path, processes=((100, 0), (200, 0)), steps=2, seed=2, slow=3.0)
    r = dtrace.analyze(path, scheduler="sync")
    bd = r.breakdown.sort_values("rank")
    assert bd[["rank", "device"]].values.tolist() == [[0, 0], [1, 0]]
    for rank, pid in enumerate((100, 200)):
        g = pd.DataFrame(truth["gpu"][(pid, 0)])
        assert bd["busy_ns"].iloc[rank] == union_len(g["start"], g["end"])


def test_several_rank_files_align_on_session_start(tmp_path):
    """One report per rank, different session starts: absolute times line up across ranks."""
    starts = {0: 1_700_000_000_000_000_000, 1: 1_700_000_000_000_250_000}
    truths = {}
    for rank, t0 in starts.items():
        truths[rank] = write_nsys_sqlite(
            str(tmp_path / f"job_rank{rank}.sqlite"),
            processes=((300 + rank, 0),),
            session_start=t0,
            seed=5 + rank,
            slow=2.0 if rank == 1 else 1.0,
        )
    r = dtrace.analyze(str(tmp_path), scheduler="sync")
    assert not r.errors
    bd = r.breakdown.sort_values("rank")
    assert bd["rank"].tolist() == [0, 1]
    for rank in (0, 1):
        g = pd.DataFrame(truths[rank]["gpu"][(300 + rank, 0)])
        row = bd[bd["rank"] == rank].iloc[0]
        assert row["first_ns"] == starts[rank] + g["start"].min()
        assert row["busy_ns"] == union_len(g["start"], g["end"])
    # cross-rank: the all-reduces match by order on both ranks
    inst = r.collectives.groupby("collective")["rank"].nunique()
    assert len(inst) == 3 and (inst == 2).all()
    assert sorted(r.ranks["rank"].tolist()) == [0, 1]


def test_missing_tables_and_columns_are_tolerated(tmp_path):
    path = str(tmp_path / "old.sqlite")
    truth = write_nsys_sqlite(
        path,
        drop_tables=("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMSET", "TARGET_INFO_SESSION_START_TIME"),
        drop_columns={"CUPTI_ACTIVITY_KIND_KERNEL": ("demangledName",), "CUPTI_ACTIVITY_KIND_MEMCPY": ("bytes",)},
    )
    tf = read_nsys(path)
    ev = tf.parts[0].events.to_pandas()
    kind = ev["kind"].astype(str)
    g = pd.DataFrame(truth["gpu"][(4242, 0)])
    assert (kind == "annotation").sum() == 0 and (kind == "memset").sum() == 0
    assert (kind == "kernel").sum() == (g["kind"] == "kernel").sum()
    # shortName stands in for demangledName; without a session start times stay relative
    names = set(ev.loc[kind == "kernel", "name"].astype(str))
    assert names == {n.split("(")[0] for n in g.loc[g["kind"] == "kernel", "name"]}
    assert ev.loc[kind == "kernel", "start_ns"].min() == g.loc[g["kind"] == "kernel", "start"].min()
    assert (tf.parts[0].memcpy.to_pandas()["bytes"] == -1).all()


def test_broken_sqlite_inputs_are_one_line_errors(tmp_path):
    empty = tmp_path / "nokernels.sqlite"
    con = sqlite3.connect(empty)
    con.execute("create table StringIds (id integer, value text)")
    con.commit()
    con.close()
    with pytest.raises(InputError) as ei:
        read_nsys(str(empty))
    msg = str(ei.value)
    assert msg.startswith(str(empty)) and "CUPTI_ACTIVITY_KIND_KERNEL" in msg and "\n" not in msg
    good = tmp_path / "good_rank0.sqlite"
    write_nsys_sqlite(str(good), steps=1)
    corrupt = tmp_path / "corrupt_rank1.sqlite"
    corrupt.write_bytes(good.read_bytes()[:100] + b"\x00garbage" * 50)
    r = dtrace.analyze([str(good), str(empty), str(corrupt)], scheduler="sync")
    assert len(r.breakdown) == 1 and len(r.errors) == 2
    for err, path in zip(sorted(r.errors), sorted([os.path.abspath(corrupt), os.path.abspath(empty)])):
        assert err.startswith(path) and "\n" not in err


def test_nsys_rep_without_nsys_on_path(tmp_path, monkeypatch):
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"not really a report")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect(str(rep)).name == "nsys"
    with pytest.raises(InputError) as ei:
        read_nsys(str(rep))
    assert str(ei.value).startswith(str(rep)) and "nsys export" in str(ei.value)


def test_global_id_packing():
    pid, tid = split_gid(np.array([global_id(1234, 99), global_id(0xFFFFFF, 0xFFFFFF)]))
    assert pid.tolist() == [1234, 0xFFFFFF] and tid.tolist() == [99, 0xFFFFFF]


def test_every_registered_reader_output_follows_the_schema(tmp_path):
    """Conformance: each reader's sample passes the one schema check, side tables included."""
    import pyarrow as pa
    from synth_formats import write_jax_trace
    from test_rocpd import make_rocpd
    from test_rocprof import make_rocprof

    from dtrace.core.schema import COLLECTIVE_SCHEMA, EVENT_SCHEMA, MEMCPY_SCHEMA, validate_events
    from dtrace.readers import readers

    write_jax_trace(str(tmp_path / "s.trace.json.gz"), n_gpus=1, steps=1)
    (tmp_path / "s_cuda_gpu_trace.csv").write_text(
        "Start (ns),Duration (ns),CorrId,Bytes (MB),Device,Strm,Name\n1,2,3,,0,7,k\n5,1,4,0.5,0,8,[CUDA memcpy Host-to-Device]\n"
    )
    samples = {
        "kineto": shared("kineto", "single", "mi210_gpu_only.json.gz"),
        "jax": str(tmp_path / "s.trace.json.gz"),
        "nsys": shared(*RTX),
        "nsys-csv": str(tmp_path / "s_cuda_gpu_trace.csv"),
        "rocprofv3": shared("rocprof", "908_results.json.gz"),
        "rocpd": make_rocpd(make_rocprof(tmp_path / "r_results.json"), tmp_path / "r_results.db"),
    }
    regs = readers()
    assert set(regs) <= set(samples), f"add a sample for {set(regs) - set(samples)}"
    for name, reader in regs.items():
        path = samples[name]
        assert detect(path).name == name
        tf = reader.read(path)
        assert tf.format == name and tf.parts
        for part in tf.parts:
            t = validate_events(part.events, path)
            assert t.schema.names[: len(EVENT_SCHEMA)] == EVENT_SCHEMA.names
            assert part.collectives.schema.equals(COLLECTIVE_SCHEMA) and part.memcpy.schema.equals(MEMCPY_SCHEMA)
            rows = pa.concat_arrays(
                [part.collectives.column("row").combine_chunks(), part.memcpy.column("row").combine_chunks()]
            ).to_numpy()
            assert ((rows >= 0) & (rows < part.events.num_rows)).all()


def test_nvtx_range_named_like_a_kernel(tmp_path):
    path = str(tmp_path / "r.sqlite")
    write_nsys_sqlite(path, steps=2)
    con = sqlite3.connect(path)
    con.execute("update NVTX_EVENTS set text = 'elementwise_kernel(float*)' where text = 'forward'")
    con.commit()
    con.close()
    ev = read_nsys(path).parts[0].events.to_pandas()  # one dictionary entry per distinct name
    same = ev[ev["name"].astype(str) == "elementwise_kernel(float*)"]
    assert sorted(same["kind"].astype(str).unique()) == ["annotation", "kernel"]
    assert len(same) == 2 + 1  # two kernels, one renamed range (the other is named through textId)


def test_sqlite_in_wal_mode_is_read_without_writing_beside_it_and_its_log_is_seen(tmp_path):
    """Issue 19, item 3: no -wal/-shm files are created beside the input, and a change that lives
    only in the write-ahead log (the database file untouched) is analysed, not "up to date"."""
    import hashlib
    import shutil

    folder = tmp_path / "in"
    folder.mkdir()
    db = folder / "report.sqlite"
    shutil.copyfile(shared(*RTX), db)
    con = sqlite3.connect(db)
    assert con.execute("pragma journal_mode=wal").fetchone()[0] == "wal"
    con.close()
    assert os.listdir(folder) == ["report.sqlite"]  # closed cleanly: no log left

    def kernel_ns(c):  # summed kernel durations, straight from SQL
        return c.execute('select sum("end" - start) from CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]

    def listing():
        return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in sorted(os.listdir(folder))}

    out = tmp_path / "out"
    first = dtrace.analyze(str(folder), out, scheduler="sync")
    assert first.ok and os.listdir(folder) == ["report.sqlite"]  # nothing written beside it
    ro = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    try:
        assert first.kernels.query("kind == 'kernel'")["total_ns"].sum() == kernel_ns(ro)
    finally:
        ro.close()

    writer = sqlite3.connect(db)  # another writer, still open: its change is in the log only
    try:
        writer.execute("pragma wal_autocheckpoint=0")
        st = os.stat(db)
        writer.execute(
            "delete from CUPTI_ACTIVITY_KIND_KERNEL where streamId = (select max(streamId) from CUPTI_ACTIVITY_KIND_KERNEL)"
        )
        writer.commit()
        assert os.path.getsize(f"{db}-wal") > 0
        assert (os.stat(db).st_size, os.stat(db).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        want = kernel_ns(writer)
        n_kernels = writer.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        assert want < first.kernels.query("kind == 'kernel'")["total_ns"].sum() and n_kernels == 3
        before = listing()
        again = dtrace.analyze(str(folder), out, scheduler="sync")
        assert not again.manifest.get("up_to_date") and again.ok
        kernels = again.kernels.query("kind == 'kernel'")
        assert kernels["total_ns"].sum() == want and kernels["count"].sum() == n_kernels
        assert listing() == before  # the log and its index untouched, nothing added
    finally:
        writer.close()

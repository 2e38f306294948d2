"""rocpd (rocprofv3's SQLite output): a database written in the test after ROCprofiler-SDK's
documented schema (tables ``rocpd_<name><uuid>`` with ``rocpd_<name>`` views over them) holding
the same run as test_rocprof's hand-built JSON; both readers must give the same tables.

The database is written the way rocprofv3's writer (``generateRocpd.cpp``) fills it: an event's
``stack_id`` is the record's internal correlation id (the launch link) and its ``correlation_id``
the external one (0 unless set). Two layouts: schema 3.0.1 keeps a record's thread, agent, queue,
stream and times in its own row (``inline``); the ``track`` layout (schema 3 drafts and 4) keeps
them in ``rocpd_track`` and ``rocpd_timestamp`` rows the record points to."""

import json
import sqlite3

import pandas as pd
import pytest
from test_rocprof import make_rocprof

import dtrace
from dtrace.errors import InputError, NoGPUActivity
from dtrace.readers import detect

UUID = "_0196c1e2f3a4"
CATEGORY = {1: "HIP_RUNTIME_API", 2: "MARKER_CORE_RANGE_API", 3: "MEMORY_COPY", 4: "KERNEL_DISPATCH"}
COLUMNS = {
    "string": "id INTEGER PRIMARY KEY, guid TEXT, string TEXT",
    "info_process": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, init BIGINT, fini BIGINT, command TEXT",
    "info_thread": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, ppid INTEGER, pid INTEGER, tid INTEGER",
    "info_agent": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, type TEXT, absolute_index INTEGER, "
    "logical_index INTEGER, type_index INTEGER, product_name TEXT",
    "info_kernel_symbol": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, code_object_id INTEGER, "
    "kernel_name TEXT, display_name TEXT, extdata JSONB",
    "track": "id INTEGER PRIMARY KEY, guid TEXT, nid INTEGER, pid INTEGER, tid INTEGER, agent_id INTEGER, "
    "queue_id INTEGER, stream_id INTEGER, name_id INTEGER",
    "timestamp": "id INTEGER PRIMARY KEY, guid TEXT, value BIGINT, phase INTEGER, track_id INTEGER",
    "event": "id INTEGER PRIMARY KEY, guid TEXT, category_id INTEGER, stack_id INTEGER, parent_stack_id INTEGER, "
    "correlation_id INTEGER, extdata JSONB",
}
# per layout: the columns of the record tables that hold where and when a record ran
WHERE = {
    "track": {
        "region": "track_id INTEGER, start_id INTEGER, end_id INTEGER",
        "kernel_dispatch": "track_id INTEGER, start_id INTEGER, end_id INTEGER",
        "memory_copy": "track_id INTEGER, start_id INTEGER, end_id INTEGER",
    },
    "inline": {  # schema 3.0.1 (rocpd_tables.sql of ROCm's rocm-systems)
        "region": "nid INTEGER, pid INTEGER, tid INTEGER, start BIGINT, end BIGINT",
        "kernel_dispatch": "nid INTEGER, pid INTEGER, tid INTEGER, agent_id INTEGER, queue_id INTEGER, "
        "stream_id INTEGER, start BIGINT, end BIGINT",
        "memory_copy": "nid INTEGER, pid INTEGER, tid INTEGER, start BIGINT, end BIGINT, queue_id INTEGER, "
        "stream_id INTEGER",
    },
}
RECORDS = {
    "region": "id INTEGER PRIMARY KEY, guid TEXT, {where}, name_id INTEGER, event_id INTEGER",
    "kernel_dispatch": "id INTEGER PRIMARY KEY, guid TEXT, {where}, kernel_id INTEGER, dispatch_id INTEGER, "
    "workgroup_size_x INTEGER, workgroup_size_y INTEGER, workgroup_size_z INTEGER, grid_size_x INTEGER, "
    "grid_size_y INTEGER, grid_size_z INTEGER, event_id INTEGER",
    "memory_copy": "id INTEGER PRIMARY KEY, guid TEXT, {where}, name_id INTEGER, dst_agent_id INTEGER, "
    "src_agent_id INTEGER, size INTEGER, event_id INTEGER",
}


def make_rocpd(json_path, db_path, *, views=True, layout="track"):
    """The records of a rocprofv3 JSON file written as a rocpd database (``layout``: see the module notes)."""
    with open(json_path) as f:
        proc = json.load(f)["rocprofiler-sdk-tool"][0]
    con = sqlite3.connect(db_path)
    tables = {**COLUMNS, **{k: v.format(where=WHERE[layout][k]) for k, v in RECORDS.items()}}
    for name, cols in tables.items():
        con.execute(f"create table rocpd_{name}{UUID} ({cols})")
        if views:
            con.execute(f"create view rocpd_{name} as select * from rocpd_{name}{UUID}")
    strings, tracks, threads = {}, {}, set()

    def string(s):
        if s not in strings:
            strings[s] = len(strings) + 1
            con.execute(f"insert into rocpd_string{UUID} values (?, 'g', ?)", (strings[s], s))
        return strings[s]

    def thread(tid):  # rocprofv3 numbers a thread by its OS id
        if tid not in threads:
            threads.add(tid)
            con.execute(f"insert into rocpd_info_thread{UUID} values (?, 'g', 1, 1, 1, ?)", (tid, tid))
        return tid

    def where(r, agent=None, stream=None, queue=None):
        """The values of the layout's WHERE columns for record ``r``."""
        tid = thread(r["thread_id"])
        if layout == "inline":
            return (1, 1, tid, *((agent, queue, stream) if agent is not None else ()),
                    r["start_timestamp"], r["end_timestamp"], *((queue, stream) if "bytes" in r else ()))  # fmt: skip
        key = (tid, agent, stream, queue)
        if key not in tracks:
            tracks[key] = len(tracks) + 1
            con.execute(
                f"insert into rocpd_track{UUID} values (?, 'g', 1, 1, ?, ?, ?, ?, null)",
                (tracks[key], tid, agent, queue, stream),
            )
        out = [tracks[key]]
        for v in (r["start_timestamp"], r["end_timestamp"]):
            cur = con.execute(f"insert into rocpd_timestamp{UUID} (guid, value, phase) values ('g', ?, 1)", (v,))
            out.append(cur.lastrowid)
        return tuple(out)

    def event(category, r):
        corr = r["correlation_id"]
        cur = con.execute(
            f"insert into rocpd_event{UUID} (guid, category_id, stack_id, parent_stack_id, correlation_id, extdata) "
            "values ('g', ?, ?, ?, ?, '{}')",
            (string(CATEGORY[category]), corr["internal"], corr["internal"], corr["external"]),
        )
        return cur.lastrowid

    def insert(table, values):
        con.execute(f"insert into rocpd_{table}{UUID} values (null, 'g', {', '.join('?' * len(values))})", values)

    md = proc["metadata"]
    con.execute(
        f"insert into rocpd_info_process{UUID} values (1, 'g', 1, ?, ?, ?, '')",
        (md["pid"], md["init_time"], md["fini_time"]),
    )
    for a in proc["agents"]:
        kind = "GPU" if a["type"] == 2 else "CPU"
        con.execute(
            f"insert into rocpd_info_agent{UUID} values (?, 'g', 1, 1, ?, ?, ?, ?, ?)",
            (
                a["id"]["handle"],
                kind,
                a["id"]["handle"],
                a["gpu_index"],
                a["gpu_index"] if kind == "GPU" else None,
                a["product_name"],
            ),
        )
    for s in proc["kernel_symbols"]:
        con.execute(
            f"insert into rocpd_info_kernel_symbol{UUID} values (?, 'g', 1, 1, 1, ?, ?, ?)",
            (
                s["kernel_id"],
                s["kernel_name"],
                s["kernel_name"],
                json.dumps({"formatted_kernel_name": s["formatted_kernel_name"]}),
            ),
        )
    br = proc["buffer_records"]
    for d in br["kernel_dispatch"]:
        info = d["dispatch_info"]
        insert("kernel_dispatch", (
            *where(d, info["agent_id"]["handle"], d["stream_id"]["handle"], info["queue_id"]["handle"]),
            info["kernel_id"], info["dispatch_id"], *(info["workgroup_size"][a] for a in "xyz"),
            *(info["grid_size"][a] for a in "xyz"), event(4, d)))  # fmt: skip
    ops = proc["strings"]["buffer_records"]
    for m in br["memory_copy"]:
        # the writer's track of a copy names its destination agent; the record names both
        insert("memory_copy", (
            *where(m, m["dst_agent_id"]["handle"] if layout == "track" else None, m["stream_id"]["handle"]),
            string(ops[m["kind"]]["operations"][m["operation"]]), m["dst_agent_id"]["handle"],
            m["src_agent_id"]["handle"], m["bytes"], event(3, m)))  # fmt: skip
    messages = {m["key"]: m["value"] for m in proc["strings"]["marker_api"]}
    for records, category in ((br["hip_api"], 1), (br["marker_api"], 2)):
        for r in records:
            name = messages.get(r["correlation_id"]["internal"]) if category == 2 else None
            name = name or ops[r["kind"]]["operations"][r["operation"]]
            insert("region", (*where(r), string(name), event(category, r)))
    con.commit()
    con.close()
    return str(db_path)


def _sorted(t):
    df = t.to_pandas()
    for c in ("kind", "name"):
        df[c] = df[c].astype(str)
    return df.sort_values(["start_ns", "kind", "name", "device"]).reset_index(drop=True)


@pytest.mark.parametrize("views,layout", [(True, "track"), (False, "track"), (True, "inline"), (False, "inline")])
def test_rocpd_equals_the_json_of_the_same_run(tmp_path, views, layout):
    js = make_rocprof(tmp_path / "rank2_results.json")
    db = make_rocpd(js, tmp_path / "rank2_results.db", views=views, layout=layout)
    assert detect(db).name == "rocpd"
    a, b = detect(js).read(js), detect(db).read(db)
    assert [p.device for p in a.parts] == [p.device for p in b.parts] == [0, 1]
    assert a.meta["session_ns"] == b.meta["session_ns"] and a.meta["pid"] == b.meta["pid"]
    for pa_, pb in zip(a.parts, b.parts):
        ea, eb = _sorted(pa_.events), _sorted(pb.events)
        pd.testing.assert_frame_equal(ea, eb)
        for side in ("collectives", "memcpy"):
            sa = getattr(pa_, side).to_pandas().drop(columns="row")
            sb = getattr(pb, side).to_pandas().drop(columns="row")
            pd.testing.assert_frame_equal(sa.astype(str), sb.astype(str))
    ra = dtrace.analyze(js, scheduler="sync")
    rb = dtrace.analyze(db, scheduler="sync")
    for t in ("breakdown", "kernels", "gaps", "steps", "memops"):
        pd.testing.assert_frame_equal(ra.table(t), rb.table(t), obj=t)


def test_bad_rocpd(tmp_path):
    js = make_rocprof(tmp_path / "a_results.json")
    db = make_rocpd(js, tmp_path / "a_results.db")
    con = sqlite3.connect(db)
    con.execute(f"delete from rocpd_info_kernel_symbol{UUID} where id = 2")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="kernel_id 2, which rocpd_info_kernel_symbol lacks"):
        detect(db).read(db)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("create table t (x)")
    con.commit()
    con.close()
    assert detect(str(other)).name == "nsys"  # any other SQLite database stays Nsight Systems' to refuse


def test_values_of_the_wrong_type_fail_in_one_line(tmp_path):
    """SQLite keeps what a writer stored: a time that is text, or an id too large for an integer
    (stored as a REAL), fails the database with one line naming it, never an internal error."""
    js = make_rocprof(tmp_path / "a_results.json")
    for i, (column, value) in enumerate((("start", "soon"), ("stream_id", 2.0**64), ("tid", 1.5))):
        db = make_rocpd(js, tmp_path / f"b{i}_results.db", layout="inline")
        con = sqlite3.connect(db)
        con.execute(f"update rocpd_kernel_dispatch{UUID} set [{column}] = ? where id = 1", (value,))
        con.commit()
        con.close()
        with pytest.raises(InputError, match="rocpd_kernel_dispatch holds a value that is not a 64-bit integer") as ei:
            detect(db).read(db)
        assert db in str(ei.value) and "\n" not in str(ei.value)
        res = dtrace.analyze(db, scheduler="sync")
        assert res.manifest["inputs"][0]["error_type"] == "InputError"


def test_damaged_or_partial_databases(tmp_path):
    js = make_rocprof(tmp_path / "a_results.json")

    def db(name, *sql):
        path = make_rocpd(js, tmp_path / f"{name}_results.db", layout="inline")
        con = sqlite3.connect(path)
        for q in sql:
            con.execute(q)
        con.commit()
        con.close()
        return path

    # schema 3.0.1 keeps where a record ran in the record: no rocpd_track needed
    no_track = db("t", "drop view rocpd_track", f"drop table rocpd_track{UUID}")
    assert [p.device for p in detect(no_track).read(no_track).parts] == [0, 1]
    # a process id that is not a number is unknown, not an internal error
    pid = db("p", f"update rocpd_info_process{UUID} set pid = 'abc'")
    assert detect(pid).read(pid).meta["pid"] == -1
    # no dispatch table: still rocpd's (not Nsight Systems'), without GPU activity apart from the copies
    no_kd = db("k", "drop view rocpd_kernel_dispatch", f"drop table rocpd_kernel_dispatch{UUID}")
    assert detect(no_kd).name == "rocpd" and len(detect(no_kd).read(no_kd).parts) == 2
    none = db(
        "n",
        "drop view rocpd_kernel_dispatch",
        f"drop table rocpd_kernel_dispatch{UUID}",
        f"delete from rocpd_memory_copy{UUID}",
    )
    with pytest.raises(NoGPUActivity, match="no rocpd_kernel_dispatch or rocpd_memory_copy rows"):
        detect(none).read(none)
    agents = db("g", f"delete from rocpd_info_agent{UUID}")
    with pytest.raises(InputError, match="agent 11, which is not a GPU agent of rocpd_info_agent"):
        detect(agents).read(agents)


@pytest.mark.parametrize("index", [1 << 32, 1 << 40, (1 << 32) - 1])
def test_agent_index_beyond_int32_is_an_input_error(tmp_path, index):
    """Issue 31: a type_index of 2**32 or 2**40 wrapped to device 0, 2**32 - 1 became -1 (the host)."""
    js = make_rocprof(tmp_path / "a_results.json")
    db = make_rocpd(js, tmp_path / "a_results.db")
    con = sqlite3.connect(db)
    con.execute(f"update rocpd_info_agent{UUID} set type_index = ? where id = 12", (index,))
    con.commit()
    con.close()
    with pytest.raises(InputError, match=f"rocpd_info_agent 12 has device index {index}, which is not a device id"):
        detect(db).read(db)


def test_a_view_that_never_ends_is_interrupted(tmp_path, monkeypatch):
    """Issue 31: a rocpd database with a hostile view (a recursive CTE without end) never finished.
    Reading is bounded in time: the input fails in one line naming the budget, and a good input
    beside it is analysed."""
    import time

    from dtrace.readers import _sqlite

    js = make_rocprof(tmp_path / "a_results.json")
    db = make_rocpd(js, tmp_path / "a_results.db")
    con = sqlite3.connect(db)
    con.execute("drop view if exists rocpd_kernel_dispatch")
    con.execute(
        "create view rocpd_kernel_dispatch as with recursive n(i) as (select 1 union all select i + 1 from n) "
        f"select k.* from rocpd_kernel_dispatch{UUID} k, n"
    )
    con.commit()
    con.close()
    monkeypatch.setattr(_sqlite, "DB_SECONDS", 1.0)
    t0 = time.monotonic()
    with pytest.raises(InputError, match=r"took longer than 1 s \(a view or table that never ends\?\): interrupted"):
        detect(db).read(db)
    assert time.monotonic() - t0 < 30
    good = make_rocpd(make_rocprof(tmp_path / "b_results.json"), tmp_path / "rank1_results.db")
    res = dtrace.analyze([db, good], scheduler="sync", rank_by="order")
    assert [i["status"] for i in res.manifest["inputs"]] == ["error", "ok"]

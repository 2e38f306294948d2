"""``dtrace timeline``: the aligned multi-rank Chrome / Perfetto trace of the slow step.

What is checked: the document against the Chrome trace-event format (written out here), the
per-rank breakdown of the exported window read back by dtrace's own Kineto reader against the
results' ``steps`` table, collective instances lining up across hosts after the clock offsets
are removed (and not before), that only the chosen ranks' events are read and the size does not
grow with the job, the CLI and the report link, and the trace in a real browser trace viewer.
"""

import gzip
import json
import os
import shutil
from collections import defaultdict

import _trace_viewer
import browser
import numpy as np
import pytest
from testpaths import ROOT

import dtrace
from dtrace.analyses.batch import prepare_part as prepare
from dtrace.analyses.breakdown import breakdown
from dtrace.cli.main import main as cli
from dtrace.errors import DtraceError, UsageError
from dtrace.explore import timeline as tx
from dtrace.generate import synth
from dtrace.options import Options
from dtrace.readers import detect
from dtrace.render.context import Context
from dtrace.render.html import report
from dtrace.render.page import page
from dtrace.render.whatif import section_whatif

ARTIFACTS = os.path.join(ROOT, "test-artifacts")
BD = (
    "computation_ns",
    "exposed_comm_ns",
    "exposed_memcpy_ns",
    "busy_ns",
    "idle_ns",
    "total_ns",
    "comm_ns",
    "memcpy_ns",
)


def _job(root, ranks, **kw):
    truth = synth.generate(
        root / "traces", ranks=ranks, steps=3, kernels_per_step=30, faults=["compute:rank=5:slow=0.2"], **kw
    )
    res = dtrace.analyze(str(root / "traces"), str(root / "out"), scheduler="sync")
    return truth, res


@pytest.fixture(scope="module")
def job16(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("tl16"), 16)


def _flagged(res):
    s = res.stragglers
    return s.loc[s["flagged"].astype(bool), "rank"].tolist()


# ------------------------------------------------------------------------------------------
# the Chrome trace-event format, written out

META = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}


def check_chrome_trace(doc: dict) -> dict:
    """Validate ``doc`` against the trace-event format; return the events by phase."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    by = defaultdict(list)
    num = (int, float)
    for e in doc["traceEvents"]:
        ph = e["ph"]
        by[ph].append(e)
        assert isinstance(e["pid"], int)
        if ph == "X":
            assert isinstance(e["name"], str) and isinstance(e["cat"], str) and isinstance(e["tid"], int)
            assert isinstance(e["ts"], num) and isinstance(e["dur"], num) and e["dur"] >= 0
            assert isinstance(e.get("args", {}), dict)
        elif ph == "M":
            assert e["name"] in META and META[e["name"]] in e["args"], e
            want = int if META[e["name"]] == "sort_index" else str
            assert isinstance(e["args"][META[e["name"]]], want), e
            if e["name"].startswith("thread"):
                assert isinstance(e["tid"], int)
        elif ph == "C":
            assert isinstance(e["name"], str) and isinstance(e["ts"], num)
            assert e["args"] and all(isinstance(v, num) for v in e["args"].values())
        elif ph in ("s", "t", "f"):
            assert isinstance(e["id"], (int, str)) and isinstance(e["cat"], str) and isinstance(e["name"], str)
            assert isinstance(e["ts"], num) and isinstance(e["tid"], int)
            if ph != "s":
                assert e["bp"] == "e"
        elif ph == "i":
            assert e["s"] in ("g", "p", "t") and isinstance(e["ts"], num) and isinstance(e["name"], str)
        else:
            raise AssertionError(f"unexpected phase {ph!r}")
    # every process and thread with slices is named
    named_p = {e["pid"] for e in by["M"] if e["name"] == "process_name"}
    named_t = {(e["pid"], e["tid"]) for e in by["M"] if e["name"] == "thread_name"}
    assert {e["pid"] for e in by["X"]} <= named_p
    assert {(e["pid"], e["tid"]) for e in by["X"]} <= named_t
    # flows: per (cat, id) one s first, one f last, t between, in time order; each binds to a slice
    flows = defaultdict(list)
    for ph in ("s", "t", "f"):
        for e in by[ph]:
            flows[(e["cat"], e["id"])].append(e)
    slices = defaultdict(list)
    for e in by["X"]:
        slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, evs in flows.items():
        evs.sort(key=lambda e: (e["ts"], "stf".index(e["ph"])))
        phs = [e["ph"] for e in evs]
        assert phs[0] == "s" and phs[-1] == "f" and set(phs[1:-1]) <= {"t"} and len(evs) >= 2, (key, phs)
        for e in evs:
            assert any(a <= e["ts"] <= b for a, b in slices[(e["pid"], e["tid"])]), e
    return by


def _load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


# ------------------------------------------------------------------------------------------


def test_default_choice_and_format(job16):
    truth, res = job16
    trace = tx.timeline(res)
    od = trace["otherData"]
    st = res.steps
    slowest = st.groupby("step")["step_ns"].median().idxmax()
    assert od["step"] == slowest
    comp = st.loc[st["step"] == slowest].set_index("rank")["computation_ns"].drop(index=truth["stragglers"])
    comp = comp.sort_values(kind="stable")
    roles = {t["rank"]: t["role"] for t in od["tracks"]}
    fastest, median = int(comp.index[0]), int(comp.index[(len(comp) - 1) // 2])
    assert {r: x for r, x in roles.items() if x != "peer"} == {5: "straggler", fastest: "fastest", median: "median"}
    # a rank of the straggler's process groups comes too when neither of the others is one (issue 19)
    groups5 = {r for g in truth["process_groups"] if 5 in g["ranks"] for r in g["ranks"]} - {5}
    peer = [r for r, x in roles.items() if x == "peer"]
    assert len(peer) == (0 if {fastest, median} & groups5 else 1) and set(peer) <= groups5
    by = check_chrome_trace(json.loads(tx.encode(trace, "t.json")))
    names = {e["pid"]: e["args"]["name"] for e in by["M"] if e["name"] == "process_name"}
    co = res.clock_offsets.set_index("rank")
    assert names[5] == f"rank 5 · host {co.loc[5, 'host']} · straggler"
    assert [e["args"]["sort_index"] for e in by["M"] if e["name"] == "process_sort_index" and e["pid"] == 5] == [0]
    # the straggler evidence: a process label and an instant event with the whole text
    ev = res.stragglers.set_index("rank").loc[5, "evidence"]
    assert [e["args"]["evidence"] for e in by["i"]] == [ev]
    (label,) = [e["args"]["labels"] for e in by["M"] if e["name"] == "process_labels"]
    said = label.split("): ", 1)[1]  # its first clause, never cut mid-word (issue 31)
    assert ev.startswith(said.rstrip("…")) and len(said) > 40
    assert ev[len(said)] in ";:" if not said.endswith("…") else ev[len(said) - 1] == " "
    # the wait at each collective: a counter per rank, up at the kernel's start, back to 0 at its end
    c = res.collectives
    for r in roles:
        waits = sorted(e["args"]["wait"] for e in by["C"] if e["pid"] == r and e["args"]["wait"] > 0)
        want = c.loc[(c["rank"] == r) & (c["step"] == slowest) & (c["wait_ns"] > 0), "wait_ns"] / 1000.0
        assert waits == pytest.approx(sorted(want.tolist()))


def test_readback_breakdown_equals_the_results(job16, tmp_path):
    _, res = job16
    trace = tx.timeline(res)
    path = tmp_path / "slow.json.gz"
    path.write_bytes(tx.encode(trace, str(path)))
    tf = detect(str(path)).read(str(path))  # dtrace's own Kineto reader
    tracks = {t["pid"]: t for t in trace["otherData"]["tracks"]}
    assert sorted(p.device for p in tf.parts) == sorted(tracks)
    step = trace["otherData"]["step"]
    st = res.steps.set_index(["rank", "device", "step"])
    for p in tf.parts:
        t = tracks[p.device]
        part = prepare(
            p.events.to_pandas(),
            p.collectives.to_pandas(),
            p.memcpy.to_pandas(),
            rank=t["rank"],
            device=p.device,
            fmt=tf.format,
            options=Options(),
        )
        got = breakdown(part).iloc[0]
        want = st.loc[(t["rank"], t["device"], step)]
        assert {c: int(got[c]) for c in BD} == {c: int(want[c]) for c in BD}, t
        assert int(got["gpu_events"]) == int(want["events"]) == t["gpu_events"]


def test_collectives_line_up_across_hosts(job16):
    truth, res = job16
    # TP group 0 (host 0) and rank 13, rank 5's data-parallel partner on host 1
    trace = tx.timeline(res, ranks=[0, 1, 2, 3, 4, 5, 6, 7, 13])
    by = check_chrome_trace(json.loads(tx.encode(trace, "t.json")))
    assert {t["rank"]: t["role"] for t in trace["otherData"]["tracks"]}[5] == "straggler"
    co = res.clock_offsets.set_index("rank")
    assert {t["rank"]: t["clock_offset_ns"] for t in trace["otherData"]["tracks"]} == {
        r: int(co.loc[r, "offset_ns"]) for r in [0, 1, 2, 3, 4, 5, 6, 7, 13]
    }
    kern = {(e["pid"], e["tid"], e["ts"]): e for e in by["X"]}
    flows = defaultdict(list)
    for ph in ("s", "t", "f"):
        for e in by[ph]:
            if e["cat"] == "collective":  # not the critical path's arrows
                flows[e["id"]].append(kern[(e["pid"], e["tid"], e["ts"])])
    assert len(flows) >= 5
    host_off = truth["host_clock_offsets_ns"]
    resid = int(co["residual_end_ns"].max())
    crossing = 0
    for members in flows.values():
        ranks = [m["args"]["rank"] for m in members]
        ends = np.array([round((m["ts"] + m["dur"]) * 1000) for m in members])  # ns on the exported axis
        # blocking collectives end together: within the residual clock error (+1.5 µs of end noise)
        assert ends.max() - ends.min() <= 2 * resid + 1_500, (ranks, ends - ends.min())
        # the last to arrive is where the arrow ends
        assert members[-1]["args"]["arrived last"] or len(members) < members[-1]["args"]["ranks in instance"]
        if 13 in ranks:
            crossing += 1
            raw = ends + np.array([host_off[r // 8] for r in ranks])  # what the traces' own clocks say
            assert raw.max() - raw.min() > 500_000
    assert crossing == 2  # the step's reduce-scatter and its final all-reduce (one layer)


def test_only_the_chosen_parts_are_read(job16, monkeypatch):
    _, res = job16
    read = []
    real_table, real_file = tx.pq.read_table, dtrace.ingest.cache.read_file

    def spy_table(path, *a, **kw):
        read.append(os.fspath(getattr(path, "name", path)))  # a path, or a file opened by open_regular
        return real_table(path, *a, **kw)

    def spy_file(path, *a, **kw):
        read.append(os.fspath(path))
        return real_file(path, *a, **kw)

    monkeypatch.setattr(tx.pq, "read_table", spy_table)
    monkeypatch.setattr(dtrace.ingest.cache, "read_file", spy_file)
    trace = tx.timeline(res, ranks=[5, 13])
    cache = res.manifest["cache"]
    events = [p for p in read if p.startswith(cache)]
    tables = [p for p in events if p.endswith(".parquet")]
    assert len(tables) == 2 * 3  # events, collectives and memcpy of each chosen part, nothing else
    assert len(events) - len(tables) == 2  # and the two entries' source.json
    chosen = {
        dtrace.ingest.cache.entry_dir(cache, i["path"]) for i in res.manifest["inputs"] if i["ranks"][0][0] in (5, 13)
    }
    assert {os.path.dirname(p) for p in events} == chosen
    assert [p for p in read if not p.startswith(cache)] == [os.path.join(res.path, "collectives.parquet")]
    assert [t["rank"] for t in trace["otherData"]["tracks"]] == [5, 13]


def test_window_host_threads_and_errors(job16, tmp_path):
    _, res = job16
    step_trace = tx.timeline(res, ranks=[5])
    lo, hi = step_trace["otherData"]["window_ns"]
    origin = step_trace["baseTimeNanoseconds"]
    # from 0.2 ms before the step's first GPU event (the host launches ahead) to 1 ms into it
    text = f"{(lo - origin) / 1e3 - 200:.3f}us:{(lo - origin) / 1e6 + 1:.6f}"
    w = tx.timeline(res, ranks=[5], window=text, host=True)
    a, b = lo - 200_000, lo + 1_000_000
    by = check_chrome_trace(json.loads(tx.encode(w, "t.json")))
    assert w["otherData"]["window_ns"] == [a, b] and w["otherData"]["step"] is None
    gpu = [e for e in by["X"] if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    host = [e for e in by["X"] if e["cat"] not in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert gpu and host and {e["cat"] for e in host} >= {"cpu_op", "cuda_runtime"}
    for e in gpu + host:  # every event overlaps the window (µs on the exported axis)
        assert e["ts"] <= (b - origin) / 1000 + 1e-6 and e["ts"] + e["dur"] >= (a - origin) / 1000 - 1e-6
    # the step's GPU events inside the window are all there
    inside = [
        e
        for e in step_trace["traceEvents"]
        if e["ph"] == "X"
        and e["cat"] != "critical path"
        and e["ts"] <= (b - origin) / 1000
        and e["ts"] + e["dur"] >= (a - origin) / 1000
    ]
    assert {(e["tid"], e["ts"]) for e in inside} <= {(e["tid"], e["ts"]) for e in gpu}
    names = {e["args"]["name"] for e in by["M"] if e["name"] == "thread_name"}
    assert any(n.startswith("host thread") for n in names) and any(n.startswith("stream") for n in names)
    with pytest.raises(UsageError, match="no rank 99"):
        tx.timeline(res, ranks=[99])
    with pytest.raises(UsageError, match="either a step or a window"):
        tx.timeline(res, step=1, window="1:2")
    with pytest.raises(UsageError, match="no step 9"):
        tx.timeline(res, step=9)
    with pytest.raises(UsageError, match="END must be after START"):
        tx.parse_window("5:2")
    with pytest.raises(UsageError, match="not a time"):
        tx.parse_window("a:2ms")
    assert tx.parse_window("1.5ms:2s") == (1_500_000, 2_000_000_000)


def test_cache_gone_is_a_clear_error(tmp_path):
    d = tmp_path / "j"
    synth.generate(d / "traces", ranks=8, steps=1, kernels_per_step=30)
    res = dtrace.analyze(str(d / "traces"), str(d / "out"), scheduler="sync")
    shutil.rmtree(res.manifest["cache"])
    with pytest.raises(DtraceError, match="changed since the analysis|not in the cache"):
        tx.timeline(dtrace.load(res.path))


def test_size_does_not_grow_with_the_job(job16, tmp_path_factory):
    _, res16 = job16
    _, res64 = _job(tmp_path_factory.mktemp("tl64"), 64)
    t16, t64 = tx.timeline(res16), tx.timeline(res64)
    n16 = [t["gpu_events"] for t in t16["otherData"]["tracks"]]
    n64 = [t["gpu_events"] for t in t64["otherData"]["tracks"]]
    # 3 tracks, or 4 with a peer of the straggler's groups; each track the same events
    assert len(n16) in (3, 4) and len(n64) in (3, 4) and set(n64) == set(n16) and len(set(n16)) == 1
    s16, s64 = len(tx.encode(t16, "x.json.gz")), len(tx.encode(t64, "x.json.gz"))
    assert s64 < 1.25 * s16 and s64 < 100_000


def test_cli_and_report_link(job16, tmp_path, capsys):
    _, res = job16
    out = tmp_path / "slow-step.json.gz"
    assert cli(["timeline", res.path, "-o", str(out), "--ranks", "5,13"]) == 0
    msg = capsys.readouterr().out
    assert str(out) in msg and "rank 5 (straggler)" in msg and "rank 13" in msg
    check_chrome_trace(_load(out))
    assert cli(["timeline", res.path, "-o", str(tmp_path / "w.json"), "--window", "1:3", "--host"]) == 0
    assert _load(tmp_path / "w.json")["otherData"]["step"] is None
    assert cli(["timeline", res.path, "-o", str(tmp_path / "x.json"), "--ranks", "5,x"]) == 2
    assert "not a rank" in capsys.readouterr().err
    html_path = tmp_path / "report.html"
    link = tmp_path / "linked.json.gz"
    assert cli(["report", res.path, "-o", str(html_path), "--timeline", str(link)]) == 0
    html = html_path.read_text()
    assert link.exists() and 'href="./linked.json.gz"' in html and 'id="whatif"' in html
    check_chrome_trace(_load(link))


# ------------------------------------------------------------------------------------------
# the report section and the trace in real browsers


def _save(name, png):
    os.makedirs(ARTIFACTS, exist_ok=True)
    with open(os.path.join(ARTIFACTS, name), "wb") as f:
        f.write(png)


def test_report_section(job16, tmp_path):
    _, res = job16
    html = report(res, timeline="slow-step.json.gz")
    sec = html.split('<section id="whatif">', 1)[1].split("</section>", 1)[0]
    scen = res.whatif["scenario"].unique().tolist()
    assert 'href="./slow-step.json.gz"' in sec and 'data-chart="whatif"' in sec
    assert all(s in sec for s in scen)
    order = [s.split('"')[0] for s in html.split('<section id="')[1:]]
    assert order[order.index("stragglers") + 1] == "whatif"
    keep = ("breakdown", "stragglers")
    bare = dtrace.results.Results({k: res.table(k) for k in keep}, dict(res.manifest, tables=list(keep)), None)
    no = report(bare).split('<section id="whatif">', 1)[1].split("</section>", 1)[0]
    assert "not available (table whatif absent)" in no and "dtrace timeline OUT" in no
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    ctx = Context(res)
    ctx.timeline = "slow-step.json.gz"
    path = tmp_path / "whatif.html"
    path.write_text(
        page("What if", "dtrace report section", [("whatif", "What if: estimated step time", section_whatif(ctx))]),
        encoding="utf-8",
    )
    run = browser.open_page(str(path), "document.querySelectorAll('svg .mark').length")
    assert run.problems == [] and run.value == 1 + len(scen)
    _save("whatif-section.png", run.png)


def test_trace_in_a_browser_trace_viewer(job16):
    """DevTools' Performance panel (bundled with Chromium) opens the exported trace offline."""
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    _, res = job16
    trace = tx.timeline(res, ranks=[0, 1, 2, 3, 4, 5, 6, 7, 13])
    data = tx.encode(trace, "t.json")
    # focus the flame chart (an empty spot), expand the straggler's process (the first track),
    # then rank 0's (below the straggler's four streams)
    run = _trace_viewer.open_trace(data, clicks=((700, 520), (252, 129), (252, 230)))
    assert run.problems == [], run.problems
    # the time ruler of the loaded step: the step is ~9 ms long
    assert "1\u00a0ms" in run.value and "8\u00a0ms" in run.value, run.value[:300]
    assert run.png[:8] == b"\x89PNG\r\n\x1a\n"
    _save("timeline-devtools.png", run.png)

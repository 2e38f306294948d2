"""The HTML report, the run comparison and the terminal renderer.

Reports are rendered for the 2-rank shared set, a generated 64-rank job and a 1,024-rank set of
small tables, opened in headless Chromium (console, exceptions, network, every chart present
and drawn) and screenshotted to ``test-artifacts/``. Numbers shown are checked against hand
calculations on the tables.
"""

import doctest
import glob
import json
import os
import re
from html.parser import HTMLParser

import browser
import numpy as np
import pandas as pd
import pytest
from testpaths import ROOT, shared

import dtrace
import dtrace.cli.report
import dtrace.explore.diff
import dtrace.render.charts
import dtrace.render.compare
import dtrace.render.html
import dtrace.render.sections
import dtrace.render.text
from dtrace.cli.main import main
from dtrace.render.compare import category_table, compare
from dtrace.render.html import SECTIONS, report
from dtrace.render.ranks import HEAT_ROWS
from dtrace.render.sections import merged_histogram
from dtrace.render.text import humanize, pick_unit, render, shorten
from dtrace.results import Results, write_results

ARTIFACTS = os.path.join(ROOT, "test-artifacts")
#: chart id -> the table it is drawn from
CHART_TABLES = {
    "breakdown": "breakdown",
    "classes": "classes",
    "step-heatmap": "steps",
    "wait-heatmap": "collectives",
    "stragglers": "stragglers",
    "top-kernels": "kernels",
    "gap-causes": "device_gaps",
    "gap-histogram": "device_gap_histogram",
    "collective-skew": "collectives",
    "collective-wait": "collectives",
    "ops": "ops",
    "bounds": "step_bounds",
    "launch-delays": "launch_histogram",
    "queue-length": "queue_timeline",
}
SECTION_TABLES = {
    "breakdown": "breakdown",
    "steps": "steps",
    "stragglers": "stragglers",
    "kernels": "kernels",
    "gaps": "device_gaps",
    "collectives": "collectives",
    "ops": "ops",
    "bounds": "step_bounds",
    "launches": "launch_histogram",
    "queues": "queue_timeline",
    "memory": "memory",
    "perf": "op_perf",
}

CHECK_JS = """(() => {
  const figs = Array.from(document.querySelectorAll('figure.chart'));
  return {
    ready: document.body.getAttribute('data-ready'),
    sections: Array.from(document.querySelectorAll('main > section')).map(s => s.id),
    na: Array.from(document.querySelectorAll('p.na')).map(p => p.closest('section').id + ': ' + p.textContent),
    sortable: document.querySelectorAll('table[data-sortable=ready]').length,
    tables: document.querySelectorAll('table.sortable').length,
    charts: figs.map(f => {
      const svg = f.querySelector('svg');
      const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
      const marks = Array.from(f.querySelectorAll('svg .mark'));
      const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 && b.height > 0; }).length;
      return {id: f.getAttribute('data-chart'), width: box.width, height: box.height,
              marks: marks.length, drawn: drawn};
    }),
  };
})()"""


def _need_chromium():
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")


def _save(name: str, png: bytes) -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    with open(path, "wb") as f:
        f.write(png)
    return path


def open_report(html: str, tmp_path, shot: str) -> browser.PageRun:
    """Write ``html``, open it in Chromium, check the page-level contract, save the screenshot."""
    _need_chromium()
    path = tmp_path / f"{shot}.html"
    path.write_text(html, encoding="utf-8")
    run = browser.open_page(str(path), CHECK_JS)
    assert run.problems == [], run.problems  # no console output, exceptions or errors
    assert all(u.startswith(("file://", "data:", "about:")) for u in run.requests), run.requests  # offline
    v = run.value
    assert v["ready"] == "1"  # the inline script ran to its end
    assert v["tables"] > 0 and v["sortable"] == v["tables"]
    assert run.png[:8] == b"\x89PNG\r\n\x1a\n" and run.size[1] > 1000
    _save(f"{shot}.png", run.png)
    return run


def check_charts(run: browser.PageRun, results: Results) -> dict[str, dict]:
    """Every chart whose table exists is present, sized and drawn; every other says why not."""
    charts = {c["id"]: c for c in run.value["charts"]}
    for c in charts.values():
        assert c["width"] > 100 and c["height"] > 20, c
        assert c["marks"] > 0 and c["drawn"] == c["marks"], c
    names = set(results.table_names)
    for chart, table in CHART_TABLES.items():
        if table in names:
            assert chart in charts, (chart, sorted(charts))
    for section, table in SECTION_TABLES.items():
        if table not in names:
            assert any(n.startswith(f"{section}: ") and f"table {table} absent" in n for n in run.value["na"]), (
                section,
                run.value["na"],
            )
    return charts


# ------------------------------------------------------------------------------------------
# inputs


@pytest.fixture(scope="module")
def two_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("r2") / "results"
    return dtrace.analyze(shared("kineto", "hta-2rank"), str(out), scheduler="sync")


@pytest.fixture(scope="module")
def job64(tmp_path_factory):
    from dtrace.generate import synth

    d = tmp_path_factory.mktemp("job64")
    truth = synth.generate(
        d / "traces", ranks=64, steps=3, seed=0, kernels_per_step=20, faults=["compute:rank=37:slow=0.3"]
    )
    files = sorted(glob.glob(str(d / "traces" / "rank-*.json*")))
    assert len(files) == 64
    res = dtrace.analyze(files, str(d / "results"), scheduler="sync")
    return res, truth


def fake_job(n: int = 1024, steps: int = 5, straggler: int = 37, seed: int = 0) -> Results:
    """Small per-rank tables of an n-rank job (every table of SPEC §5), built with numpy."""
    rng = np.random.default_rng(seed)
    rank = np.arange(n, dtype=np.int32)
    dev = (rank % 8).astype(np.int32)
    comp = rng.normal(30e6, 3e5, n).astype(np.int64)
    comp[straggler] = int(comp[straggler] * 1.25)
    ecomm = rng.normal(8e6, 2e5, n).astype(np.int64)
    ecomm[straggler] = 1_000_000
    emem = rng.normal(3e5, 1e4, n).astype(np.int64)
    idle = rng.normal(4e6, 1e5, n).astype(np.int64)
    busy = comp + ecomm + emem
    bd = pd.DataFrame(
        {
            "rank": rank,
            "device": dev,
            "computation_ns": comp,
            "exposed_comm_ns": ecomm,
            "exposed_memcpy_ns": emem,
            "busy_ns": busy,
            "idle_ns": idle,
            "total_ns": busy + idle,
            "comm_ns": ecomm * 3,
            "memcpy_ns": emem * 2,
        }
    )
    rs, ss = np.repeat(rank, steps), np.tile(np.arange(steps), n)
    step_ns = rng.normal(10e6, 1e5, n * steps).astype(np.int64)
    step_ns[rs == straggler] += 2_000_000
    st = pd.DataFrame({"rank": rs, "device": rs % 8, "step": ss, "step_ns": step_ns})
    names = [
        "sm90_xmma_gemm_bf16",
        "flash_fwd_kernel",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        "vectorized_elementwise_kernel",
        "layer_norm_kernel",
    ]
    classes = ["gemm", "attention", "nccl_allreduce", "elementwise", "normalization"]
    kr = np.repeat(rank, len(names))
    ktot = rng.integers(1_000_000, 9_000_000, len(kr))
    kern = pd.DataFrame(
        {
            "rank": kr,
            "device": kr % 8,
            "name": np.tile(names, n),
            "class": np.tile(classes, n),
            "category": np.tile(["compute", "compute", "comm", "compute", "compute"], n),
            "count": np.full(len(kr), 12),
            "total_ns": ktot,
        }
    )
    cls = kern.groupby(["rank", "device", "class"], as_index=False)[["count", "total_ns"]].sum()
    gr = np.repeat(rank, 2)
    gaps = pd.DataFrame(
        {
            "rank": gr,
            "device": gr % 8,
            "stream": np.tile([7, 20], n),
            "gaps": 50,
            "host_wait_ns": rng.integers(1e5, 1e6, 2 * n),
            "kernel_wait_ns": rng.integers(1e4, 1e5, 2 * n),
            "other_ns": rng.integers(1e5, 5e5, 2 * n),
        }
    )
    gaps["idle_ns"] = gaps["host_wait_ns"] + gaps["kernel_wait_ns"] + gaps["other_ns"]
    dgaps = pd.DataFrame(
        {
            "rank": rank,
            "device": dev,
            "gaps": 30,
            "host_wait_ns": rng.integers(1e4, 1e5, n),
            "kernel_wait_ns": rng.integers(1e3, 1e4, n),
        }
    )
    dgaps["other_ns"] = idle - dgaps["host_wait_ns"] - dgaps["kernel_wait_ns"]
    dgaps["idle_ns"] = idle
    edges = np.geomspace(1e3, 1e7, 11)
    hr = np.repeat(gr, 10)
    hist = pd.DataFrame(
        {
            "rank": hr,
            "device": hr % 8,
            "stream": np.repeat(gaps["stream"].to_numpy(), 10),
            "bin": np.tile(np.arange(10), 2 * n),
            "lo_ns": np.tile(edges[:-1], 2 * n),
            "hi_ns": np.tile(edges[1:], 2 * n),
            "count": rng.integers(0, 20, 20 * n),
        }
    )
    dr = np.repeat(rank, 10)
    dhist = pd.DataFrame(
        {
            "rank": dr,
            "device": dr % 8,
            "bin": np.tile(np.arange(10), n),
            "lo_ns": np.tile(edges[:-1], n),
            "hi_ns": np.tile(edges[1:], n),
            "count": rng.integers(0, 10, 10 * n),
        }
    )
    tr = pd.DataFrame(
        {
            "rank": gr,
            "device": gr % 8,
            "stream": gaps["stream"],
            "prev_name": names[0],
            "next_name": names[3],
            "count": 10,
            "mean_ns": 5000.0,
            "min_ns": 1000,
            "max_ns": 9000,
            "std_ns": 100.0,
        }
    )
    # collectives: tensor-parallel groups of 8 consecutive ranks, 4 all-reduces each
    inst = n // 8 * 4
    cid = np.repeat(np.arange(inst), 8)
    crank = (np.repeat(np.arange(n // 8), 4 * 8) * 8 + np.tile(np.arange(8), inst)).astype(np.int32)
    start = np.repeat(np.arange(inst) * 1_000_000, 8) + rng.integers(0, 50_000, len(cid))
    start[crank == straggler] += 400_000
    last_start = pd.Series(start).groupby(cid).transform("max").to_numpy()
    coll = pd.DataFrame(
        {
            "collective": cid,
            "rank": crank,
            "device": crank % 8,
            "group": (crank // 8).astype(str),
            "op": "all_reduce",
            "bytes": 1 << 24,
            "start_ns": start,
            "end_ns": last_start + 200_000,
            "wait_ns": last_start - start,
        }
    )
    ranks = bd[["rank", "device"]].copy()
    for m in ("computation_ns", "exposed_comm_ns", "idle_ns"):
        x = bd[m].to_numpy(np.float64)
        mad = np.median(np.abs(x - np.median(x)))
        ranks[m] = bd[m]
        ranks[f"{m}_z"] = (x - np.median(x)) / (1.4826 * mad)
    score = np.abs(ranks["computation_ns_z"].to_numpy()) / 10
    sg = pd.DataFrame(
        {
            "rank": rank,
            "device": dev,
            "score": score,
            "flagged": rank == straggler,
            "evidence": [f"rank {r} evidence text" for r in rank],
        }
    ).sort_values("score", ascending=False)
    opr = np.repeat(rank, 3)
    ops = pd.DataFrame(
        {
            "rank": opr,
            "device": opr % 8,
            "op": np.tile(["aten::mm", "aten::linear", "aten::add"], n),
            "count": 10,
            "gpu_direct_ns": np.tile([5_000_000, 0, 100_000], n),
            "gpu_subtree_ns": np.tile([5_000_000, 5_000_000, 100_000], n),
        }
    )
    tables = {
        "breakdown": bd,
        "steps": st,
        "kernels": kern,
        "classes": cls,
        "gaps": gaps,
        "gap_histogram": hist,
        "device_gaps": dgaps,
        "device_gap_histogram": dhist,
        "transitions": tr,
        "collectives": coll,
        "ranks": ranks,
        "stragglers": sg,
        "ops": ops,
    }
    inputs = [
        {
            "path": f"/traces/rank-{r}.json.gz",
            "format": "kineto",
            "status": "ok",
            "error": None,
            "ranks": [[int(r), int(r % 8)]],
            "events": 1000,
        }
        for r in range(n)
    ]
    return Results(tables, {"inputs": inputs, "n_inputs": n, "n_parts": n, "seconds": 1.0, "workers": 2})


class _Marks(HTMLParser):
    """Counts ``.mark`` elements and heatmap rows per chart in a report string."""

    def __init__(self) -> None:
        super().__init__()
        self.chart: str | None = None
        self.marks: dict[str, int] = {}
        self.ys: dict[str, set] = {}
        self.titles: dict[str, list[str]] = {}
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure" and "data-chart" in a:
            self.chart = a["data-chart"]
            self.marks.setdefault(self.chart, 0)
            self.ys.setdefault(self.chart, set())
            self.titles.setdefault(self.chart, [])
        elif self.chart and "mark" in (a.get("class") or "").split():
            self.marks[self.chart] += 1
            self.ys[self.chart].add(a.get("y"))
        elif self.chart and tag == "title":
            self._in_title = True

    def handle_endtag(self, tag):
        if tag == "figure":
            self.chart = None
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title and self.chart:
            self.titles[self.chart].append(data)


def parse_marks(html: str) -> _Marks:
    p = _Marks()
    p.feed(html)
    return p


# ------------------------------------------------------------------------------------------
# the browser harness itself


def test_browser_harness_catches_errors(tmp_path):
    _need_chromium()
    page = tmp_path / "bad.html"
    page.write_text(
        "<html><body><script>console.error('boom'); undefinedFunction();</script>"
        "<img src='https://example.invalid/x.png'></body></html>"
    )
    run = browser.open_page(str(page), "1 + 1")
    assert run.value == 2
    assert any("boom" in c for c in run.console)
    assert any("undefinedFunction" in e for e in run.exceptions)
    assert any(u.startswith("https://example.invalid") for u in run.requests)


# ------------------------------------------------------------------------------------------
# the report in a browser


def test_report_two_rank_shared_set(two_rank, tmp_path):
    html = report(two_rank)
    assert "<script src" not in html and "<link" not in html and not re.search(r"(src|href)=\"https?:", html)
    run = open_report(html, tmp_path, "report-2rank")
    charts = check_charts(run, two_rank)
    assert {"breakdown", "classes", "step-heatmap", "top-kernels"} <= set(charts)
    assert run.value["sections"] == [s for s, _, _ in SECTIONS]
    # breakdown bars: one per rank and component; tooltips carry the table's values (hand-formatted)
    bd = two_rank.breakdown.sort_values("rank")
    assert charts["breakdown"]["marks"] == int(
        (bd[["computation_ns", "exposed_comm_ns", "exposed_memcpy_ns", "idle_ns"]] > 0).to_numpy().sum()
    )
    tips = parse_marks(html).titles["breakdown"]
    for row in bd.itertuples():
        ms = row.computation_ns / 1e6
        share = 100 * row.computation_ns / row.total_ns
        text = f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.1f} ms"
        assert f"rank {row.rank} · computation: {text} ({share:.1f} %)" in tips
    # the heatmap has one cell per (rank, step)
    assert charts["step-heatmap"]["marks"] == len(two_rank.steps)


def test_report_generated_64_ranks(job64, tmp_path):
    res, truth = job64
    html = report(res)
    run = open_report(html, tmp_path, "report-64rank")
    charts = check_charts(run, res)
    marks = parse_marks(html)
    labels = {t.split(" · ")[0].lstrip("⚑ ") for t in marks.titles["breakdown"]}
    assert labels == {f"rank {r}" for r in range(64)}  # 64 GPUs: every one drawn
    assert charts["step-heatmap"]["marks"] == 64 * 3
    if "stragglers" in res.table_names:  # flagged ranks are marked in the charts
        flagged = res.stragglers.loc[res.stragglers["flagged"].astype(bool), "rank"].tolist()
        for r in flagged:
            assert f"⚑ rank {r}<" in html
    assert len(html) < 2_000_000


CLIPPED_JS = """Array.from(document.querySelectorAll('.tablewrap'))
  .filter(w => w.scrollWidth > w.clientWidth + 1)
  .map(w => [w.closest('section').id, w.clientWidth, w.scrollWidth])"""


@pytest.mark.parametrize("which", ["two_rank", "job64"])
def test_report_tables_fit_a_1400_px_window(which, request, tmp_path):
    """Issue 31: report tables were clipped (scrolled sideways) in a 1,400 px window: the page
    was 1,180 px wide and headers never wrapped. No table scrolls sideways at 1,400 px."""
    _need_chromium()
    res = request.getfixturevalue(which)
    res = res[0] if isinstance(res, tuple) else res
    path = tmp_path / "r.html"
    path.write_text(report(res), encoding="utf-8")
    run = browser.open_page(str(path), CLIPPED_JS, window=(1400, 900))
    assert run.problems == [] and run.value == [], run.value


def test_report_1024_ranks_aggregates(tmp_path):
    res = fake_job(1024)
    html = report(res)
    marks = parse_marks(html)
    # per-GPU bar charts show at most max_bars GPUs (4 segments each), the straggler among them
    assert 0 < marks.marks["breakdown"] <= 64 * 4
    labels = {t.split(" · ")[0] for t in marks.titles["breakdown"]}
    assert len(labels) == 64 and "rank 37" in labels and "⚑ rank 37<" in html
    assert "Showing 64 of 1024 GPUs" in html
    for dist in ("breakdown-dist", "classes-dist", "gap-causes-dist", "collective-wait-dist"):
        assert marks.marks[dist] > 0
    # heatmaps pool ranks into at most HEAT_ROWS rows
    assert 0 < len(marks.ys["step-heatmap"]) <= HEAT_ROWS
    assert marks.marks["step-heatmap"] == len(marks.ys["step-heatmap"]) * 5
    assert 0 < len(marks.ys["wait-heatmap"]) <= HEAT_ROWS
    # the slowest rank of its bucket is named: rank 37 holds the largest step time of ranks 32–39
    assert any(t.startswith("rank 37 · step 0") for t in marks.titles["step-heatmap"])
    # collective wait: rank 37 arrives last in every instance of its group and waits least
    wait = res.collectives.groupby("rank")["wait_ns"].sum()
    assert wait.idxmin() == 37
    assert any(
        t.startswith("rank 37: waited") and "arrived last at 4 of 4" in t for t in marks.titles["collective-wait"]
    )
    assert len(html) < 3_000_000
    run = open_report(html, tmp_path, "report-1024rank")
    check_charts(run, res)


def test_sections_say_what_is_missing():
    bd = fake_job(8, straggler=3).breakdown
    html = report(Results({"breakdown": bd}, {}))
    for table in (
        "steps",
        "stragglers",
        "kernels",
        "gaps",
        "device_gaps",
        "collectives",
        "ops",
        "device_gap_histogram",
        "transitions",
        "ranks",
        "step_bounds",
        "launch_histogram",
        "queue_timeline",
        "memory",
    ):
        assert f"not available (table {table} absent)" in html, table
    assert 'data-chart="breakdown"' in html
    empty = report(Results({}, {}))
    assert "not available (table breakdown absent)" in empty


def test_host_sections_of_the_h200_recording():
    """Kernel launches, launch queues and device memory of a real trace with memory events: one
    heatmap row per GPU and one cell per delay bin, the queue of the slowest step, memory over time."""
    path = os.path.join(ROOT, "tests", "data", "h200", "host_rank0.pt.trace.json.gz")
    res = dtrace.analyze(path, scheduler="sync")
    html = report(res)
    marks = parse_marks(html)
    h = res.launch_histogram
    assert marks.marks["launch-delays"] == len(h)  # one GPU: a cell per non-empty bin
    ls = res.launch_stats
    assert f">{int(ls['launches'].sum()):,}</div>" in html
    short = 100 * ls["short_kernels"].sum() / ls["launches"].sum()
    assert f'>{short:.1f} %</div><div class="k">launch-bound' in html
    # the slowest step by GPU span is step 3 (tests/data/h200/host_steps.json: launch-bound)
    slow = res.steps.sort_values("step_ns").iloc[-1]
    q = res.queue_timeline
    bins = q.loc[q["step"] == slow["step"]]
    assert marks.marks["queue-length"] == len(bins) and f"step {int(slow['step'])}" in html
    assert all(t.startswith("stream 7 · ") for t in marks.titles["queue-length"])
    assert marks.marks["memory-timeline"] == len(res.memory_timeline)
    assert "rank 0 (median)" in html and "aten::mul" in html  # the op at the peak


def test_host_sections_in_a_browser(tmp_path):
    res = dtrace.analyze(os.path.join(ROOT, "tests", "data", "h200", "host_rank0.pt.trace.json.gz"), scheduler="sync")
    run = open_report(report(res), tmp_path, "report-h200-host")
    charts = {c["id"]: c for c in run.value["charts"]}
    for chart in ("launch-delays", "queue-length", "memory-timeline"):
        c = charts[chart]
        assert c["width"] > 100 and c["height"] > 20 and c["marks"] > 0 and c["drawn"] == c["marks"], c


def test_summary_numbers_by_hand():
    res = fake_job(16, straggler=3)
    html = report(res)
    bd = res.breakdown
    comp_share = 100 * bd["computation_ns"].sum() / bd["total_ns"].sum()
    assert f'>{comp_share:.1f} %</div><div class="k">computation (all GPUs)' in html
    med = np.median(res.steps["step_ns"]) / 1e6
    assert f'>{med:.1f} ms</div><div class="k">median step time' in html
    # one flagged straggler (rank 3): the card's figure is the count, the rank is shown as an id
    assert '>1</div><div class="k">flagged stragglers (of 16 GPUs)</div><div class="ids">rank 3</div>' in html


def test_gap_histogram_merges_only_equal_bins():
    same = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "device": [0, 0, 1, 1],
            "stream": 7,
            "lo_ns": [0, 50, 0, 50],
            "hi_ns": [50, 100, 50, 100],
            "count": [1, 2, 3, 4],
        }
    )
    lo, hi, c, which = merged_histogram(same, "lo_ns", "hi_ns", "count")
    assert (lo.tolist(), hi.tolist(), c.tolist(), which) == ([0, 50], [50, 100], [4, 6], None)
    # rank 1 used other bins and has more gaps (3 + 4 + 5 > 1 + 2): its own histogram is shown
    diff = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1, 1],
            "device": [0, 0, 1, 1, 1],
            "lo_ns": [0, 50, 0, 20, 40],
            "hi_ns": [50, 100, 20, 40, 60],
            "count": [1, 2, 3, 4, 5],
        }
    )
    lo, hi, c, which = merged_histogram(diff, "lo_ns", "hi_ns", "count")
    assert (lo.tolist(), c.tolist(), which) == ([0, 20, 40], [3, 4, 5], (1, 1))
    html = report(Results({"device_gap_histogram": diff}, {}))
    assert "this is rank 1, the GPU with the most gaps (12 device gaps in 3 bins)" in html


# ------------------------------------------------------------------------------------------
# CLI: report, compare


def test_cli_report_writes_file(two_rank, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", two_rank.path, "-o", str(out), "--title", "my job"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "<title>my job</title>" in text and text.rstrip().endswith("</html>")
    assert oct(os.stat(out).st_mode & 0o777) != oct(0o600)
    assert main(["report", str(tmp_path / "nope"), "-o", str(tmp_path / "x.html")]) == 2
    assert "not a dtrace results directory" in capsys.readouterr().err


def test_compare_two_runs(two_rank, tmp_path):
    fake = fake_job(8, straggler=3)
    b_dir = str(tmp_path / "b")
    write_results(b_dir, {n: fake.table(n) for n in fake.table_names}, {"inputs": fake.manifest["inputs"]})
    out, csv = tmp_path / "c.html", tmp_path / "cat.csv"
    rc = main(
        [
            "compare",
            two_rank.path,
            b_dir,
            "--label",
            "base",
            "--label",
            "new",
            "-o",
            str(out),
            "--wall-time",
            "base=2.5",
            "--wall-time",
            "2=0.06",
            "--category-csv",
            str(csv),
        ]
    )
    assert rc == 0
    html = out.read_text(encoding="utf-8")
    cat = pd.read_csv(csv)
    assert list(cat.columns) == ["run", "category", "name", "count", "total_ns", "per_gpu_ns", "gpus"]
    for label, res in (("base", two_rank), ("new", dtrace.load(b_dir))):
        k = res.kernels
        mine = cat.loc[cat["run"] == label].groupby("category")["total_ns"].sum()
        ref = k.groupby(k["class"].astype(str))["total_ns"].sum()
        pd.testing.assert_series_equal(mine.sort_index(), ref.sort_index(), check_names=False)
    # non-GPU = wall − mean busy time per GPU (breakdown chart), by hand
    non_gpu = 2.5e9 - two_rank.breakdown["busy_ns"].mean()
    assert 1e9 <= non_gpu < 1e10
    tips = parse_marks(html).titles["compare-breakdown"]
    assert any(t.startswith(f"base · non-GPU: {non_gpu / 1e9:.2f} s (") for t in tips), tips
    # the category chart: the same non-GPU (one value per run, issue 19)
    tips = parse_marks(html).titles["compare-categories"]
    assert any(t.startswith(f"base · non-GPU: {non_gpu / 1e9:.2f} s (") for t in tips), tips
    _need_chromium()
    run = browser.open_page(str(out), CHECK_JS)
    assert run.problems == [] and run.value["ready"] == "1"
    assert {c["id"] for c in run.value["charts"]} == {"compare-breakdown", "compare-categories"}
    assert all(c["drawn"] == c["marks"] > 0 for c in run.value["charts"])
    _save("compare.png", run.png)


def test_compare_with_regex_classmap(two_rank):
    from dtrace.knowledge.classify import load_classmap

    path = shared("classmaps", "vllm_engine_model.json")
    clf = load_classmap(path, "vllm", "llama")
    cat = category_table([("a", two_rank)], clf)
    with open(path) as f:
        allowed = set(json.load(f)["vllm"]["llama"].values()) | {"misc"}
    assert set(cat["category"]) <= allowed
    # first match wins, case-sensitive re.search, in file order: recompute by hand for every name
    with open(path) as f:
        rules = [(re.compile(p), c) for p, c in json.load(f)["vllm"]["llama"].items()]
    k = two_rank.kernels.drop_duplicates("name").set_index("name")
    for name, got in zip(cat["name"], cat["category"]):
        if k.loc[name, "kind"] == "kernel":
            want = next((c for rx, c in rules if rx.search(name)), "misc")
            assert got == want, name
    assert cat["total_ns"].sum() == two_rank.kernels["total_ns"].sum()


def test_compare_rejects_bad_wall_time(two_rank, tmp_path):
    assert main(["compare", two_rank.path, "-o", str(tmp_path / "c.html"), "--wall-time", "zzz=3"]) == 2
    assert main(["compare", two_rank.path, "-o", str(tmp_path / "c.html"), "--wall-time", "1=abc"]) == 2
    with pytest.raises(dtrace.UsageError, match="unknown run"):
        compare([("a", two_rank)], wall_time_s={"b": 1.0})


# ------------------------------------------------------------------------------------------
# terminal output


def test_render_formats_by_hand():
    df = pd.DataFrame(
        {
            "rank": [0, 1, 2],
            "name": ["a|b", "x", "y"],
            "idle_ns": [1_500_000, 2_000_000, 2_500_000],
            "time_share": [0.25, 0.5, 0.125],
            "flagged": [True, False, False],
        }
    )
    md = render(df, "markdown", title="t", max_rows=2)
    assert "| rank | name | idle (ms) | time share (%) | flagged |" in md
    assert "| 0 | a\\|b | 1.5 | 25 | yes |" in md and "| 1 | x | 2 | 50 | no |" in md
    assert "1 more rows not shown (showing 2 of 3;" in md
    table = render(df, "table", title="t", width=120)
    assert "idle (ms)" in table and "1.5" in table and "2.5" in table and "12.5" in table
    assert json.loads(render(df, "json"))[0] == {
        "rank": 0,
        "name": "a|b",
        "idle_ns": 1500000,
        "time_share": 0.25,
        "flagged": True,
    }
    assert render(df, "csv").splitlines()[1] == "0,a|b,1500000,0.25,True"
    with pytest.raises(ValueError, match="valid: table, csv, json, markdown"):
        render(df, "xml")


def test_units_and_names():
    assert pick_unit(np.array([999])) == ("ns", 1.0)
    assert pick_unit(np.array([1_000, 5_000])) == ("µs", 1e3)
    assert pick_unit(np.array([0, 3e9])) == ("s", 1e9)
    h = humanize(pd.DataFrame({"a_ns": [1_000_000, 3_000_000], "b_ns": [2_000, 4_000]}), "auto")
    # one unit for both: the median of all their values (2 µs … 3 ms → 502 µs) is in µs
    assert list(h.columns) == ["a (µs)", "b (µs)"] and h["a (µs)"].tolist() == [1000, 3000]
    h = humanize(pd.DataFrame({"a_ns": [1_000_000], "b_ns": [2_000]}))
    assert list(h.columns) == ["a (ms)", "b (µs)"]
    assert shorten("void f<int, float>(int*, float)", 10) == "f<…>(…)"


def test_show_uses_readable_units(two_rank, capsys):
    assert main(["show", two_rank.path, "breakdown", "--fmt", "markdown"]) == 0
    out = capsys.readouterr().out
    bd = two_rank.breakdown.sort_values("rank")
    assert "computation (ms)" in out and "total (s)" in out
    assert f"{bd['computation_ns'].iloc[0] / 1e6:.3f}".rstrip("0").rstrip(".") in out
    assert main(["show", two_rank.path, "kernels", "--top", "3", "--fmt", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 3 and "total_ns" in rows[0]


def test_docstring_examples_run():
    for mod in (
        dtrace.render.charts,
        dtrace.render.text,
        dtrace.render.sections,
        dtrace.render.compare,
        dtrace.explore.diff,
        dtrace.cli.report,
    ):
        failed, attempted = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert failed == 0, mod.__name__


def test_op_outliers_list_compute_ops_before_the_waiting_ranks_collectives():
    """Issue 31: seven ``c10d::allreduce_`` rows of the waiting ranks stood above the slow rank's
    ``aten::mm``: a collective's time includes waiting for the straggler."""
    import types

    import pandas as pd

    from dtrace.render.sections import _op_outliers

    oo = pd.DataFrame(
        {
            "rank": [1, 2, 5],
            "device": [1, 2, 5],
            "op": ["c10d::allreduce_", "c10d::allreduce_", "aten::mm"],
            "gpu_ns": [9_000_000, 8_000_000, 2_000_000],
            "median_gpu_ns": [1_000_000, 1_000_000, 1_000_000],
            "ratio": [9.0, 8.0, 2.0],
            "excess_ns": [8_000_000, 7_000_000, 1_000_000],
            "comm": [True, True, False],
        }
    )
    ctx = types.SimpleNamespace(labels=lambda df: [f"rank {r}" for r in df["rank"]], flagged={5})
    html = _op_outliers(ctx, oo)
    assert html.index("aten::mm") < html.index("c10d::allreduce_")

"""The report must not mislead where one looks (issue 14): the flagged-stragglers card is a count
with the rank ids shown as ids, the heatmap captions describe the colours and what a slow rank
really looks like, the straggler is marked where the charts show it, stream gaps are not sold as
GPU idle time. Expected values come from the tables built here."""

import re
from html import unescape

import numpy as np
from test_report import fake_job

from dtrace.render.context import Context
from dtrace.render.html import report
from dtrace.render.ranks import MIN_STEP_SPAN, section_stragglers, step_colour_range
from dtrace.render.sections import section_gaps, section_summary
from dtrace.results import Results

UNITS = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}


def card(html, label):
    m = re.search(
        r'<div class="v">([^<]*)</div><div class="k">' + re.escape(label) + r"[^<]*</div>"
        r'(?:<div class="ids">([^<]*)</div>)?',
        html,
    )
    assert m, label
    return unescape(m.group(1)), unescape(m.group(2) or "")


def test_flagged_card_is_a_count_with_ids():
    res = fake_job(1024, straggler=137)
    flagged = res.stragglers.loc[res.stragglers["flagged"], "rank"].tolist()
    assert flagged == [137]
    value, ids = card(section_summary(Context(res)), "flagged stragglers")
    assert value == "1" and ids == "rank 137"  # not "137" as the big figure
    many = res.stragglers.assign(flagged=res.stragglers["rank"].isin([3, 5, 7, 9, 11, 13, 15, 17]))
    value, ids = card(
        section_summary(Context(Results({**res._tables, "stragglers": many}, res.manifest))), "flagged stragglers"
    )
    assert value == "8" and ids == "rank 3, rank 5, rank 7, rank 9, rank 11, rank 13, … (2 more)"
    value, ids = card(
        section_summary(Context(Results({**res._tables, "stragglers": many.assign(flagged=False)}, res.manifest))),
        "flagged stragglers",
    )
    assert value == "0" and ids == ""


def heat_legend(html, chart):
    fig = re.search(r'<figure class="chart" data-chart="' + chart + r'">.*?</figure>', html, re.S).group(0)
    lo, lo_u, hi, hi_u = re.search(
        r">([\d.,]+)(?: (s|ms|µs|ns))? \(dark\)<.*?>([\d.,]+)(?: (s|ms|µs|ns))? "
        r"\(yellow\)<",
        fig,
        re.S,
    ).groups()
    return fig, float(lo.replace(",", "")) * UNITS[lo_u or "ns"], float(hi.replace(",", "")) * UNITS[hi_u or "ns"]


def test_step_heatmap_caption_and_scale():
    # a synchronised job: every rank's step takes as long as the slowest rank's, within 1 %
    res = fake_job(64, steps=4, straggler=5)
    rng = np.random.default_rng(0)
    st = res.steps.assign(step_ns=(15_700_000 * (1 + rng.uniform(-0.005, 0.005, len(res.steps)))).astype(np.int64))
    sync = Results({**res._tables, "steps": st}, res.manifest)
    html = report(sync)
    assert "slow rank shows as a bright row" not in html
    fig, lo, hi = heat_legend(html, "step-heatmap")
    med = float(np.median(st["step_ns"]))
    assert hi - lo >= MIN_STEP_SPAN * med * 0.99  # 1 % noise does not fill the colour scale
    assert lo <= st["step_ns"].min() and hi >= st["step_ns"].max()
    text = unescape(re.sub(r"<[^>]+>", " ", html))
    assert "dark purple = shorter, yellow = longer" in text
    assert "a slow rank does not stand out here" in text and "waits least" in text
    assert "⚑ rank 5" in fig  # the flagged straggler's row is marked


def test_step_colour_range_by_hand():
    lo, hi, spread = step_colour_range(np.array([[100.0, 130.0], [110.0, np.nan]]))
    assert (lo, hi) == (100.0, 130.0) and spread == 30.0 / 110.0  # wide data keeps its own range
    lo, hi, spread = step_colour_range(np.array([[100.0, 101.0]]))
    assert (round(lo, 6), round(hi, 6)) == (95.475, 105.525)  # widened to 10 % of the median 100.5


def test_wait_heatmap_marks_the_straggler_at_1024_ranks():
    res = fake_job(1024, straggler=137)
    html = report(res)
    fig, lo, hi = heat_legend(html, "wait-heatmap")
    co = res.collectives
    wait = co.groupby("rank")["wait_ns"].sum()
    assert wait.idxmin() == 137 and lo == 0  # the straggler waits least: the dark end
    assert "⚑ ranks 136–143" in fig  # pooled rows of 8: the bucket holding rank 137


def test_flagged_first_and_highlights_kept():
    res = fake_job(64, straggler=5)
    html = section_stragglers(Context(res))
    table = html.split("Rank comparison")[1]
    first = re.search(r"<tbody><tr( class=flag)?><td>([^<]*)</td>", table)
    assert first.group(1) and first.group(2) == "rank 5"
    css = report(res)
    assert "table.data tr.flag td.hot" in css and "table.data tr.flag td.cold" in css


def test_stream_gaps_are_not_called_gpu_idle():
    res = fake_job(16, straggler=3)
    bd = res.breakdown.assign(idle_ns=1_000)  # the GPUs are hardly idle
    html = unescape(section_gaps(Context(Results({**res._tables, "breakdown": bd}, res.manifest))))
    summed = res.gaps.groupby(["rank", "device"])["idle_ns"].sum().median()
    assert "not as GPU idle time" in html and "idle for 1.00 µs (median" in html
    value, unit = re.search(r"stream gaps add up to ([\d.,]+) (s|ms|µs)", html).groups()
    assert float(value) * UNITS[unit] == pytest_approx(summed)
    html = unescape(section_gaps(Context(res)))  # idle larger than the gaps: no such note
    assert "not as GPU idle time" not in html


def pytest_approx(x):
    import pytest

    return pytest.approx(x, rel=5e-3)


def test_compare_categories_never_share_the_non_gpu_colour():
    from dtrace.render.compare import compare

    res = fake_job(16, straggler=3)
    many = res.kernels.assign(**{"class": [f"class_{i % 12}" for i in range(len(res.kernels))]})
    run = Results({**res._tables, "kernels": many}, res.manifest)
    html = compare([("a", run), ("b", run)], wall_time_s={"a": 1.0, "b": 1.0})
    fig = re.search(r'data-chart="compare-categories">(.*?)</figure>', html, re.S).group(1)
    legend = re.findall(r'<i style="background:(#[0-9a-f]{6})"></i>([^<]*)</span>', fig)
    assert "non-GPU" in [name for _, name in legend]
    colours = [c for c, _ in legend]
    assert len(colours) == len(set(colours)), legend  # every series its own colour


def test_idle_causes_come_from_device_gaps_and_stream_gaps_are_labelled():
    from dtrace.render.charts import fmt_time

    res = fake_job(16, straggler=3)
    html = unescape(section_gaps(Context(res)))
    causes = html.split('data-chart="gap-causes"')[1].split("</figure>")[0]
    dg = res.device_gaps.set_index("rank")
    for r in (0, 3, 15):  # every bar segment is the device figure, not the sum over streams
        for lab, col in (("host wait", "host_wait_ns"), ("other", "other_ns")):
            assert f"rank {r} · {lab}: {fmt_time(float(dg.loc[r, col]))} (" in causes
    assert "add up to the idle time of the breakdown" in html
    assert "<h3>Per-stream gaps (not GPU idle time)</h3>" in html
    assert html.index("GPU idle time by cause per GPU") < html.index("Per-stream gaps")

"""Report section "What if": the estimated step time per scenario, and the exported timeline.

The ``whatif`` table (:mod:`dtrace.reduce.whatif`) holds, per step, the step time a replay of
the step's cross-rank dependencies gives if the flagged stragglers computed at the median
rank's speed, a kernel class were faster, or collective transfers took no time. The section
shows the means over steps as bars and a table, the per-step rows folded away, and a link to
the slow-step timeline when the report was written with one (``dtrace report --timeline``).
"""

from __future__ import annotations

from html import escape

import numpy as np

from ..reduce.whatif import summary
from . import charts as ch
from .context import Context
from .escape import file_href, printable
from .page import note, table

COLUMNS = [
    ("scenario", "scenario", "text"),
    ("estimate_ns", "estimated step", "time"),
    ("saved_ns", "saved", "time"),
    ("saved_share", "saved share", "pct"),
    ("detail", "what changes", "text"),
]


def timeline_link(path: str | None) -> str:
    """The link to the exported timeline (``path``: the file, relative to the report; the link is
    always a relative file path, never a URL: :func:`~dtrace.render.escape.file_href`), or how to
    export one."""
    if path:
        return (
            f'<p>Slow-step timeline (clocks aligned): <a href="{escape(file_href(path))}" download>'
            f"{escape(printable(path))}</a> — open it in Perfetto UI (Open trace file) or chrome://tracing "
            "(Load).</p>"
        )
    return note(
        "Export the slowest step of the stragglers, the fastest and the median rank, clocks aligned, for "
        "Perfetto UI or chrome://tracing: dtrace timeline OUT -o slow-step.json.gz (and link it here with "
        "dtrace report OUT -o report.html --timeline slow-step.json.gz)."
    )


def section_whatif(ctx: Context) -> str:
    """Estimated step time per scenario (means over steps), the per-step table and the timeline link."""
    html = [timeline_link(ctx.timeline)]
    wf, msg = ctx.get("whatif", ("step", "scenario", "estimate_ns", "replayed_ns", "observed_ns"))
    if wf is None:
        html.append(msg)
        return "".join(html)
    s = summary(wf)
    base = float(s["replayed_ns"].mean()) if len(s) else 0.0
    html.append(
        note(
            "Each step is replayed on the clock-corrected time line: a collective ends when its last "
            "member arrives plus its transfer time, and each rank's work between collectives moves with "
            "it (not totals subtracted). Step time = median over ranks of each rank's step span; "
            f"the replay without changes gives {ch.fmt_time(base)} per step "
            f"(trace: {ch.fmt_time(float(s['observed_ns'].mean()))}, largest per-rank difference "
            f"{ch.fmt_time(float(s['fit_ns'].max()))}). Limits: dependencies that never made anything "
            "wait are not seen, host time counts only as the GPU's waits for it (shortened for host-bound "
            "stragglers), steps that overlapped keep their start, kernels' interference "
            "is not modelled (README, 'What-if estimates')."
        )
    )
    labels = ["as traced (replay)"] + s["scenario"].astype(str).tolist()
    values = np.r_[base, s["estimate_ns"].to_numpy(np.float64)]
    tips = [f"replayed step time: {ch.fmt_time(base)}"] + [
        f"{sc}: {ch.fmt_time(e)} per step, saves {ch.fmt_time(sv)} ({ch.fmt_pct(sh)}) — {d}"
        for sc, e, sv, sh, d in zip(s["scenario"], s["estimate_ns"], s["saved_ns"], s["saved_share"], s["detail"])
    ]
    html.append(
        ch.hbars(
            "whatif",
            labels,
            values,
            colors=["#9aa5b1"] + ["#59a14f"] * len(s),
            tooltips=tips,
            label_width=220,
            legend={"as traced": "#9aa5b1", "estimated": "#59a14f"},
            caption="mean step time over steps",
        )
    )
    html.append(table(s, COLUMNS))
    per = wf.sort_values(["step", "saved_ns"], ascending=[True, False], kind="stable")
    html.append(
        f"<details><summary>Per step ({per['step'].nunique():,} steps)</summary>"
        + table(
            per.reset_index(drop=True),
            [
                ("step", "step", "num"),
                ("observed_ns", "traced", "time"),
                ("replayed_ns", "replayed", "time"),
                *COLUMNS[:4],
            ],
        )
        + "</details>"
    )
    return "".join(html)

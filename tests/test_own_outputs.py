"""dtrace's own outputs among the inputs are recognised by their content and skipped with a note
(issue 19, item 4): the README's layout ``job/traces/`` + ``job/results/`` analysed as ``job``,
a results folder under another name, a store entry or a cache record copied elsewhere, and
``dtrace timeline`` output left beside the traces — under any name, gzip or not, in today's
layout and in the layout of earlier versions (its marker at the end)."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pandas as pd
from testpaths import ROOT

import dtrace
from dtrace.cli.main import main
from dtrace.generate.synth import generate
from dtrace.ingest.cache import ingest_many

EXAMPLES = os.path.join(ROOT, "examples", "traces")
TRACES = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".json.gz"))


def _job(tmp_path):
    """The README's layout: job/traces (two ranks) and job/results of their analysis, with a
    timeline exported next to the traces."""
    job = tmp_path / "job"
    shutil.copytree(EXAMPLES, job / "traces")
    assert main(["analyze", str(job / "traces"), "-o", str(job / "results"), "--sync", "--no-progress"]) == 0
    assert main(["timeline", str(job / "results"), "-o", str(job / "traces" / "rank-7.json.gz")]) == 0
    return job


def test_readme_layout_analysed_as_a_whole(tmp_path, capsys):
    job = _job(tmp_path)
    want = dtrace.load(job / "results")
    # more of dtrace's outputs, renamed so that no name gives them away
    shutil.copytree(job / "results", job / "old-run")
    misc = job / "misc"
    misc.mkdir()
    (entry,) = [d for d in (job / "results" / "cache" / "results").iterdir() if (d / "entry.json").exists()][:1]
    shutil.copy(entry / "entry.json", misc / "stored.json")
    (record,) = [d for d in (job / "results" / "cache").iterdir() if (d / "source.json").exists()][:1]
    shutil.copy(record / "source.json", misc / "rank-3.json")
    # a pack's index (the records of 8 small inputs ingested together)
    generate(tmp_path / "small", ranks=8, steps=1, kernels_per_step=4, seed=1)
    ingest_many(sorted(str(p) for p in (tmp_path / "small").iterdir()), str(tmp_path / "packed"))
    (index,) = (tmp_path / "packed").glob("pack-*/index.json")
    shutil.copy(index, misc / "rank-4.json")
    # a timeline in the layout of earlier versions: its generator at the end of the document
    with gzip.open(job / "traces" / "rank-7.json.gz", "rb") as f:
        doc = json.load(f)
    doc["otherData"] = doc.pop("otherData")
    (misc / "rank-8.trace.json").write_text(json.dumps(doc))
    capsys.readouterr()

    code = main(["analyze", str(job), "-o", str(tmp_path / "out"), "--sync", "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    res = dtrace.load(tmp_path / "out")
    assert res.errors == [] and res.ok
    ok = sorted(os.path.basename(i["path"]) for i in res.manifest["inputs"] if i["status"] == "ok")
    assert ok == TRACES
    skipped = {os.path.basename(i["path"]): i["error"] for i in res.manifest["inputs"] if i["status"] == "skipped"}
    assert sorted(skipped) == ["rank-3.json", "rank-4.json", "rank-7.json.gz", "rank-8.trace.json", "stored.json"]
    assert "dtrace timeline" in skipped["rank-7.json.gz"] and "dtrace timeline" in skipped["rank-8.trace.json"]
    assert "result store" in skipped["stored.json"] and "cache record" in skipped["rank-3.json"]
    assert "cache index" in skipped["rank-4.json"]
    folders = [n for n in res.manifest["notes"] if "results folder of dtrace" in n]
    assert sorted(n.split(":")[0] for n in folders) == sorted([str(job / "old-run"), str(job / "results")])
    assert "skipped 7 of dtrace's own outputs" in printed
    for table in ("breakdown", "kernels", "steps", "stragglers"):
        pd.testing.assert_frame_equal(res[table], want[table])
    # unchanged: up to date (the skipped files are part of what is compared)
    assert main(["analyze", str(job), "-o", str(tmp_path / "out"), "--sync", "--no-progress"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_an_explicit_dtrace_output_is_skipped_not_failed(tmp_path):
    job = _job(tmp_path)
    res = dtrace.analyze(
        [str(job / "traces" / t) for t in TRACES]
        + [str(job / "traces" / "rank-7.json.gz"), str(job / "results" / "manifest.json")],
        scheduler="sync",
    )
    assert res.ok and [i["status"] for i in res.manifest["inputs"]].count("skipped") == 2

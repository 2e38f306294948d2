"""Rank resolution (SPEC §2) and the Parquet ingest cache (SPEC §3)."""

import json
import os
import shutil

import pytest
from testpaths import shared

import dtrace
from dtrace.readers import kineto


def test_rank_from_file_name(copy_shared, tmp_path):
    p = copy_shared("kineto/single/h100_owlv2.json.gz", "trace_rank-5.json.gz")
    res = dtrace.analyze(p, scheduler="sync")
    assert res.breakdown["rank"].tolist() == [5]


def test_single_input_without_rank_is_rank_0():
    res = dtrace.analyze(shared("kineto", "single", "h100_owlv2.json.gz"), scheduler="sync")
    assert res.breakdown["rank"].tolist() == [0]


def test_several_inputs_without_rank_fail_with_option_named(copy_shared, tmp_path):
    a = copy_shared("kineto/single/h100_owlv2.json.gz", "a.json.gz")
    b = copy_shared("kineto/single/mi210_gpu_only.json.gz", "b.json.gz")
    c = copy_shared("kineto/single/mi300_resnet_rccl_rank0.json.gz", "c.json.gz")  # states rank 0
    res = dtrace.analyze([a, b, c], scheduler="sync")
    assert res.breakdown["rank"].tolist() == [0]
    errs = res.errors
    assert len(errs) == 2
    for e in errs:
        assert "--rank-by order" in e
    ordered = dtrace.analyze([a, b], scheduler="sync", rank_by="order")
    assert sorted(ordered.breakdown["rank"].tolist()) == [0, 1]
    explicit = dtrace.analyze([a, b], scheduler="sync", ranks={a: 10, b: 11})
    assert sorted(explicit.breakdown["rank"].tolist()) == [10, 11]


def test_second_analysis_reads_parquet_only(tmp_path, monkeypatch):
    src = tmp_path / "traces"
    shutil.copytree(shared("kineto", "hta-2rank"), src)
    out = tmp_path / "out"
    first = dtrace.analyze(str(src), str(out), scheduler="sync")
    assert not any(i["cached"] for i in first.manifest["inputs"])

    def boom(*a, **k):
        raise AssertionError("JSON parsed again")

    monkeypatch.setattr(kineto, "read_kineto", boom)
    second = dtrace.analyze(str(src), str(out), scheduler="sync")
    assert all(i["cached"] for i in second.manifest["inputs"])
    assert second.errors == []
    for t in ("breakdown", "streams", "steps", "kernels"):
        a = first.table(t).sort_values(list(first.table(t).columns[:3])).reset_index(drop=True)
        b = second.table(t).sort_values(list(second.table(t).columns[:3])).reset_index(drop=True)
        assert a.equals(b), t
    # a changed source (mtime/size) is parsed again
    f = sorted(src.iterdir())[0]
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    third = dtrace.analyze(str(src), str(out), scheduler="sync")
    (err,) = third.errors  # the changed file was parsed again (and hit the patched reader)
    assert "JSON parsed again" in err and f.name in err


def test_cache_records_provenance(tmp_path):
    out = tmp_path / "out"
    res = dtrace.analyze(shared("kineto", "hta-2rank"), str(out), scheduler="sync")
    import xxhash

    for i in res.manifest["inputs"]:
        with open(i["path"], "rb") as f:
            assert i["fingerprint"] == xxhash.xxh3_128_hexdigest(f.read())
        assert i["size"] == os.path.getsize(i["path"])
    from dtrace.ingest.cache import lookup, verify

    rec, note = lookup(res.manifest["cache"], res.manifest["inputs"][0]["path"])
    assert rec is not None and note is None and verify(rec)


def test_results_written_atomically_and_loadable(tmp_path):
    out = tmp_path / "out"
    dtrace.analyze(shared("kineto", "hta-2rank"), str(out), scheduler="sync")
    names = set(os.listdir(out))
    assert "manifest.json" in names and "breakdown.parquet" in names
    assert not any(n.startswith(".staging") for n in names)
    r = dtrace.load(out)
    assert len(r.breakdown) == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run_id"] and set(manifest["tables"]) >= {"breakdown", "streams", "steps", "kernels"}
    # a crashed swap (manifest gone, tables present) is reported as incomplete, never half-read
    os.unlink(out / "manifest.json")
    with pytest.raises(dtrace.ResultsError, match="incomplete"):
        dtrace.load(out)


def test_steps_table_matches_profiler_step_windows():
    """ProfilerStep#N windows: a kernel belongs to the step whose host window holds its launch."""
    import gzip

    path = shared("kineto", "hta-2rank", "sampled_rank-0.json.gz")
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    steps = {
        e["name"]: (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"}
    spans = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            t = launch.get(e["args"].get("correlation"), e["ts"])
            for name, (s, t_end) in steps.items():
                if s <= t < t_end:
                    lo, hi = spans.get(name, (float("inf"), 0))
                    spans[name] = (min(lo, e["ts"]), max(hi, e["ts"] + e["dur"]))
    res = dtrace.analyze(path, scheduler="sync")
    got = {int(r.step): int(r.step_ns) for r in res.steps.itertuples()}
    want = {int(n.split("#")[1]): round((hi - lo) * 1000) for n, (lo, hi) in spans.items()}
    assert got == want


def test_rank_per_device_files_numbered_by_process_index():
    """Two JAX host files (8 GPUs each) named by process index take ranks 0-7 and 8-15."""
    from dtrace.ingest.cache import FileRecord, PartRecord
    from dtrace.ingest.ranks import resolve_ranks

    def rec(path, hint):
        parts = [
            PartRecord(device=k, local_index=k, events=f"{path}-{k}", collectives="", memcpy="", n_events=1)
            for k in range(8)
        ]
        return FileRecord(path=path, format="jax", parts=parts, rank_hint=hint, rank_per_device=True)

    specs = resolve_ranks([rec("/x/host_rank1.trace.json.gz", None), rec("/x/host_rank0.trace.json.gz", None)]).specs
    got = {(s.path.split("/")[-1], s.device): s.rank for s in specs}
    assert got[("host_rank0.trace.json.gz", 0)] == 0 and got[("host_rank0.trace.json.gz", 7)] == 7
    assert got[("host_rank1.trace.json.gz", 0)] == 8 and got[("host_rank1.trace.json.gz", 7)] == 15


def test_unchanged_inputs_and_options_reuse_per_part_results(tmp_path, monkeypatch):
    """Same inputs + same options: the per-part result frames are reused, not recomputed;
    other options recompute from the Parquet events (still without parsing JSON)."""
    from dtrace.execution import tasks

    src = shared("kineto", "hta-2rank")
    out = tmp_path / "out"
    first = dtrace.analyze(src, str(out), scheduler="sync")
    assert not any(i["results_reused"] for i in first.manifest["inputs"])

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(tasks, "run_analyses", boom)
    again = dtrace.analyze(src, str(out), scheduler="sync")
    assert again.errors == [] and all(i["results_reused"] for i in again.manifest["inputs"])
    for t in first.table_names:
        assert first.table(t).equals(again.table(t)), t
    other = dtrace.analyze(src, str(out), scheduler="sync", step=551)  # new options: recomputed
    assert len(other.errors) == 2 and all("recomputed" in e for e in other.errors)
    monkeypatch.undo()
    forced = dtrace.analyze(src, str(out), scheduler="sync", reuse_cache=False)
    assert not any(i["results_reused"] for i in forced.manifest["inputs"])


def test_a_file_name_that_is_not_utf8_is_read(tmp_path):
    """Issue 19, item 11: a name that is not valid UTF-8 anywhere under an input folder (Linux
    names are bytes) is read like any other; the run, its re-run and the results work."""
    from testpaths import ROOT

    examples = os.path.join(ROOT, "examples", "traces")
    job = tmp_path / "job"
    (job / "sub").mkdir(parents=True)
    shutil.copy(os.path.join(examples, "sampled_rank-0.json.gz"), job / "sampled_rank-0.json.gz")
    odd = os.path.join(os.fsencode(job / "sub"), b"rank-1-\xff\xfe.json.gz")  # invalid UTF-8
    shutil.copy(os.path.join(examples, "sampled_rank-1.json.gz"), odd)
    want = dtrace.analyze(examples, scheduler="sync")
    out = tmp_path / "out"
    res = dtrace.analyze(str(job), out, scheduler="sync")
    assert res.errors == [] and sorted(res.breakdown["rank"]) == [0, 1]
    assert os.fsdecode(odd) in {i["path"] for i in res.manifest["inputs"]}
    assert res.breakdown.equals(want.breakdown)
    again = dtrace.analyze(str(job), out, scheduler="sync")
    assert again.manifest.get("up_to_date")
    assert dtrace.load(out).breakdown.equals(want.breakdown)
    assert len(dtrace.events(out).compute()) == sum(i["events"] for i in res.manifest["inputs"])

"""Rank claims (issue 13): one input per rank across devices, no negative ranks, ranks from
``nsys stats`` CSV names, unreadable folders reported."""

from __future__ import annotations

import json
import os

import pytest
from test_implausible_times import GOOD, TRACE_HEADER, csv_row, kernel, write_kineto

import dtrace
from dtrace.errors import UsageError
from dtrace.ingest.cache import FileRecord, PartRecord
from dtrace.ingest.ranks import resolve_ranks


def status(res) -> dict[str, dict]:
    return {os.path.basename(i["path"]): i for i in res.manifest["inputs"]}


def test_two_inputs_claiming_one_rank_on_different_devices_both_fail(tmp_path):
    a = write_kineto(tmp_path / "a.json", GOOD, rank=1)  # rank 1, device 0
    b = write_kineto(tmp_path / "b.json", [kernel("x", 10.0, 5.0, device=1)], rank=1)  # rank 1, device 1
    c = write_kineto(tmp_path / "c.json", GOOD, rank=0)
    res = dtrace.analyze([a, b, c], scheduler="sync")
    got = status(res)
    assert got["c.json"]["status"] == "ok" and got["c.json"]["ranks"] == [[0, 0]]
    assert (
        got["a.json"]["error"] == f"{a}: rank 1 is also claimed by b.json; pass --rank-by order to number "
        "inputs by sorted path"
    )
    assert got["b.json"]["error"].startswith(f"{b}: rank 1 is also claimed by a.json;")
    assert got["a.json"]["error_type"] == got["b.json"]["error_type"] == "RankError"


def test_one_file_with_several_devices_of_one_rank_is_one_claim(tmp_path):
    p = write_kineto(tmp_path / "two_gpus.json", [*GOOD, kernel("x", 120.0, 5.0, device=1)], rank=3)
    res = dtrace.analyze(p, scheduler="sync")
    assert res.errors == [] and status(res)["two_gpus.json"]["ranks"] == [[3, 0], [3, 1]]


def test_negative_ranks_are_rejected(tmp_path):
    bad = write_kineto(tmp_path / "bad.json", GOOD, rank=-1)
    good = write_kineto(tmp_path / "good.json", GOOD, rank=0)
    res = dtrace.analyze([bad, good], scheduler="sync")
    assert res.breakdown["rank"].tolist() == [0]
    assert res.errors == [f"{bad}: the trace states rank -1, which is not a rank (0 to 2147483647)"]
    # explicit ranks are an argument: checked before any work, a usage error
    out = tmp_path / "out"
    for wrong in (-1, 2**31, "3", True):
        with pytest.raises(UsageError, match="a rank is an integer from 0 to 2147483647"):
            dtrace.analyze([bad, good], out, scheduler="sync", ranks={good: wrong})
    assert not out.exists()


def test_nsys_stats_trace_csv_takes_the_rank_in_its_name(tmp_path):
    p = tmp_path / "rank-4_cuda_gpu_trace.csv"
    p.write_text(TRACE_HEADER + csv_row(100, 10, 1) + csv_row(200, 10, 2))
    res = dtrace.analyze(str(p), scheduler="sync")
    assert res.errors == [] and res.breakdown["rank"].tolist() == [4]


def test_a_ragged_csv_row_does_not_take_the_rank_of_the_trace_beside_it(tmp_path):
    good = write_kineto(tmp_path / "rank-0.json", GOOD)
    csv = tmp_path / "rank-1_cuda_gpu_trace.csv"
    csv.write_text(TRACE_HEADER + csv_row(100, 10, 1) + "200,10,2,1\n")  # the last row stops after GrdX
    res = dtrace.analyze([good, str(csv)], scheduler="sync")
    got = status(res)
    assert got["rank-0.json"]["status"] == "ok" and got["rank-0.json"]["ranks"] == [[0, 0]]
    assert got["rank-1_cuda_gpu_trace.csv"]["ranks"] == [[1, 0]]


def _multi(path: str, n: int) -> FileRecord:
    parts = [
        PartRecord(device=k, local_index=k, events=f"{path}-{k}", collectives="", memcpy="", n_events=1)
        for k in range(n)
    ]
    return FileRecord(path=path, format="jax", parts=parts, rank_per_device=True)


def test_rank_per_device_files_take_ranks_from_their_process_index():
    # 4 GPUs per host file: process 1 is ranks 4-7 and process 3 ranks 12-15, with or without the others
    specs = resolve_ranks([_multi("/x/host_rank3.trace.json.gz", 4), _multi("/x/host_rank1.trace.json.gz", 4)]).specs
    assert [(os.path.basename(s.path), s.rank) for s in specs] == [
        ("host_rank1.trace.json.gz", r) for r in range(4, 8)
    ] + [("host_rank3.trace.json.gz", r) for r in range(12, 16)]
    # hosts with different GPU counts: numbered consecutively in process-index order
    specs = resolve_ranks([_multi("/x/host_rank1.trace.json.gz", 2), _multi("/x/host_rank0.trace.json.gz", 3)]).specs
    assert [(os.path.basename(s.path), s.rank) for s in specs] == [
        ("host_rank0.trace.json.gz", r) for r in range(3)
    ] + [("host_rank1.trace.json.gz", r) for r in (3, 4)]


def test_an_unreadable_subfolder_is_a_failed_input(tmp_path, monkeypatch):
    """The folder fails as an input of its own (its traces are missing and the run says so, exit
    status 1) instead of stopping the whole run. The tests run as root, which permissions do not
    stop, so the file system's refusal is imitated where dtrace lists folders."""
    job = tmp_path / "job"
    (job / "private").mkdir(parents=True)
    write_kineto(job / "rank-0.json", GOOD)
    write_kineto(job / "private" / "rank-1.json", GOOD, rank=1)
    private = str(job / "private")
    real = os.scandir

    def scandir(path="."):
        if not isinstance(path, int) and os.fspath(path) == private:
            raise PermissionError(13, "Permission denied", private)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    res = dtrace.analyze(str(job), scheduler="sync")
    assert res.breakdown["rank"].tolist() == [0]
    assert res.errors == [
        f"{private}: is a folder that cannot be listed (Permission denied): the traces in it are not analysed"
    ]
    assert status(res)["private"]["error_type"] == "NotRegularFile" and res.manifest["n_inputs"] == 2
    assert json.dumps(res.manifest)  # the manifest stays plain JSON

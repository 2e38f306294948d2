"""dtrace on a real multi-process Dask cluster on loopback: a scheduler and two workers as
separate processes (``python -m distributed.cli.dask_scheduler`` / ``dask_worker`` are what the
``dask scheduler`` / ``dask worker`` commands run), the CLI as a third process.

Shown here: results identical to the synchronous run; the workers read the inputs (a task
carries a path, never the file) and the client only gathers aggregates; a worker killed
mid-run loses nothing; a bad rank fails alone; a re-run after a crashed client reuses the
ingest cache of the inputs that were parsed. Evidence about tasks comes from a scheduler
preload (``tests/dask_probe.py``), not from dtrace's own bookkeeping.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from _stall import preload_env, release, stall
from distributed import Client

import dtrace
from dtrace.errors import ResultsError
from dtrace.generate.synth import generate

pytestmark = pytest.mark.slow

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dask_probe.py")


class LoopbackCluster:
    """A Dask scheduler (with the probe preloaded) and named workers, each its own process."""

    def __init__(self, workdir: str) -> None:
        self.dir = workdir
        self.probe_log = os.path.join(workdir, "probe.jsonl")
        self.env = {**os.environ, "DTRACE_PROBE_LOG": self.probe_log, **preload_env()}  # stall() works
        self.workers: dict[str, subprocess.Popen] = {}
        sfile = os.path.join(workdir, "scheduler.json")
        self.scheduler = self._spawn(
            "scheduler",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--no-dashboard",
            "--scheduler-file",
            sfile,
            "--preload",
            PROBE,
        )
        deadline = time.monotonic() + 60
        while not (os.path.exists(sfile) and os.path.getsize(sfile)):
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dask scheduler did not start: {self.log('scheduler')}")
            time.sleep(0.1)
        with open(sfile, encoding="utf-8") as f:
            self.address = json.load(f)["address"]

    def _spawn(self, name: str, module: str, *args: str) -> subprocess.Popen:
        log = open(os.path.join(self.dir, f"{name}.log"), "ab")
        try:
            return subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        finally:
            log.close()

    def log(self, name: str) -> str:
        with open(os.path.join(self.dir, f"{name}.log"), encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]

    def start_worker(self, name: str) -> None:
        """A single-threaded worker process without a nanny: killing it loses it for good."""
        self.workers[name] = self._spawn(
            name,
            "distributed.cli.dask_worker",
            self.address,
            "--name",
            name,
            "--nthreads",
            "1",
            "--no-nanny",
            "--host",
            "127.0.0.1",
            "--no-dashboard",
            "--death-timeout",
            "60",
        )

    def wait_for_workers(self, n: int) -> dict[str, str]:
        """Wait until exactly the live workers are connected; returns ``{name: address}``."""
        with Client(self.address, timeout="30s") as c:
            c.wait_for_workers(n, timeout=90)
            deadline = time.monotonic() + 30
            while True:
                info = c.scheduler_info(n_workers=-1)["workers"]
                if len(info) == n or time.monotonic() > deadline:
                    return {w["name"]: addr for addr, w in info.items()}
                time.sleep(0.2)

    def ensure_two_workers(self) -> dict[str, str]:
        for name in [n for n, p in self.workers.items() if p.poll() is not None]:
            del self.workers[name]
        i = 0
        while len(self.workers) < 2:
            while f"w{i}" in self.workers or os.path.exists(os.path.join(self.dir, f"w{i}.log")):
                i += 1
            self.start_worker(f"w{i}")
        return self.wait_for_workers(2)

    def reset_probe(self) -> None:
        open(self.probe_log, "w").close()

    def probe(self) -> list[dict]:
        with open(self.probe_log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def close(self) -> None:
        procs = [*self.workers.values(), self.scheduler]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # dask closes gracefully on SIGTERM
        for p in procs:
            try:  # 5 s, as dtrace's job scripts give their workers: one stuck in a task is killed
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LoopbackCluster(str(tmp_path_factory.mktemp("dask")))
    try:
        c.ensure_two_workers()
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def job16(tmp_path_factory):
    """A generated 16-rank job, its rank files and the synchronous results."""
    d = tmp_path_factory.mktemp("job16")
    generate(d / "traces", ranks=16, steps=2, seed=1)
    files = sorted(glob.glob(str(d / "traces" / "rank-*.json.gz")))
    ref = dtrace.analyze(files, d / "sync", scheduler="sync")
    return files, dtrace.load(ref.path)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "dtrace", "analyze", *args]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def assert_same_tables(got: dtrace.Results, want: dtrace.Results) -> None:
    names = sorted(want.manifest["tables"])
    assert sorted(got.manifest["tables"]) == names
    for name in names:
        pd.testing.assert_frame_equal(got.table(name), want.table(name), check_exact=True, obj=name)


def by_path(res: dtrace.Results) -> dict[str, dict]:
    return {i["path"]: i for i in res.manifest["inputs"]}


def test_cli_on_loopback_cluster_matches_sync_and_reads_inputs_on_workers(cluster, tmp_path):
    workers = cluster.ensure_two_workers()
    cluster.reset_probe()
    generate(tmp_path / "traces", ranks=64, steps=2, seed=0)
    files = sorted(glob.glob(str(tmp_path / "traces" / "rank-*.json.gz")))
    assert len(files) == 64
    proc = subprocess.Popen(
        cli(
            str(tmp_path / "traces" / "rank-*.json.gz"),
            "-o",
            str(tmp_path / "dist"),
            "--scheduler",
            cluster.address,
            "--partition-size",
            "20000",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        # the reference, computed in this process while the cluster works
        ref = dtrace.analyze(files, tmp_path / "sync", scheduler="sync")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    got = dtrace.load(tmp_path / "dist")
    assert got.manifest["n_failed"] == 0 and got.manifest["workers"] == 2
    assert sorted(got.breakdown["rank"]) == list(range(64))
    assert_same_tables(got, dtrace.load(ref.path))

    rows = cluster.probe()
    starts = {r["prefix"]: [] for r in rows}
    for r in rows:
        if r["event"] == "start":
            starts[r["prefix"]].append(r)
    # every input was parsed by a task whose argument is a batch of paths; the task itself is a
    # few hundred bytes per path while a file is tens of kB: the bytes never travelled, a worker
    # read them
    ingest = starts["ingest_files"]
    assert sorted(p for r in ingest for p in r["args"][0]) == files
    assert len(ingest) > 1
    smallest_file = min(os.path.getsize(f) for f in files)
    assert max(r["spec_bytes"] / len(r["args"][0]) for r in ingest) < min(1024, smallest_file // 10)
    # by the two worker processes (the client is not a worker), both of them
    assert {r["worker"] for r in ingest} == set(workers.values())
    # partitions of many ranks: several ranks per task, every partition analysed on a worker
    partitions = got.manifest["partitions"]
    assert 2 <= len(partitions) < 64 and sum(p["parts"] for p in partitions) == 64
    assert {r["worker"] for r in starts["analyze_partition"]} == set(workers.values())
    # what the client gathers per partition is a set of small aggregate frames
    done = [r for r in rows if r["event"] == "done" and r["prefix"] == "analyze_partition"]
    assert len(done) == len(partitions)
    assert max(r["nbytes"] for r in done) / min(p["parts"] for p in partitions) < 512 * 1024


def test_client_gathers_aggregates_whose_size_does_not_follow_the_events(cluster, tmp_path):
    """Ten times the events per rank, about the same bytes gathered per rank: nothing per-event
    reaches the client (only the per-step tables grow, by a few rows per step). Through the
    API in this process, on the same cluster."""
    cluster.ensure_two_workers()
    sizes = {}
    for steps in (2, 20):
        cluster.reset_probe()
        generate(tmp_path / f"s{steps}", ranks=2, steps=steps, seed=3)
        res = dtrace.analyze(
            str(tmp_path / f"s{steps}" / "rank-*.json.gz"), tmp_path / f"out{steps}", scheduler=cluster.address
        )
        assert res.ok
        events = sum(i["events"] for i in res.manifest["inputs"])
        gathered = sum(
            p["nbytes"] for p in cluster.probe() if p["event"] == "done" and p["prefix"] == "analyze_partition"
        )
        sizes[steps] = (events, gathered)
    (ev2, b2), (ev20, b20) = sizes[2], sizes[20]
    assert ev20 >= 9 * ev2
    assert b20 < 2 * b2, sizes


def test_worker_killed_mid_run_loses_nothing(cluster, job16, tmp_path):
    """A worker is killed while it analyses a partition: the survivor analyses it again."""
    files, ref = job16
    workers = cluster.ensure_two_workers()
    cluster.reset_probe()
    proc = subprocess.Popen(
        cli(
            *files, "-o", str(tmp_path / "out"), "--scheduler", cluster.address, "--partition-size", "1"
        ),  # one rank per partition: 16 analysis tasks
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    killed, lost = None, set()
    try:
        with Client(cluster.address, timeout="30s") as c:
            deadline = time.monotonic() + 240
            while killed is None:
                assert proc.poll() is None, "the run finished before a worker analysed a partition"
                assert time.monotonic() < deadline, "no worker ever analysed a partition"
                busy = {
                    addr: [k for k in keys if str(k).startswith("analyze_partition")]
                    for addr, keys in c.processing().items()
                }
                for addr, keys in busy.items():
                    if keys:
                        killed = next(n for n, a in workers.items() if a == addr)
                        os.kill(cluster.workers[killed].pid, signal.SIGKILL)
                        cluster.workers[killed].wait()
                        lost = set(map(str, keys))
                        break
                time.sleep(0.005)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    got = dtrace.load(tmp_path / "out")
    assert got.manifest["n_failed"] == 0
    assert_same_tables(got, ref)
    # the partitions that died with the worker were analysed again by the survivor
    survivor = next(a for n, a in workers.items() if n != killed)
    redone = {
        r["key"]
        for r in cluster.probe()
        if r["event"] == "done" and r["prefix"] == "analyze_partition" and r["worker"] == [survivor]
    }
    assert lost and lost <= redone


def test_bad_rank_fails_alone_on_the_cluster(cluster, job16, tmp_path):
    files, clean = job16
    cluster.ensure_two_workers()
    d = tmp_path / "traces"
    d.mkdir()
    for f in files[:6]:  # ranks 0, 1, 10, 11, 12, 13 (sorted by name)
        shutil.copy(f, d)
    bad = d / "rank-11.json.gz"
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # a truncated gzip
    proc = subprocess.Popen(
        cli(str(d), "-o", str(tmp_path / "dist"), "--scheduler", cluster.address),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        ref = dtrace.analyze(str(d), tmp_path / "sync", scheduler="sync")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err  # 1: some inputs failed, the results of the rest are written
    got = dtrace.load(tmp_path / "dist")
    inputs = by_path(got)
    assert [p for p, i in inputs.items() if i["status"] == "error"] == [str(bad)]
    assert str(bad) in inputs[str(bad)]["error"] and "\n" not in inputs[str(bad)]["error"]
    good = [0, 1, 10, 12, 13]
    assert sorted(got.breakdown["rank"]) == good
    # the same as the synchronous run on the same inputs, failure included ...
    assert_same_tables(got, dtrace.load(ref.path))
    assert by_path(dtrace.load(ref.path))[str(bad)]["error"] == inputs[str(bad)]["error"]
    # ... and each good rank's breakdown is exactly that of the clean 16-rank job
    want = clean.breakdown[clean.breakdown["rank"].isin(good)].reset_index(drop=True)
    pd.testing.assert_frame_equal(got.breakdown, want, check_exact=True)


def test_rerun_after_a_crash_reuses_the_cache_of_finished_inputs(cluster, job16, tmp_path):
    """The client is killed while one input is still being read (a read that hangs: see
    ``tests/_stall.py``); the inputs parsed by then are cache hits in the re-run, the other is
    parsed again."""
    files, ref = job16
    cluster.ensure_two_workers()
    d = tmp_path / "traces"
    d.mkdir()
    for f in files:
        shutil.copy(f, d)
    stuck = d / "rank-15.json.gz"
    stall(stuck)
    inputs = [str(d / os.path.basename(f)) for f in files]
    out = tmp_path / "out"
    proc = subprocess.Popen(
        cli(*inputs, "-o", str(out), "--scheduler", cluster.address),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )

    def parsed() -> set[str]:
        found = set()
        for src in glob.glob(str(out / "cache" / "*" / "source.json")):
            with open(src, encoding="utf-8") as f:
                found.add(json.load(f)["record"]["path"])
        return found

    try:
        deadline = time.monotonic() + 120
        seen, since = set(), time.monotonic()
        while time.monotonic() - since < 2.0 or not seen:  # until parsing stalls on the stuck input
            assert time.monotonic() < deadline and proc.poll() is None
            now = parsed()
            if now != seen:
                seen, since = now, time.monotonic()
            time.sleep(0.05)
    finally:
        proc.kill()  # the crash
        proc.wait()
    release(stuck)  # the stuck read fails: an error, never cached
    finished, since = parsed(), time.monotonic()
    while time.monotonic() - since < 2.0:  # inputs still being parsed by the workers finish first
        time.sleep(0.1)
        if (now := parsed()) != finished:
            finished, since = now, time.monotonic()
    assert str(stuck) not in finished and 0 < len(finished) < len(inputs)
    with pytest.raises(ResultsError):
        dtrace.load(out)  # the crashed run left no results

    r = run_cli(*inputs, "-o", str(out), "--scheduler", cluster.address)
    assert r.returncode == 0, r.stderr
    got = dtrace.load(out)
    assert {p for p, i in by_path(got).items() if i["cached"]} == finished
    assert_same_tables(got, ref)

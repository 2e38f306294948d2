"""Traces on object stores: a 16-rank job read from s3:// on a real S3-compatible server (moto's
standalone server on 127.0.0.1, behind a proxy that counts requests and misbehaves on purpose),
through s3fs; the retry and error rules of dtrace.ingest.remote on any fsspec file system."""

import os
import shutil

import pandas as pd
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from _s3server import S3Server  # noqa: E402

import dtrace  # noqa: E402
from dtrace.generate.synth import generate  # noqa: E402
from dtrace.ingest import remote  # noqa: E402
from dtrace.results import in_memory  # noqa: E402

BUCKET = "traces"
N_RANKS = 16
TABLES = ("breakdown", "streams", "kernels", "gaps", "steps", "collectives", "ranks", "stragglers")


@pytest.fixture(scope="module")
def s3():
    srv = S3Server()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A generated 16-rank job on local disk, and its local analysis (the reference)."""
    d = tmp_path_factory.mktemp("job")
    generate(d / "traces", ranks=N_RANKS, steps=2, seed=11, kernels_per_step=20)
    generate(d / "other", ranks=N_RANKS, steps=2, seed=12, kernels_per_step=20)  # rank 3 changes to this one
    local = dtrace.analyze(str(d / "traces"), str(d / "local"), scheduler="sync")
    return d, local


@pytest.fixture
def env(s3, monkeypatch):
    """Credentials and endpoint as a user sets them (the AWS variables), fresh s3fs instances."""
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    monkeypatch.setattr(remote, "BACKOFF_S", 0.05)
    s3fs.S3FileSystem.clear_instance_cache()
    s3.reset()
    yield s3
    s3fs.S3FileSystem.clear_instance_cache()


def _upload(s3, folder, prefix):
    c = s3.client()
    try:
        c.create_bucket(Bucket=BUCKET)
    except c.exceptions.BucketAlreadyOwnedByYou:
        pass
    for name in sorted(os.listdir(folder)):
        c.upload_file(os.path.join(folder, name), BUCKET, f"{prefix}/{name}")


def _key(r):
    return f"/{BUCKET}/{r}"


def _objects(counter):
    """The trace objects among the requested paths (not the listings' requests on a prefix)."""
    return {p: n for p, n in counter.items() if p.endswith(".json.gz")}


def _same(a, b, tables=TABLES):
    for t in tables:
        x, y = a.table(t), b.table(t)
        keys = [c for c in ("rank", "device", "stream", "step", "name", "collective", "class") if c in x.columns]
        x = x.sort_values(keys).reset_index(drop=True)
        y = y.sort_values(keys).reset_index(drop=True)
        pd.testing.assert_frame_equal(x, y, check_dtype=True, obj=t)


def test_s3_job_equals_local_and_unchanged_objects_are_not_downloaded_again(env, job, tmp_path):
    d, local = job
    _upload(env, d / "traces", "run1")
    url = f"s3://{BUCKET}/run1/"
    out, cache = tmp_path / "out", tmp_path / "cache"

    first = dtrace.analyze(url, str(out), cache=str(cache), scheduler="sync")
    assert first.manifest["n_failed"] == 0 and len(first.manifest["inputs"]) == N_RANKS  # ground_truth.json skipped
    assert all(i["path"].startswith(url) and i["identity"].startswith("etag:") for i in first.manifest["inputs"])
    _same(first, local)
    gets = _objects(env.counts("GET"))
    assert len(gets) == N_RANKS and set(gets.values()) == {1}  # each object downloaded once

    env.reset()  # the same OUT: up to date from the listing alone
    again = dtrace.analyze(url, str(out), cache=str(cache), scheduler="sync")
    assert again.manifest.get("up_to_date") is True
    assert _objects(env.counts("GET")) == {} and _objects(env.counts("HEAD")) == {}
    _same(again, local)

    env.reset()  # a new OUT, the same ingest cache: every worker asks for the identity, downloads nothing
    other = dtrace.analyze(url, str(tmp_path / "out2"), cache=str(cache), scheduler="sync")
    heads = _objects(env.counts("HEAD"))
    assert _objects(env.counts("GET")) == {} and len(heads) == N_RANKS and set(heads.values()) == {1}
    assert all(i["cached"] for i in other.manifest["inputs"])
    _same(other, local)

    # rank 3's object changes: it alone is downloaded and parsed again
    shutil.copy(d / "other" / "rank-3.json.gz", tmp_path / "rank-3.json.gz")
    env.client().upload_file(str(tmp_path / "rank-3.json.gz"), BUCKET, "run1/rank-3.json.gz")
    env.reset()
    changed = dtrace.analyze(url, str(out), cache=str(cache), scheduler="sync")
    assert changed.manifest.get("up_to_date") is not True
    assert _objects(env.counts("GET")) == {_key("run1/rank-3.json.gz"): 1}
    cached = {os.path.basename(i["path"]): i["cached"] for i in changed.manifest["inputs"]}
    assert cached.pop("rank-3.json.gz") is False and all(cached.values())
    alone = dtrace.analyze(str(tmp_path / "rank-3.json.gz"), scheduler="sync")
    got = changed.breakdown[changed.breakdown["rank"] == 3].reset_index(drop=True)
    pd.testing.assert_frame_equal(got[list(alone.breakdown.columns)], alone.breakdown)


def test_missing_bucket_and_denied_object_fail_alone(env, job, tmp_path):
    d, local = job
    _upload(env, d / "traces", "run2")
    env.deny(BUCKET, "run2/rank-5.json.gz")
    res = dtrace.analyze(
        [f"s3://no-such-bucket-{os.getpid()}/job/", f"s3://{BUCKET}/run2/"], str(tmp_path / "out"), scheduler="sync"
    )
    by_name = {i["path"]: i for i in res.manifest["inputs"]}
    missing = by_name[f"s3://no-such-bucket-{os.getpid()}/job/"]
    denied = by_name[f"s3://{BUCKET}/run2/rank-5.json.gz"]
    for bad, words in ((missing, "bucket does not exist"), (denied, "access denied")):
        assert bad["status"] == "error" and words in bad["error"].lower(), bad["error"]
        assert "\n" not in bad["error"] and bad["error"].startswith(bad["path"])
    assert res.manifest["n_failed"] == 2
    assert sorted(res.breakdown["rank"]) == [r for r in range(N_RANKS) if r != 5]
    assert env.counts("GET")[_key("run2/rank-5.json.gz")] == 0  # denied at its first request (HEAD)


def test_transient_failures_are_retried(env, job, tmp_path):
    d, local = job
    _upload(env, d / "traces", "run3")
    env.fail_first(BUCKET, "run3/rank-7.json.gz", 2)  # 503 SlowDown twice, then the object
    res = dtrace.analyze(f"s3://{BUCKET}/run3/", str(tmp_path / "out"), scheduler="sync")
    assert res.manifest["n_failed"] == 0
    assert env.counts("GET")[_key("run3/rank-7.json.gz")] == 3
    _same(res, local)


@pytest.mark.slow
def test_a_dask_cluster_reads_the_objects_on_its_workers(env, job, tmp_path, monkeypatch):
    d, local = job
    _upload(env, d / "traces", "run4")

    def no_reading_here(url):
        raise AssertionError(f"the client read {url}")

    monkeypatch.setattr(remote, "local_copy", no_reading_here)  # this process never reads an object
    res = dtrace.analyze(f"s3://{BUCKET}/run4/", str(tmp_path / "out"), scheduler="local", workers=2)
    assert res.manifest["execution"] != "sync" and res.manifest["workers"] == 2
    assert res.manifest["n_failed"] == 0, [i["error"] for i in res.manifest["inputs"] if i["error"]]
    gets = _objects(env.counts("GET"))
    assert len(gets) == N_RANKS and set(gets.values()) == {1}
    _same(res, local)


def test_cli_reads_an_s3_glob(env, job, tmp_path):
    import subprocess
    import sys

    d, _ = job
    _upload(env, d / "traces", "run5")
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "dtrace", "analyze", f"s3://{BUCKET}/run5/rank-1*.json.gz", "-o", str(out), "--sync"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr
    got = dtrace.load(str(out))
    assert sorted(got.breakdown["rank"]) == [1, 10, 11, 12, 13, 14, 15]


# -- the retry rules on any fsspec file system --------------------------------------------------
class _Flaky:
    """``fn`` that raises ``exc`` ``n`` times, then returns ``value``."""

    def __init__(self, exc, n, value="ok"):
        self.exc, self.n, self.value, self.calls = exc, n, value, 0

    def __call__(self):
        self.calls += 1
        if self.calls <= self.n:
            raise self.exc
        return self.value


def test_retry_rules(monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.001)
    f = _Flaky(ConnectionError("reset by peer"), 2)
    assert remote.retry(f, "s3://b/k", "download") == "ok" and f.calls == 3
    f = _Flaky(TimeoutError("slow"), 10)
    with pytest.raises(remote.RemoteError, match=r"^s3://b/k: cannot download after 3 attempts in \d+ s: TimeoutError"):
        remote.retry(f, "s3://b/k", "download", attempts=3)
    assert f.calls == 3
    for exc, words in ((PermissionError("403 Forbidden"), "access denied"), (FileNotFoundError("no key"), "not found")):
        f = _Flaky(exc, 10)
        with pytest.raises(remote.RemoteError, match=words):
            remote.retry(f, "gs://b/k", "read the object's metadata")
        assert f.calls == 1  # permanent: never retried
    # no credentials at all (s3fs passes botocore's error through): asking again will not help
    from botocore.exceptions import NoCredentialsError

    f = _Flaky(NoCredentialsError(), 10)
    with pytest.raises(remote.RemoteError, match="no usable credentials .NoCredentialsError: Unable to locate"):
        remote.retry(f, "s3://b/k", "list")
    assert f.calls == 1
    # issue 31: a store answering 503 SlowDown for ever: bounded in time, whatever the attempts
    import time

    monkeypatch.setattr(remote, "BACKOFF_S", 0.05)
    monkeypatch.setattr(remote, "RETRY_TOTAL_S", 0.5)
    f = _Flaky(ConnectionError("503 SlowDown"), 10**6)
    t0 = time.monotonic()
    with pytest.raises(remote.RemoteError, match=r"attempts in \d+ s: ConnectionError: 503 SlowDown"):
        remote.retry(f, "s3://b/k", "download", attempts=10**6)
    assert time.monotonic() - t0 < 2 and f.calls <= 5


def test_any_fsspec_protocol(tmp_path, monkeypatch):
    """An in-memory fsspec file system whose downloads fail twice: listed, read, retried."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class FlakyMemory(MemoryFileSystem):
        protocol = "flakymem"
        store: dict = {}
        pseudo_dirs = [""]
        fails: dict = {}

        @classmethod
        def _strip_protocol(cls, path):
            return MemoryFileSystem._strip_protocol(path.removeprefix("flakymem://"))

        def get_file(self, rpath, lpath, **kw):
            n = self.fails.get(rpath, 0)
            if n:
                self.fails[rpath] = n - 1
                raise ConnectionError("connection reset")
            return super().get_file(rpath, lpath, **kw)

    fsspec.register_implementation("flakymem", FlakyMemory, clobber=True)
    monkeypatch.setattr(remote, "BACKOFF_S", 0.001)
    generate(tmp_path / "t", ranks=2, steps=1, seed=1, kernels_per_step=10)
    fs = FlakyMemory()
    for name in ("rank-0.json.gz", "rank-1.json.gz"):
        fs.pipe_file(f"/job/{name}", (tmp_path / "t" / name).read_bytes())
    FlakyMemory.fails = {"/job/rank-1.json.gz": 2}
    res = dtrace.analyze("flakymem://job/", scheduler="sync")
    assert res.manifest["n_failed"] == 0, [i["error"] for i in res.manifest["inputs"]]
    assert sorted(res.breakdown["rank"]) == [0, 1]
    assert FlakyMemory.fails["/job/rank-1.json.gz"] == 0
    # the memory file system states no identity: the content's fingerprint keys the cache
    assert {i["identity"] for i in res.manifest["inputs"]} == {""}


def test_an_object_without_identity_is_checked_by_its_content(tmp_path):
    """A store that states no identity (fsspec's memory file system, like a plain web server):
    an object rewritten with other content of the same size must be analysed again, never taken
    as up to date from its unchanged size."""
    import re
    import uuid

    import fsspec

    generate(tmp_path / "t", ranks=2, steps=1, seed=1, kernels_per_step=10, gzip=False)
    fs = fsspec.filesystem("memory")
    root = f"/noid-{uuid.uuid4().hex}/job"
    for name in ("rank-0.json", "rank-1.json"):
        fs.pipe_file(f"{root}/{name}", (tmp_path / "t" / name).read_bytes())
    out = str(tmp_path / "out")
    # read before the second run replaces the folder (the results of a run with OUT read from it)
    first = in_memory(dtrace.analyze(f"memory://{root}/", out=out, scheduler="sync"))
    assert first.manifest["n_failed"] == 0 and {i["identity"] for i in first.manifest["inputs"]} == {""}
    # a kernel of rank 1 made longer, the file's size unchanged (one digit of its duration)
    text = (tmp_path / "t" / "rank-1.json").read_text()
    m = re.compile(r'"cat":"kernel".*?"dur":(\d)').search(text)
    changed = text[: m.start(1)] + ("1" if m.group(1) == "9" else "9") + text[m.end(1) :]
    assert len(changed) == len(text) and changed != text
    fs.pipe_file(f"{root}/rank-1.json", changed.encode())
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "rank-0.json").write_text((tmp_path / "t" / "rank-0.json").read_text())
    (tmp_path / "local" / "rank-1.json").write_text(changed)
    again = dtrace.analyze(f"memory://{root}/", out=out, scheduler="sync")
    assert not again.manifest.get("up_to_date")
    local = dtrace.analyze(str(tmp_path / "local"), scheduler="sync")
    cols = ["rank", "busy_ns", "computation_ns", "total_ns"]
    pd.testing.assert_frame_equal(again.breakdown[cols], local.breakdown[cols])
    assert not again.breakdown[cols].equals(first.breakdown[cols])


def test_results_written_to_and_loaded_from_s3(env, job, tmp_path):
    d, local = job
    _upload(env, d / "traces", "run6")
    url, out = f"s3://{BUCKET}/run6/", f"s3://{BUCKET}/results6/"
    cache = str(tmp_path / "cache")
    res = dtrace.analyze(url, out, cache=cache, scheduler="sync")
    assert res.manifest["n_failed"] == 0
    keys = {o["Key"] for o in env.client().list_objects_v2(Bucket=BUCKET, Prefix="results6/")["Contents"]}
    assert "results6/manifest.json" in keys and "results6/breakdown.parquet" in keys
    assert not any("/cache/" in k for k in keys)  # the ingest cache stays local
    back = dtrace.load(out)
    _same(back, local)
    env.reset()  # up to date: the results are read back, no trace object is requested
    again = dtrace.analyze(url, out, cache=cache, scheduler="sync")
    assert again.manifest.get("up_to_date") is True and _objects(env.counts("GET")) == {}
    _same(again, local)
    import subprocess
    import sys

    show = subprocess.run([sys.executable, "-m", "dtrace", "show", out, "breakdown"], capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert len([ln for ln in show.stdout.splitlines() if ln.strip()[:2].strip().isdigit()]) >= N_RANKS
    env.deny(BUCKET, "results7/.dtrace-probe")  # a results location the store refuses: one line, before any work
    with pytest.raises(dtrace.errors.OutputError, match=r"^s3://traces/results7/: cannot write results there"):
        dtrace.analyze(url, f"s3://{BUCKET}/results7/", cache=cache, scheduler="sync")


def test_an_object_over_the_size_limit_is_refused_before_its_download(env, job, tmp_path):
    """Issue 31: ``--max-input-size`` was checked after the download (a 200 MB object, a 1 MB
    limit: 6 GETs). An object larger than the limit (its size from its HEAD) holds more content
    than the limit: refused in one line, no GET at all; a smaller object whose content is larger
    is refused once read, as before."""
    d, local = job
    _upload(env, d / "traces", "run9")
    sizes = {n: os.path.getsize(d / "traces" / n) for n in os.listdir(d / "traces") if n.endswith(".json.gz")}
    limit = sorted(sizes.values())[len(sizes) // 2]
    res = dtrace.analyze(f"s3://{BUCKET}/run9/", str(tmp_path / "out"), scheduler="sync", max_input_size=f"{limit}B")
    failed = {i["path"].rsplit("/", 1)[1]: i["error"] for i in res.manifest["inputs"] if i["status"] == "error"}
    assert set(failed) == set(sizes)  # their content is larger than the limit, every one
    assert all("larger than the input size limit" in e and "\n" not in e for e in failed.values())
    gets = env.counts("GET")
    over = [n for n, size in sizes.items() if size > limit]
    assert over and all(gets[_key(f"run9/{n}")] == 0 for n in over)
    assert all(gets[_key(f"run9/{n}")] == 1 for n in sizes if n not in over)

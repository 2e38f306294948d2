"""The Dask layer: a real LocalCluster gives the synchronous result; tasks carry paths, not data;
a task that fails is split and only its bad item fails."""

import os
import pickle
import subprocess
import sys
import time

import pandas as pd
import pytest
from testpaths import ROOT

import dtrace
from dtrace.core import memory
from dtrace.core.memory import _jemalloc
from dtrace.execution.engine import ClusterSpec, Engine, TaskFailure
from dtrace.execution.tasks import analyze_partition, ingest_files
from dtrace.options import Options
from dtrace.partitions.layout import plan_partitions

EXAMPLES = os.path.join(ROOT, "examples", "traces")


def _sorted(df):
    return df.sort_values(list(df.columns[:3])).reset_index(drop=True)


def test_local_cluster_matches_synchronous(tmp_path):
    sync = dtrace.analyze(EXAMPLES, scheduler="sync")
    dist = dtrace.analyze(EXAMPLES, str(tmp_path / "o"), scheduler="local", workers=2)
    assert dist.manifest["workers"] == 2 and dist.manifest["execution"] == "local cluster"
    assert sync.manifest["execution"] == "in-process"
    for t in ("breakdown", "streams", "steps", "kernels"):
        pd.testing.assert_frame_equal(_sorted(sync.table(t)), _sorted(dist.table(t)), check_dtype=False)


def test_small_job_runs_in_process_by_default(tmp_path):
    r = dtrace.analyze(EXAMPLES, str(tmp_path / "o"))
    assert r.manifest["execution"] == "in-process"


def test_task_payloads_are_small(tmp_path):
    """What travels to a worker is paths and options; what comes back is small frames."""
    from dtrace.ingest.ranks import resolve_ranks

    files = [os.path.join(EXAMPLES, f) for f in sorted(os.listdir(EXAMPLES)) if f.endswith(".json.gz")]
    recs = ingest_files(files, str(tmp_path))
    specs = resolve_ranks(recs).specs
    partition = plan_partitions(specs)[0]
    assert len(partition.parts) == 2
    assert len(pickle.dumps((partition, Options()))) < 4_000
    assert all(len(pickle.dumps(r)) < 4_000 for r in recs)
    out = analyze_partition(partition, Options())
    n_events = sum(r.parts[0].n_events for r in recs)
    returned_rows = sum(len(df) for df in out.tables.values())
    assert returned_rows < n_events / 2  # aggregates, not events


def test_engine_map_sync_keeps_order():
    with Engine(ClusterSpec(scheduler="sync")) as eng:
        assert eng.map(pow, [1, 2, 3], 2) == [1, 4, 9]


def _fails_on_three(items):
    if 3 in items:
        raise RuntimeError("bad item")
    return [i * 10 for i in items]


def test_failed_task_is_split_and_only_its_bad_item_fails():
    def split(items):
        return [[i] for i in items] if len(items) > 1 else None

    with Engine(ClusterSpec(scheduler="sync")) as eng:
        out = eng.map(_fails_on_three, [[1, 2], [3, 4], [5]], split=split)
    assert out[0] == [10, 20] and out[2] == [40] and out[3] == [50]
    assert isinstance(out[1], TaskFailure) and out[1].item == [3] and "bad item" in out[1].reason


def test_failed_task_is_split_on_a_cluster():
    def split(items):
        return [[i] for i in items] if len(items) > 1 else None

    with Engine(ClusterSpec(scheduler="local", workers=1)).start() as eng:
        out = eng.map(_fails_on_three, [[1, 2], [3, 4], [5]], split=split)
    assert out[0] == [10, 20] and out[2] == [40] and out[3] == [50]
    assert isinstance(out[1], TaskFailure) and out[1].item == [3]


def test_dask_scratch_space_is_a_folder_of_the_run_and_removed(tmp_path, monkeypatch):
    """Issue 19, item 12: the workers' folders go under TMPDIR in a folder of this run (not the
    shared ``dask-scratch-space``), and nothing is left there when the run ends."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    monkeypatch.setattr(memory, "_USER_MALLOC", False)  # whatever MALLOC_* the runner has
    environ = dict(os.environ)
    with Engine(ClusterSpec(scheduler="local", workers=1)).start() as eng:
        dirs = list(eng.client.run(lambda dask_worker: dask_worker.local_directory).values())
        pools = set(eng.client.run(_arrow_pool).values())
        assert list(eng.client.run(_profiling).values()) == [False]  # Dask's sampling profiler off
        assert eng._cluster.scheduler_spec["options"]["dashboard"] is False  # no dashboard (nor bokeh) served
        # the workers allocate with dtrace's heap settings: they keep what a task frees for the next
        assert list(eng.client.run(_heap).values()) == [(memory.MALLOC_SETTINGS["MALLOC_TRIM_THRESHOLD_"], "1", True)]
        assert pools == {_expected_pool()}  # the workers dtrace starts allocate Arrow memory from jemalloc
        assert eng.map(abs, [-1, 2]) == [1, 2]
        (run_dir,) = os.listdir(tmp)
        assert run_dir.startswith("dtrace-dask-") and dirs and all(d.startswith(str(tmp / run_dir)) for d in dirs)
    assert os.listdir(tmp) == []
    # the nannies copied the workers' environment into this process's: put back as it was
    assert dict(os.environ) == environ


class _Future:
    """A finished future as the client sees it; ``lost``: its worker died after the task finished,
    so fetching the result fails (Dask raises ``KilledWorker`` once the recomputation dies too)."""

    def __init__(self, value=None, error=None, lost=False):
        self.value, self.error, self.lost = value, error, lost
        self.status = "error" if error is not None else "finished"

    def result(self):
        if self.lost:
            from distributed.scheduler import KilledWorker

            raise KilledWorker("task", None, 0)
        if self.error is not None:
            raise self.error
        return self.value

    def exception(self):
        return self.error

    def release(self):
        pass


class _Client:
    """Runs tasks at once; the results of ``lose[item]`` attempts at an item are lost."""

    def __init__(self, lose):
        self.lose, self.tries = dict(lose), {}

    def submit(self, func, item, *args, pure=False, retries=0):
        key = repr(item)
        self.tries[key] = self.tries.get(key, 0) + 1
        if self.tries[key] <= self.lose.get(key, 0):
            return _Future(lost=True)
        try:
            return _Future(func(item, *args))
        except Exception as exc:  # noqa: BLE001 - what a worker would report
            return _Future(error=exc)


class _AsCompleted:
    def __init__(self, futures):
        self.queue = list(futures)

    def add(self, f):
        self.queue.append(f)

    def __iter__(self):
        while self.queue:
            yield self.queue.pop(0)


def test_a_result_lost_after_its_task_finished_is_run_again_not_raised(monkeypatch):
    """Issue 19, item 13: ``f.result()`` on a finished future whose worker then died raised
    ``KilledWorker`` out of the run. A lost result takes the path of any failed task: split, else
    run again alone; only an item whose every attempt is lost fails, with the worker's death as
    its reason."""
    import distributed

    monkeypatch.setattr(distributed, "as_completed", _AsCompleted)

    def split(items):
        return [[i] for i in items] if len(items) > 1 else None

    eng = Engine(ClusterSpec(scheduler="sync"))
    # [1, 2]: lost once, then split and read; [4]: lost once, run again alone; [5]: lost every time
    eng.client = _Client({repr([1, 2]): 1, repr([4]): 1, repr([5]): 9})
    out = eng.map(_fails_on_three, [[1, 2], [3], [4], [5]], split=split)
    assert out[:2] == [[10], [20]] and out[3] == [40]
    assert isinstance(out[2], TaskFailure) and "bad item" in out[2].reason
    assert isinstance(out[4], TaskFailure) and out[4].item == [5] and "worker process died" in out[4].reason


@pytest.mark.timeout(180)
def test_a_local_cluster_gets_back_a_worker_whose_nanny_gave_up():
    """A killed worker is restarted by its nanny; a nanny whose restart fails (a loaded machine)
    closes for good, and with every worker gone the run waited forever (issue 19, item 13:
    ``tests/test_killed_worker.py`` hung so). The engine replaces such a nanny, and leaves
    dask's settings as they were."""
    import dask

    before = dask.config.get("distributed.deploy.lost-worker-timeout")
    profiling = dask.config.get("distributed.worker.profile.enabled")
    with Engine(ClusterSpec(scheduler="local", workers=1)).start() as eng:
        ((name, nanny),) = eng._cluster.workers.items()
        eng._cluster.sync(nanny.close, reason="its worker could not be restarted")
        assert eng.map(abs, [-1, -2]) == [1, 2]
        # the new worker serves the scheduler before the cluster files its nanny: wait for that
        deadline = time.monotonic() + 30
        while not eng._cluster.workers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [w.status.name for w in eng._cluster.workers.values()] == ["running"]
        # the replacement runs with the workers' settings too (WORKER_CONFIG: no sampling profiler)
        assert list(eng.client.run(_profiling).values()) == [False]
    assert dask.config.get("distributed.deploy.lost-worker-timeout") == before
    assert dask.config.get("distributed.worker.profile.enabled") == profiling  # the client's settings as they were


def _profiling(dask_worker):
    """Whether the worker's sampling profiler runs (Dask's setting as the worker sees it)."""
    import dask

    return dask.config.get("distributed.worker.profile.enabled")


def _heap():
    """The worker's heap settings as its environment states them, and whether it keeps free pages."""
    return os.environ.get("MALLOC_TRIM_THRESHOLD_"), os.environ.get("MALLOC_ARENA_MAX"), memory.keeps_free_pages()


def test_heap_settings_of_dtraces_own_processes_and_the_users_left_alone(monkeypatch):
    """dtrace's workers and its command's process keep what a task freed (MALLOC_SETTINGS); a
    process that does not (a user's, calling dtrace.analyze) gives it back after each ingest task;
    the user's own MALLOC_* settings are never replaced."""
    monkeypatch.setattr(memory, "_USER_MALLOC", False)  # whatever MALLOC_* the runner has
    env = memory.worker_env()
    assert {k: env[k] for k in memory.MALLOC_SETTINGS} == memory.MALLOC_SETTINGS and env["MALLOC_ARENA_MAX"] == "1"
    assert "MALLOC_ARENA_MAX" not in memory.worker_env(threads=4)  # several task threads: their own heaps
    monkeypatch.setattr(memory, "_USER_MALLOC", True)
    assert not set(memory.worker_env()) & {*memory.MALLOC_SETTINGS, *memory.WORKER_ARENAS}
    assert memory.tune_malloc() is False  # the user's settings stand
    monkeypatch.setattr(memory, "_USER_MALLOC", False)

    trims: list[int] = []
    monkeypatch.setattr(memory, "_libc_function", lambda name: trims.append if name == "malloc_trim" else None)
    monkeypatch.setattr(memory, "_STARTED_WITH_SETTINGS", False)
    monkeypatch.setattr(memory, "_tuned", False)
    for k, v in memory.MALLOC_SETTINGS.items():  # a local cluster's nannies copy them here: not the process's own
        monkeypatch.setenv(k, v)
    memory.release_memory()
    assert trims == [0]  # a user's process: trimmed as before
    monkeypatch.setattr(memory, "_tuned", True)
    memory.release_memory()
    assert trims == [0]  # the command's process keeps its free pages
    monkeypatch.setattr(memory, "_tuned", False)
    monkeypatch.setattr(memory, "_STARTED_WITH_SETTINGS", True)
    memory.release_memory()
    assert trims == [0]  # nor does a worker started with the settings


def test_the_command_process_takes_the_heap_settings():
    """:func:`~dtrace.core.memory.tune_malloc` (what ``dtrace`` calls first) sets glibc's thresholds in
    its own process, unless the user set theirs in the environment."""
    code = "from dtrace.core import memory as m; print(m.tune_malloc(), m.keeps_free_pages())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    mine = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert mine.stdout.split() == ["True", "True"]
    theirs = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**env, "MALLOC_TRIM_THRESHOLD_": "65536"},
        check=True,
    )
    assert theirs.stdout.split() == ["False", "False"]


def _arrow_pool():
    import pyarrow

    return pyarrow.default_memory_pool().backend_name


def _expected_pool():
    import pyarrow

    try:
        pyarrow.jemalloc_memory_pool()
    except NotImplementedError:
        return pyarrow.default_memory_pool().backend_name
    return "jemalloc"


def test_in_process_run_allocates_from_jemalloc_and_puts_the_pool_back(tmp_path):
    """Arrow's default mimalloc pool keeps what reading freed under the analyses (bench/RESULTS.md,
    Memory): dtrace's own tasks use jemalloc, and the caller's process gets its pool back."""
    seen = []

    def pool_seen(batch):
        seen.append(_arrow_pool())
        return batch.parts[["rank", "device"]]

    before = _arrow_pool()
    dtrace.analyze(
        EXAMPLES,
        str(tmp_path / "o"),
        scheduler="sync",
        analyses=[dtrace.Analysis("pool", pool_seen, {"rank": "int32", "device": "int32"})],
    )
    assert seen and set(seen) == {_expected_pool()}
    assert _arrow_pool() == before


def test_a_pool_the_user_chose_is_left_alone(monkeypatch):
    from dtrace.core import memory

    monkeypatch.setattr(memory, "_USER_POOL", "system")  # what ARROW_DEFAULT_MEMORY_POOL said when dtrace started
    assert memory.ARROW_POOL not in memory.worker_env()
    before = _arrow_pool()
    with Engine(ClusterSpec(scheduler="sync")):
        assert _arrow_pool() == before


_PRESTART = """
import json, os, sys
from dtrace.execution.engine import ClusterSpec, Engine, prestart_workers, wants_cluster

def where(_):
    import pyarrow
    return [os.getppid(), "dtrace.execution.tasks" in sys.modules, pyarrow.default_memory_pool().backend_name,
            os.environ.get("DTRACE_TEST_SET_LATER")]

if __name__ == "__main__":
    from multiprocessing import forkserver
    small = prestart_workers(ClusterSpec(workers=2), 0.5, 8)  # auto, too little work: no server
    sync = prestart_workers(ClusterSpec(scheduler="sync", workers=2), 100.0, 8)
    started = prestart_workers(ClusterSpec(workers=2), 100.0, 8)
    import dtrace.api, dtrace.cli.analyze  # what the CLI imports between the prestart and the start
    with Engine(ClusterSpec(scheduler="local", workers=2)) as e:
        e.start(100.0, 8)
        got = e.map(where, [0, 1, 2, 3])
    os.environ["DTRACE_TEST_SET_LATER"] = "1"  # e.g. credentials set after the server started
    with Engine(ClusterSpec(scheduler="local", workers=2)) as e:
        e.start(100.0, 8)
        later = e.map(where, [0, 1])
    print(json.dumps({"small": small, "sync": sync, "started": started, "server": forkserver._forkserver._forkserver_pid,
                      "me": os.getpid(), "workers": got, "later": later}))
"""


def test_importing_dtrace_leaves_the_environment_as_it_was():
    """No module of dtrace changes the environment when imported (a library that sets a variable
    at import, threadpoolctl's KMP_DUPLICATE_LIB_OK, once did): a local cluster forks its workers
    from the prestarted server only while the environment is the one it started with."""
    import subprocess
    import sys

    code = (
        "import os, pkgutil, importlib, dtrace\n"
        "before = dict(os.environ)\n"
        "names = [m.name for m in pkgutil.walk_packages(dtrace.__path__, 'dtrace.') if m.name != 'dtrace.__main__']\n"
        "for n in names: importlib.import_module(n)\n"
        "changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))\n"
        "print(len(names), changed)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    count, changed = p.stdout.split(" ", 1)
    assert int(count) > 100 and changed.strip() == "[]"


def test_prestarted_workers_fork_from_a_server_with_dtrace_imported(tmp_path):
    """The CLI's process server: local workers fork from it with dtrace's tasks imported and the
    workers' Arrow pool; never for a job the auto rule runs in-process, nor for --sync; a cluster
    started after the environment changed spawns its workers (they see the change). (A fresh
    interpreter: the server lives as long as the process that started it.)"""
    import json
    import subprocess
    import sys

    script = tmp_path / "prestart.py"
    script.write_text(_PRESTART)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert (got["small"], got["sync"], got["started"]) == (False, False, True)
    assert got["server"] not in (None, got["me"])
    jemalloc = _jemalloc() is not None and "ARROW_DEFAULT_MEMORY_POOL" not in os.environ
    for ppid, imported, pool, late in got["workers"]:
        assert ppid == got["server"] and imported and late is None
        assert pool == "jemalloc" or not jemalloc
    # the environment changed since the server started: the workers are spawned and see it
    assert all(ppid != got["server"] and late == "1" for ppid, _, _, late in got["later"])

"""The job scripts in ``jobs/`` and the dask-jobqueue launcher, run for real.

- ``jobs/slurm/dtrace.sbatch`` submitted to a private single-node Slurm cluster (Debian
  ``slurm-wlm`` + ``munge``) that the ``slurm`` fixture configures in a temporary directory and
  starts on 127.0.0.1 (free ports, its own munge socket, nothing under /etc) and stops at the
  end; its time-out path through the very signal Slurm sends before the time limit;
- ``dtrace analyze --cluster slurm`` (dask-jobqueue) submitting its workers to that cluster;
- the script's failure paths with a stand-in ``srun`` that runs the tasks on this machine (no
  Slurm needed); the PBS script with a fake ``$PBS_NODEFILE`` and a stand-in remote shell;
  the dask-mpi script with a real MPI launcher.

Every run's tables are compared with the synchronous run's. Every cluster runs on loopback
(``DTRACE_INTERFACE=lo``).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from _stall import preload_env, release, stall

import dtrace
from dtrace.errors import UsageError
from dtrace.execution.engine import ClusterSpec, Engine
from dtrace.generate.synth import generate

ROOT = Path(__file__).resolve().parent.parent
SBATCH = ROOT / "jobs" / "slurm" / "dtrace.sbatch"
PBS = ROOT / "jobs" / "pbs" / "dtrace.pbs"
MPI = ROOT / "jobs" / "mpi" / "dtrace-mpi.sh"
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def which(name: str) -> str | None:
    return shutil.which(name, path=SBIN)


# --------------------------------------------------------------------------------------------
# shared inputs


@pytest.fixture(scope="module")
def job4(tmp_path_factory):
    """A generated 4-rank job and its synchronous results."""
    d = tmp_path_factory.mktemp("job4")
    generate(d / "traces", ranks=4, steps=2, seed=2)
    ref = dtrace.analyze(str(d / "traces" / "rank-*.json.gz"), d / "sync", scheduler="sync")
    return str(d / "traces" / "rank-*.json.gz"), dtrace.load(ref.path)


def assert_same_tables(out: str | Path, ref: dtrace.Results) -> dtrace.Results:
    got = dtrace.load(out)
    assert sorted(got.manifest["tables"]) == sorted(ref.manifest["tables"])
    for name in ref.manifest["tables"]:
        pd.testing.assert_frame_equal(got.table(name), ref.table(name), check_exact=True, obj=name)
    return got


def leftover_processes(marker: str, timeout: float = 30.0) -> list[str]:
    """Command lines of processes still mentioning ``marker`` once ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for cmd in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(cmd, "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in line and str(os.getpid()) not in cmd:
                found.append(line)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def job_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DTRACE_PYTHON": sys.executable,
        "DTRACE_INTERFACE": "lo",
        "DTRACE_STARTUP_TIMEOUT": "120",
        **extra,
    }


# --------------------------------------------------------------------------------------------
# a private single-node Slurm cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Slurm:
    """munged + slurmctld + slurmd for one node (this host, 127.0.0.1), all under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []
        for sub in ("munge", "run", "spool/ctld", "spool/d", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(root / "munge", 0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.socket = root / "run" / "munge.sock"
        host = socket.gethostname().split(".")[0]
        mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        self.conf = root / "slurm.conf"
        self.conf.write_text(
            textwrap.dedent(f"""\
            ClusterName=dtracetest
            SlurmctldHost={host}(127.0.0.1)
            SlurmctldPort={_free_port()}
            SlurmdPort={_free_port()}
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            AuthInfo=socket={self.socket}
            CredType=cred/munge
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            SelectType=select/cons_tres
            SelectTypeParameters=CR_Core
            StateSaveLocation={root}/spool/ctld
            SlurmdSpoolDir={root}/spool/d
            SlurmctldPidFile={root}/run/slurmctld.pid
            SlurmdPidFile={root}/run/slurmd.pid
            SlurmctldLogFile={root}/log/slurmctld.log
            SlurmdLogFile={root}/log/slurmd.log
            MailProg=/bin/true
            ReturnToService=2
            MpiDefault=none
            NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={mem_mb // 2} State=UNKNOWN
            PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
            """)
        )
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _daemon(self, *cmd: str) -> None:
        log = open(self.root / "log" / f"{Path(cmd[0]).name}.out", "ab")
        try:
            self.procs.append(
                subprocess.Popen(
                    list(cmd),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    start_new_session=True,
                )
            )
        finally:
            log.close()

    def logs(self) -> str:
        parts = []
        for f in sorted((self.root / "log").iterdir()):
            parts.append(f"--- {f.name}\n{f.read_text(errors='replace')[-1500:]}")
        return "\n".join(parts)

    def start(self) -> None:
        self._daemon(
            which("munged"),
            "--foreground",
            "--force",
            f"--socket={self.socket}",
            f"--key-file={self.root}/munge/munge.key",
            f"--pid-file={self.root}/run/munged.pid",
            f"--seed-file={self.root}/munge/seed",
            f"--log-file={self.root}/log/munged.log",
        )
        self._wait(lambda: self.socket.exists(), "munged did not create its socket")
        self._daemon(which("slurmctld"), "-D", "-f", str(self.conf))
        self._wait(
            lambda: self.run("scontrol", "ping", check=False).stdout.count("UP") > 0, "slurmctld does not answer"
        )
        self._daemon(which("slurmd"), "-D", "-f", str(self.conf))
        self._wait(
            lambda: self.run("sinfo", "-h", "-o", "%T", check=False).stdout.strip() == "idle",
            "the node did not become idle",
        )

    def _wait(self, ok, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                pytest.fail(f"private Slurm: {what} (exited: {dead})\n{self.logs()}")
            time.sleep(0.3)

    def run(self, *cmd: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [which(cmd[0]) or cmd[0], *cmd[1:]],
            capture_output=True,
            text=True,
            env=self.env,
            check=check,
            timeout=60,
            cwd=cwd,
        )

    def job(self, job_id: str) -> dict[str, str]:
        out = self.run("scontrol", "show", "job", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait_job(self, job_id: str, timeout: float = 240.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info["JobState"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                return info
            assert time.monotonic() < deadline, f"job {job_id} still {info['JobState']}\n{self.logs()}"
            time.sleep(0.5)

    def stop(self) -> None:
        if self.procs and self.procs[-1].poll() is None:
            self.run("scancel", "--user", "root", check=False)
            deadline = time.monotonic() + 30
            while self.run("squeue", "-h", check=False).stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.5)
        for p in reversed(self.procs):  # slurmd, slurmctld, munged
            _stop(p)


def _slurm_missing() -> str | None:
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol") if not which(b)]
    if missing:
        return f"Slurm is not installed here (missing {', '.join(missing)}; apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a private Slurm cluster needs root here (SlurmUser/SlurmdUser=root, slurmd starts jobs)"
    return None


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = _slurm_missing()
    if reason:
        pytest.skip(reason)
    s = Slurm(tmp_path_factory.mktemp("slurm"))
    try:
        s.start()
        yield s
    finally:
        s.stop()


# --------------------------------------------------------------------------------------------
# the sbatch script on real Slurm


@pytest.mark.slow
def test_sbatch_script_on_real_slurm(slurm, job4, tmp_path):
    pattern, ref = job4
    out = tmp_path / "results"
    r = slurm.run(
        "sbatch",
        "--parsable",
        "--ntasks=2",
        "--mem-per-cpu=1000",
        f"--chdir={tmp_path}",
        "--output=job-%j.out",
        str(SBATCH),
        pattern,
        "-o",
        str(out),
        cwd=tmp_path,
    )
    job_id = r.stdout.strip().split(";")[0]
    info = slurm.wait_job(job_id)
    text = (tmp_path / f"job-{job_id}.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", text
    assert "2 workers connected; running dtrace analyze" in text
    assert "shutting the Dask cluster down" in text and "done (exit status 0)" in text
    assert "dtrace: 4 inputs, 4 (rank, device) parts, 0 failed" in text
    got = assert_same_tables(out, ref)
    assert got.manifest["workers"] == 2
    job_dir = tmp_path / f"dtrace-job-{job_id}"
    assert sorted(p.name for p in job_dir.glob("*.log")) == [
        "scheduler.log",
        "shutdown.log",
        "worker-0.log",
        "worker-1.log",
    ]
    assert not (job_dir / "scheduler.json").exists()
    assert leftover_processes(str(job_dir)) == []


@pytest.mark.slow
def test_sbatch_time_limit_signal_stops_dtrace_and_the_cluster(slurm, job4, tmp_path):
    """The job gets SIGUSR1 from Slurm (``scancel --batch --signal=USR1``: what the script's
    ``--signal=B:USR1@60`` makes Slurm send before the time limit) while dtrace is stuck
    reading an input (a read that hangs: see ``tests/_stall.py``): the job ends 124, cluster
    gone, no results."""
    stuck = tmp_path / "rank-0.json.gz"
    shutil.copy(glob.glob(job4[0])[0], stuck)
    stall(stuck)
    (preload,) = preload_env().items()
    out = tmp_path / "results"
    r = slurm.run(
        "sbatch",
        "--parsable",
        "--ntasks=2",
        "--mem-per-cpu=1000",
        f"--chdir={tmp_path}",
        "--output=job-%j.out",
        f"--export=ALL,{preload[0]}={preload[1]}",
        str(SBATCH),
        str(stuck),
        "-o",
        str(out),
        cwd=tmp_path,
    )
    job_id = r.stdout.strip().split(";")[0]
    log = tmp_path / f"job-{job_id}.out"
    deadline = time.monotonic() + 180
    while not (log.exists() and "running dtrace analyze" in log.read_text()):
        assert time.monotonic() < deadline and slurm.job(job_id)["JobState"] in ("PENDING", "RUNNING"), (
            log.read_text() if log.exists() else slurm.logs()
        )
        time.sleep(0.3)
    time.sleep(2)  # dtrace is now stuck reading the input
    slurm.run("scancel", "--batch", "--signal=USR1", job_id)
    try:
        info = slurm.wait_job(job_id)
    finally:
        release(stuck)  # whatever happened, free a reader still waiting
    text = log.read_text()
    assert info["ExitCode"] == "124:0", text
    assert "time limit near (SIGUSR1): stopping dtrace and the Dask cluster" in text
    assert "shutting the Dask cluster down" in text and "done (exit status 124)" in text
    assert not (out / "manifest.json").exists()
    assert leftover_processes(str(tmp_path / f"dtrace-job-{job_id}")) == []


# --------------------------------------------------------------------------------------------
# the dask-jobqueue launcher


def test_cluster_spec_validates_job_settings():
    with pytest.raises(UsageError, match="unknown cluster 'sge'; choose one of: slurm, pbs"):
        ClusterSpec(cluster="sge")
    with pytest.raises(UsageError, match="not both"):
        ClusterSpec(cluster="slurm", scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(UsageError, match="need a cluster"):
        ClusterSpec(jobs=2)
    with pytest.raises(UsageError, match="jobs must be >= 1"):
        ClusterSpec(cluster="pbs", jobs=0)


def test_cluster_without_dask_jobqueue_is_a_clear_error(monkeypatch, job4, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # import fails as if not installed
    with pytest.raises(UsageError, match=r"--cluster slurm needs dask-jobqueue: pip install 'dtrace\[jobqueue\]'"):
        with Engine(ClusterSpec(cluster="slurm", jobs=1)).start():
            pass
    from dtrace.cli.main import main

    assert main(["analyze", job4[0], "-o", str(tmp_path / "out"), "--cluster", "pbs", "--jobs", "2"]) == 2
    assert "error: --cluster pbs needs dask-jobqueue: pip install 'dtrace[jobqueue]'" in capsys.readouterr().err


def test_jobqueue_pbs_job_script_carries_the_settings(monkeypatch):
    """No PBS here: check the job script dask-jobqueue would submit for ``--cluster pbs``."""
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed (pip install 'dtrace[jobqueue]')")
    from dtrace.core import memory
    from dtrace.execution.engine import _jobqueue_cluster

    monkeypatch.setattr(memory, "_USER_MALLOC", False)  # whatever MALLOC_* the runner has

    opts = {
        "cores": 4,
        "memory": "16GiB",
        "queue": "normal",
        "account": "proj42",
        "walltime": "00:20:00",
        "interface": "lo",
    }
    cluster = _jobqueue_cluster(ClusterSpec(cluster="pbs", jobs=3, cluster_options=opts))
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    for line in ("#PBS -q normal", "#PBS -A proj42", "#PBS -l select=1:ncpus=4:mem=16GB", "#PBS -l walltime=00:20:00"):
        assert line in script.splitlines()
    worker = next(line for line in script.splitlines() if "distributed.cli.dask_worker" in line)
    # this environment's Python; four single-threaded worker processes per job
    assert worker.startswith(f"{sys.executable} -m distributed.cli.dask_worker tcp://127.0.0.1:")
    assert " --nthreads 1 " in worker and " --nworkers 4 " in worker and "--interface lo" in worker
    # the workers' Dask settings dtrace starts its local clusters with (no sampling profiler)
    assert "export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False" in script.splitlines()
    assert cluster.scheduler_spec["options"]["dashboard"] is False  # no dashboard, as a local cluster
    # the workers' heap settings (dtrace.core.memory.MALLOC_SETTINGS), which the nanny keeps as they are
    lines = script.splitlines()
    assert "export MALLOC_TRIM_THRESHOLD_=1073741824" in lines and "export MALLOC_ARENA_MAX=1" in lines
    spawn = next(line for line in lines if line.startswith("export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON="))
    assert "'MALLOC_TRIM_THRESHOLD_': '1073741824'" in spawn and "'MALLOC_MMAP_THRESHOLD_': '33554432'" in spawn


@pytest.mark.slow
@pytest.mark.parametrize("script", ["slurm/dtrace.sbatch", "pbs/dtrace.pbs", "mpi/dtrace-mpi.sh"])
def test_job_scripts_give_the_workers_dtraces_settings(monkeypatch, script):
    """The job scripts (shell: they cannot import dtrace) spell out the workers' settings: their
    nannies' environment is what ``dtrace.core.memory.worker_env`` gives a worker of as many task
    threads, the user's own values where set, and Dask's sampling profiler is off
    (``engine.WORKER_CONFIG``) unless the user set it."""
    import ast

    from dtrace.core import memory
    from dtrace.execution.engine import WORKER_CONFIG, _env_name

    monkeypatch.setattr(memory, "_USER_MALLOC", False)
    text = (ROOT / "jobs" / script).read_text()
    block = re.search(r'^if \[ -z "\$\{DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON.*?^fi\n', text, re.S | re.M).group(0)
    profile = next(
        line for line in text.splitlines() if line.startswith(f"export {_env_name(next(iter(WORKER_CONFIG)))}=")
    )

    def nanny_env(**env: str) -> tuple[dict, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "DASK_", "DTRACE_"))}
        code = f'{block}{profile}\necho "$DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON"\necho "${_env_name(next(iter(WORKER_CONFIG)))}"'
        out = subprocess.run(["bash", "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
        spawn, prof = out.stdout.splitlines()
        return ast.literal_eval(spawn), prof

    for threads in (1, 4):
        spawn, prof = nanny_env(DTRACE_THREADS=str(threads))
        want = {k: v for k, v in memory.worker_env(threads=threads).items() if k.startswith("MALLOC_")}
        assert spawn == want and prof == str(WORKER_CONFIG["distributed.worker.profile.enabled"])
    spawn, prof = nanny_env(MALLOC_TRIM_THRESHOLD_="65536", DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED="True")
    assert spawn["MALLOC_TRIM_THRESHOLD_"] == "65536" and prof == "True"  # the user's own stand


def test_jobqueue_launcher_submits_workers_to_real_slurm(slurm, job4, tmp_path):
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed (pip install 'dtrace[jobqueue]')")
    pattern, ref = job4
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dtrace",
            "analyze",
            pattern,
            "-o",
            str(tmp_path / "out"),
            "--cluster",
            "slurm",
            "--jobs",
            "1",
            "--job-cores",
            "2",
            "--job-memory",
            "2GiB",
            "--walltime",
            "00:10:00",
            "--interface",
            "lo",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=slurm.env,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    got = assert_same_tables(tmp_path / "out", ref)
    assert got.manifest["workers"] == 2  # one job, two single-threaded worker processes
    logs = list(tmp_path.glob("slurm-*.out"))  # the worker job ran under Slurm ...
    assert len(logs) == 1 and "Start worker at:      tcp://127.0.0.1:" in logs[0].read_text()
    deadline = time.monotonic() + 30  # ... and was cancelled when dtrace finished
    while slurm.run("squeue", "-h").stdout.strip():
        assert time.monotonic() < deadline, slurm.run("squeue").stdout
        time.sleep(0.5)


# --------------------------------------------------------------------------------------------
# the sbatch script's logic without Slurm: a stand-in srun runs the tasks here

FAKE_SRUN = r"""#!/usr/bin/env bash
# stand-in for srun inside an allocation: --ntasks copies of the command on this machine,
# SLURM_PROCID set, --output=PATTERN (%t: task id), SIGTERM/SIGINT forwarded to the tasks
ntasks=1 output=""
while [[ $# -gt 0 && "$1" == -* ]]; do
  case "$1" in
    --ntasks=*) ntasks=${1#*=} ;;
    --output=*) output=${1#*=} ;;
  esac
  shift
done
echo "ntasks=$ntasks $*" >>"$FAKE_SRUN_LOG"
pids=()
for ((t = 0; t < ntasks; t++)); do
  out=/dev/stderr
  [[ -n "$output" ]] && out=${output//%t/$t}
  SLURM_PROCID=$t "$@" >"$out" 2>&1 &
  pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
"""


def fake_allocation(tmp_path: Path, ntasks: int = 2, **env: str) -> dict[str, str]:
    srun = tmp_path / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    return job_env(
        **{
            "SLURM_JOB_ID": "4242",
            "SLURM_NTASKS": str(ntasks),
            "SLURM_SUBMIT_DIR": str(tmp_path),
            "DTRACE_SRUN": str(srun),
            "FAKE_SRUN_LOG": str(tmp_path / "srun.log"),
            **env,
        }
    )


def run_script(script: Path, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def test_sbatch_script_refuses_to_run_outside_slurm_or_without_inputs(tmp_path):
    env = {k: v for k, v in job_env().items() if not k.startswith("SLURM_")}
    r = run_script(SBATCH, "x", "-o", "y", env=env, cwd=tmp_path)
    assert r.returncode == 2 and "not inside a Slurm job (SLURM_JOB_ID is unset)" in r.stderr
    r = run_script(SBATCH, env=fake_allocation(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and "nothing to analyse: pass 'INPUT... -o OUT'" in r.stderr
    assert not (tmp_path / "dtrace-job-4242").exists()  # no cluster was started


@pytest.mark.slow
def test_sbatch_script_shuts_the_cluster_down_when_dtrace_fails(tmp_path):
    """Only a bad input: dtrace exits 2 (nothing analysable); the job exits 2, the cluster is
    closed. Parameters come from DTRACE_INPUT / DTRACE_OUT this time."""
    bad = tmp_path / "traces" / "rank-0.json.gz"
    bad.parent.mkdir()
    bad.write_bytes(b"\x1f\x8b\x08\x00 truncated")
    env = fake_allocation(
        tmp_path, DTRACE_INPUT=str(bad.parent), DTRACE_OUT=str(tmp_path / "out"), DTRACE_ARGS="--no-progress"
    )
    r = run_script(SBATCH, env=env, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "2 workers connected; running dtrace analyze" in r.stderr
    assert "shutting the Dask cluster down" in r.stderr and "done (exit status 2)" in r.stderr
    assert f"{bad}:" in r.stdout  # dtrace's one-line error for the input
    assert (tmp_path / "srun.log").read_text().startswith("ntasks=2 ")
    assert leftover_processes(str(tmp_path / "dtrace-job-4242")) == []


@pytest.mark.slow
def test_sbatch_script_fails_fast_when_the_workers_cannot_start(tmp_path):
    env = fake_allocation(tmp_path, DTRACE_SRUN="false")
    r = run_script(SBATCH, str(tmp_path), "-o", str(tmp_path / "out"), env=env, cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "the worker step (false) exited before all workers connected" in r.stderr
    assert "done (exit status 3)" in r.stderr
    assert leftover_processes(str(tmp_path / "dtrace-job-4242")) == []


# --------------------------------------------------------------------------------------------
# PBS and dask-mpi

FAKE_RSH = r"""#!/usr/bin/env bash
# stand-in for pbs_tmrsh: records the node, runs the command here
host=$1; shift
echo "$host $*" >>"$FAKE_RSH_LOG"
exec "$@"
"""


@pytest.mark.slow
def test_pbs_script_starts_workers_on_every_node(job4, tmp_path):
    """$PBS_NODEFILE lists this host twice and another node once: two workers here, one
    started on the other node through the remote shell (a stand-in that runs it here)."""
    pattern, ref = job4
    this = socket.gethostname().split(".")[0]
    nodes = tmp_path / "nodefile"
    nodes.write_text(f"{this}\n{this}\nnode-b.cluster\n")
    rsh = tmp_path / "rsh"
    rsh.write_text(FAKE_RSH)
    rsh.chmod(0o755)
    env = job_env(
        PBS_JOBID="77.pbs-server",
        PBS_NODEFILE=str(nodes),
        PBS_O_WORKDIR=str(tmp_path),
        DTRACE_RSH=str(rsh),
        FAKE_RSH_LOG=str(tmp_path / "rsh.log"),
        DTRACE_INPUT=pattern,
        DTRACE_OUT=str(tmp_path / "out"),
        DTRACE_TIME_LIMIT="240",
    )
    r = run_script(PBS, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "3 workers on 2 nodes" in r.stderr and "stops after 240s" in r.stderr
    remote = (tmp_path / "rsh.log").read_text().splitlines()
    assert len(remote) == 1 and remote[0].startswith("node-b.cluster ") and "--nworkers 1 " in remote[0]
    got = assert_same_tables(tmp_path / "out", ref)
    assert got.manifest["workers"] == 3
    assert sorted(p.name for p in (tmp_path / "dtrace-job-77").glob("worker-*.log")) == sorted(
        {f"worker-{this}.log", "worker-node-b.log"}
    )
    assert leftover_processes(str(tmp_path / "dtrace-job-77")) == []


def _mpiexec() -> str | None:
    return shutil.which("mpiexec", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))


@pytest.mark.slow
def test_mpi_script_runs_dask_mpi(job4, tmp_path):
    pytest.importorskip("dask_mpi", reason="dask-mpi is not installed (pip install 'dtrace[mpi]')")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'dtrace[mpi]')")
    mpiexec = _mpiexec()
    if mpiexec is None:
        pytest.skip("no MPI launcher (mpiexec) found: pip install mpich, or the system's MPI")
    pattern, ref = job4
    env = job_env(DTRACE_MPIEXEC=mpiexec, DTRACE_WORKERS="2", DTRACE_JOB_DIR=str(tmp_path / "job"))
    r = run_script(MPI, pattern, "-o", str(tmp_path / "out"), env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 workers connected" in r.stderr and "done (exit status 0)" in r.stderr
    got = assert_same_tables(tmp_path / "out", ref)
    assert got.manifest["workers"] == 2
    assert leftover_processes(str(tmp_path / "job")) == []

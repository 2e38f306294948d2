#!/usr/bin/env bash
#SBATCH --job-name=dtrace-mpi
#SBATCH --ntasks=4
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@60
#SBATCH --output=dtrace-mpi-%j.out
#PBS -N dtrace-mpi
#PBS -l select=1:ncpus=4:mpiprocs=4
#PBS -l walltime=01:00:00
#PBS -j oe
#
# Analyse traces with dtrace on a Dask cluster started by dask-mpi: one MPI launch starts the
# scheduler on rank 0 and a worker on every rank (rank 0 included), inside any allocation
# that runs MPI programs (Slurm, PBS, LSF, or none for a single machine).
#
#   sbatch jobs/mpi/dtrace-mpi.sh INPUT... -o OUT [dtrace analyze flags]
#   qsub -v DTRACE_INPUT=traces,DTRACE_OUT=results jobs/mpi/dtrace-mpi.sh
#   DTRACE_WORKERS=8 bash jobs/mpi/dtrace-mpi.sh traces/ -o results     # one machine
#
# Needs `pip install 'dtrace[mpi]'` (dask-mpi, mpi4py) and an MPI library (the cluster's
# module, or `pip install mpich` for a single machine). The scheduler writes its address to a
# scheduler file on the shared file system; `python -m dtrace analyze --scheduler-file FILE`
# runs against the workers once all of them are connected; workers read the traces
# themselves (only paths travel). The cluster is shut down on success, failure, SIGTERM and
# SIGUSR1 (Slurm's --signal before the time limit).
#
# Exit status: dtrace's own (0, 1 some inputs failed, 2 usage error or nothing analysable),
# 3 if the Dask cluster did not start, 124 on the time limit, 143 on SIGTERM.
#
# Settings (environment variables):
#   DTRACE_INPUT, DTRACE_OUT  inputs (space separated) and results directory, used when the
#                             script gets no arguments; DTRACE_ARGS adds further analyze flags
#   DTRACE_PYTHON             Python with dtrace and dask-mpi installed (default: python3)
#   DTRACE_MPIEXEC            the MPI launcher (default: mpiexec; e.g. "srun --mpi=pmix")
#   DTRACE_WORKERS            MPI ranks = workers (default: $SLURM_NTASKS, the lines of
#                             $PBS_NODEFILE, else 2)
#   DTRACE_THREADS            threads per worker (default: 1)
#   DTRACE_MEMORY_LIMIT       memory limit per worker (default: auto)
#   DTRACE_JOB_DIR            shared directory for the scheduler file and the cluster log
#                             (default: ./dtrace-job-<job id or pid>)
#   DTRACE_SCHEDULER_FILE     scheduler file (default: $DTRACE_JOB_DIR/scheduler.json)
#   DTRACE_LOCAL_DIR          node-local scratch for workers (default: $TMPDIR or /tmp)
#   DTRACE_INTERFACE          network interface for scheduler and workers (e.g. ib0)
#   DTRACE_STARTUP_TIMEOUT    seconds to wait for the scheduler and all workers (default: 300)
set -uo pipefail

log() { printf '%s dtrace-job: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

[[ -n "${PBS_O_WORKDIR:-}" ]] && { cd "$PBS_O_WORKDIR" || exit 2; }
PY=${DTRACE_PYTHON:-python3}
# The workers' C heap (dtrace.core.memory.MALLOC_SETTINGS): what a task frees stays in glibc's heap
# for the next task instead of being mapped and zero-filled again each time (Dask's nanny would set
# MALLOC_TRIM_THRESHOLD_=65536, which makes the analyses about twice slower), with one heap per worker
# process when it runs one task thread (DTRACE_THREADS); your own MALLOC_* values where you set them
if [ -z "${DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON:-}" ]; then
  ARENAS=""
  if [ "${DTRACE_THREADS:-1}" = 1 ] || [ -n "${MALLOC_ARENA_MAX:-}" ]; then
    ARENAS=", 'MALLOC_ARENA_MAX': '${MALLOC_ARENA_MAX:-1}'"
  fi
  export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON="{'MALLOC_MMAP_THRESHOLD_': '${MALLOC_MMAP_THRESHOLD_:-33554432}', 'MALLOC_TRIM_THRESHOLD_': '${MALLOC_TRIM_THRESHOLD_:-1073741824}'$ARENAS}"
fi
# Dask's sampling profiler (every 10 ms in each worker, for a dashboard page dtrace never shows)
# costs a 256-rank run ~6 %: off unless you set it
export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=${DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED:-False}
read -ra MPIEXEC <<<"${DTRACE_MPIEXEC:-mpiexec}"
if [[ -n "${DTRACE_WORKERS:-}" ]]; then
  WORKERS=$DTRACE_WORKERS
elif [[ -n "${SLURM_NTASKS:-}" ]]; then
  WORKERS=$SLURM_NTASKS
elif [[ -n "${PBS_NODEFILE:-}" && -r "${PBS_NODEFILE}" ]]; then
  WORKERS=$(grep -c . "$PBS_NODEFILE")
else
  WORKERS=2
fi
THREADS=${DTRACE_THREADS:-1}
MEMORY_LIMIT=${DTRACE_MEMORY_LIMIT:-auto}
JOB_ID=${SLURM_JOB_ID:-${PBS_JOBID:-$$}}
JOB_DIR=${DTRACE_JOB_DIR:-$PWD/dtrace-job-${JOB_ID%%.*}}
SCHEDULER_FILE=${DTRACE_SCHEDULER_FILE:-$JOB_DIR/scheduler.json}
LOCAL_DIR=${DTRACE_LOCAL_DIR:-${TMPDIR:-/tmp}}
STARTUP_TIMEOUT=${DTRACE_STARTUP_TIMEOUT:-300}
NET=()
[[ -n "${DTRACE_INTERFACE:-}" ]] && NET=(--interface "$DTRACE_INTERFACE")

# --- what to analyse: the script's arguments, else DTRACE_INPUT / DTRACE_OUT / DTRACE_ARGS
if (($# > 0)); then
  ANALYZE_ARGS=("$@")
elif [[ -n "${DTRACE_INPUT:-}" && -n "${DTRACE_OUT:-}" ]]; then
  read -ra _inputs <<<"$DTRACE_INPUT"  # split on blanks; globs stay for dtrace to expand
  read -ra _extra <<<"${DTRACE_ARGS:-}"
  ANALYZE_ARGS=("${_inputs[@]}" -o "$DTRACE_OUT" ${_extra[@]+"${_extra[@]}"})
else
  log "nothing to analyse: pass 'INPUT... -o OUT' as arguments or set DTRACE_INPUT and DTRACE_OUT"
  exit 2
fi

if ! "$PY" -c 'import dtrace, distributed, dask_mpi, mpi4py' 2>/dev/null; then
  log "$PY cannot import dtrace, dask_mpi and mpi4py: pip install 'dtrace[mpi]' (and an MPI library)"
  exit 2
fi
if ! command -v "${MPIEXEC[0]}" >/dev/null 2>&1; then
  log "MPI launcher ${MPIEXEC[0]} not found: load the MPI module or set DTRACE_MPIEXEC"
  exit 2
fi

mkdir -p "$JOB_DIR" || { log "cannot create $JOB_DIR"; exit 2; }
rm -f "$SCHEDULER_FILE"

MPI_PID=""
CHILD_PID=""

# Wait up to $2 seconds for process $1 to exit, then TERM it, then KILL it.
stop_process() {
  local pid=$1 grace=$2 i
  [[ -z "$pid" ]] && return 0
  for ((i = 0; i < grace * 5; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  return 0
}

# Seconds the workers get to exit once the cluster was told to shut down (then TERM, then KILL);
# short after a signal, when the job has little time left.
WORKER_GRACE=30
cleanup() {
  local rc=$?
  trap - EXIT INT TERM USR1
  if [[ -n "$CHILD_PID" ]] && kill -0 "$CHILD_PID" 2>/dev/null; then
    kill -TERM "$CHILD_PID" 2>/dev/null
    stop_process "$CHILD_PID" 10
  fi
  if [[ -n "$MPI_PID" ]] && kill -0 "$MPI_PID" 2>/dev/null && [[ -s "$SCHEDULER_FILE" ]]; then
    log "shutting the Dask cluster down"
    # dask-mpi's ranks end when the scheduler closes, and then the MPI launch ends
    timeout 60 "$PY" - "$SCHEDULER_FILE" <<'PYEOF' >>"$JOB_DIR/shutdown.log" 2>&1
import sys
from distributed import Client
client = Client(scheduler_file=sys.argv[1], timeout="20s")
client.retire_workers(close_workers=True)  # workers first, so none of them logs a lost scheduler
client.shutdown()
PYEOF
  fi
  stop_process "$MPI_PID" "$WORKER_GRACE"
  rm -f "$SCHEDULER_FILE"
  log "done (exit status $rc)"
  exit "$rc"
}
on_signal() {
  log "$1: stopping dtrace and the Dask cluster"
  WORKER_GRACE=5  # the job is ending (time limit, scancel/qdel): a stuck worker is not waited for
  exit "$2"
}
trap cleanup EXIT
trap 'on_signal "time limit near (SIGUSR1)" 124' USR1
trap 'on_signal "terminated (SIGTERM)" 143' TERM
trap 'on_signal "interrupted (SIGINT)" 130' INT

# dask-mpi's command run from -c, not -m: a nanny spawns its worker in a fresh interpreter, which
# imports the launching process's main module again (multiprocessing's spawn); dask_mpi.cli
# imports mpi4py, whose MPI_Init then fails in that non-MPI child (mpich 5: "PMI_Init failed")
DASK_MPI_MAIN='import sys; from dask_mpi.cli import main; sys.argv[0] = "dask-mpi"; main()'
log "job $JOB_ID: ${MPIEXEC[*]} -n $WORKERS dask-mpi (scheduler on rank 0, $WORKERS workers x $THREADS threads)"
log "scheduler file $SCHEDULER_FILE; cluster log in $JOB_DIR"

"${MPIEXEC[@]}" -n "$WORKERS" "$PY" -c "$DASK_MPI_MAIN" --scheduler-file "$SCHEDULER_FILE" \
  --inclusive-workers --nthreads "$THREADS" --memory-limit "$MEMORY_LIMIT" \
  --local-directory "$LOCAL_DIR" --no-dashboard ${NET[@]+"${NET[@]}"} >"$JOB_DIR/dask-mpi.log" 2>&1 </dev/null &
MPI_PID=$!

for ((i = 0; i < STARTUP_TIMEOUT * 5; i++)); do
  [[ -s "$SCHEDULER_FILE" ]] && break
  if ! kill -0 "$MPI_PID" 2>/dev/null; then
    log "the MPI launch exited at start-up; its log ($JOB_DIR/dask-mpi.log) ends with:"
    tail -n 20 "$JOB_DIR/dask-mpi.log" >&2
    exit 3
  fi
  sleep 0.2
done
if [[ ! -s "$SCHEDULER_FILE" ]]; then
  log "the Dask scheduler wrote no scheduler file within ${STARTUP_TIMEOUT}s"
  exit 3
fi

"$PY" - "$SCHEDULER_FILE" "$WORKERS" "$STARTUP_TIMEOUT" <<'PYEOF' &
import sys
from distributed import Client
scheduler_file, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with Client(scheduler_file=scheduler_file, timeout=f"{timeout}s") as client:
    client.wait_for_workers(n, timeout=timeout)
PYEOF
WAITER_PID=$!
CHILD_PID=$WAITER_PID
while kill -0 "$WAITER_PID" 2>/dev/null; do
  if ! kill -0 "$MPI_PID" 2>/dev/null; then
    log "the MPI launch exited before all workers connected; see $JOB_DIR/dask-mpi.log"
    exit 3
  fi
  sleep 0.5
done
wait "$WAITER_PID"
waited=$?
CHILD_PID=""
if ((waited != 0)); then
  log "fewer than $WORKERS Dask workers connected within ${STARTUP_TIMEOUT}s; see $JOB_DIR/dask-mpi.log"
  exit 3
fi
log "$WORKERS workers connected; running dtrace analyze ${ANALYZE_ARGS[*]}"

"$PY" -m dtrace analyze --scheduler-file "$SCHEDULER_FILE" "${ANALYZE_ARGS[@]}" &
CHILD_PID=$!
wait "$CHILD_PID"
exit $?

# Sourced by the sbatch templates. launch CMD... starts CMD on every task of the job:
#  - DEEPINFER_LAUNCHER=srun (default): srun --mpi=pmix (Slurm's PMIx wires up Open MPI);
#  - DEEPINFER_LAUNCHER=mpirun: mpirun -np $SLURM_NTASKS, for clusters without Slurm's PMIx plugin.
# deepinfer maps each task to the GPU of its local rank itself (local rank mod visible GPUs), so the jobs ask
# for GPUs per node and bind nothing per task: per-task GPU binding (--gpus-per-task, --gpu-bind) would hide a
# node's other GPUs from each task and block peer-to-peer between the ranks of one node.
ROOT=${DEEPINFER_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
BIN=${DEEPINFER_BIN:-$ROOT/build/deepinfer}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
# The result files tell the truth whatever the launcher returns (srun without --kill-on-bad-exit, or mpirun
# --enable-recovery, can exit 0 after every rank exited 1): a JSONL result exists only when it is whole, and a
# sweep's HDF5 file has the root attribute complete = 1 only when every point is in. The jobs check both.
require_result() {
  [ -f "$1" ] || { echo "deepinfer: $1 was not written: the run failed (see the log above)" >&2; exit 1; }
}
require_complete_sweep() {
  "${PYTHON:-python3}" -c 'import h5py, sys; sys.exit(0 if int(h5py.File(sys.argv[1], "r").attrs.get("complete", 0)) == 1 else 1)' \
    "$1" 2>/dev/null || { echo "deepinfer: $1 is missing or incomplete (complete != 1): the sweep failed" >&2; exit 1; }
}
# A durable generate job is whole when its status file says so (its output grows as requests finish).
require_complete_job() {
  grep -q '"state": "complete"' "$1" 2>/dev/null ||
    { echo "deepinfer: $1 does not say complete: the run failed or stopped (see the log above)" >&2; exit 1; }
}
# launch CMD... in the background and hand it the signals Slurm sends this shell (--signal=B:USR1, a preemption's
# SIGTERM) as SIGUSR1, which the launcher forwards to every task: the job drains instead of dying. Returns CMD's code.
launch_forwarding_signals() {
  launcher || return 2
  "${LAUNCHER[@]}" "$@" &  # (its pid is the launcher's own, which forwards SIGUSR1 to every task)
  local pid=$! rc
  trap 'kill -USR1 "$pid" 2>/dev/null' USR1 TERM
  while :; do
    wait "$pid"; rc=$?
    # A trapped signal interrupts `wait` (status > 128) while CMD runs on: wait again.
    if [ "$rc" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then continue; fi
    break
  done
  if [ "$rc" -gt 128 ]; then  # (CMD ended while the trap ran: its status is still there to collect)
    local last
    wait "$pid" 2>/dev/null; last=$?
    [ "$last" -ne 127 ] && rc=$last
  fi
  trap - USR1 TERM
  return "$rc"
}
# The launcher's command line, into the array LAUNCHER.
launcher() {
  case "${DEEPINFER_LAUNCHER:-srun}" in
    srun) LAUNCHER=(srun --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1) ;;
    mpirun) LAUNCHER=(mpirun -np "$SLURM_NTASKS" --oversubscribe --bind-to none) ;;
    *) echo "DEEPINFER_LAUNCHER must be srun or mpirun" >&2; return 2 ;;
  esac
}
launch() {
  launcher || return 2
  "${LAUNCHER[@]}" "$@"
}

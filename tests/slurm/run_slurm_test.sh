#!/usr/bin/env bash
# A real single-node Slurm on localhost: starts munged, slurmctld and slurmd from Debian's slurm-wlm and munge
# with a generated slurm.conf (the node declares 72 CPUs; SlurmdParameters=config_overrides lets a 2-core
# machine take them), submits the three sbatch templates with the CPU backend and a tiny model (the 4P+64D
# curve as 68 oversubscribed tasks), waits for them, checks their outputs, and stops the daemons it started.
# Needs root (the daemons run as root here). Exit 77 (skipped) without root or Slurm.
#   tests/slurm/run_slurm_test.sh BUILD_DIR
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root"; exit 77; }
for b in munged slurmctld slurmd sbatch; do command -v $b >/dev/null || { echo "skipped: no $b"; exit 77; }; done

work=$(mktemp -d /tmp/deepinfer-slurm.XXXXXX)
chmod 755 "$work"
host=$(hostname -s)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  sleep 1
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  [ -n "${KEEP_SLURM_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/log/*.log "$work"/out/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done; exit 1; }

mkdir -p "$work"/{munge,state,spool,log,out}
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/munge.socket" \
  --pid-file="$work/munge/munged.pid" --log-file="$work/log/munged.log" --seed-file="$work/munge/seed" || fail "munged"
sleep 0.5
pids+=("$(cat "$work/munge/munged.pid")")

port=$((17000 + RANDOM % 2000))
cat > "$work/slurm.conf" <<CONF
ClusterName=deepinfer-test
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host CPUs=72 RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
sleep 1
pids+=("$(cat "$work/slurmctld.pid" 2>/dev/null)")
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
sleep 1
pids+=("$(cat "$work/slurmd.pid" 2>/dev/null)")
for i in $(seq 60); do
  sinfo -h -o %t 2>/dev/null | grep -qE "^idle" && break
  sleep 1
  [ "$i" = 60 ] && fail "the node never became idle: $(sinfo 2>&1)"
done
echo "slurm up: $(sinfo -h -o '%P %D %c %t')"

# The jobs: CPU backend, tiny models, mpirun inside the allocation (no PMIx plugin assumed on a test machine).
export DEEPINFER_ROOT=$root DEEPINFER_BIN=$build/deepinfer DEEPINFER_LAUNCHER=mpirun
export PREFILL_ARGS="--prompt-len 64" DECODE_ARGS="--context 64" PYTHON=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_plm=isolated OMPI_MCA_ras=^slurm
fixture=$root/tests/fixtures/tiny-v3-bf16
dummy=$root/tests/fixtures/dummy-64-experts.json
cd "$work/out"
jobs=()
jobs+=("$(EXTRA_ARGS="--device cpu" sbatch --parsable --ntasks=4 -o gen-%j.log "$root/slurm/generate.sbatch" \
  "$fixture" "$root/configs/deploy/2p2d.toml" "$root/launch/examples/prompts.jsonl" "$work/out")") || fail "sbatch generate"
jobs+=("$(EXTRA_ARGS="--load-format dummy --device cpu --warmup 1 --steps 2" PREFILL_POINTS=64,128 DECODE_POINTS=2,4 \
  sbatch --parsable -o curve-%j.log "$root/slurm/curve_4p64d.sbatch" "$dummy" "$work/out")") || fail "sbatch curve"
export EXTRA_ARGS="--load-format dummy --device cpu --warmup 1 --steps 2" PREFILL_POINTS=64 DECODE_POINTS=2,4
mapfile -t scaling < <(SBATCH_FLAGS="-o scaling-%j.log" "$root/slurm/submit_scaling.sh" "$dummy" "$work/out" \
  "$root/configs/deploy/1p1d.toml" "$root/configs/deploy/2p6d.toml")
jobs+=("${scaling[@]}")
echo "submitted jobs ${jobs[*]}"
for i in $(seq 600); do
  [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
  sleep 1
  [ "$i" = 600 ] && fail "jobs still queued or running after 600 s: $(squeue 2>&1)"
done
for j in "${jobs[@]}"; do
  state=$(scontrol show job "$j" 2>/dev/null | grep -o "JobState=[A-Z]*" | cut -d= -f2)
  [ -z "$state" ] && state=$(grep -l "" "$work"/out/*-"$j".log >/dev/null 2>&1 && echo "FINISHED?")
  echo "job $j: ${state:-unknown}"
  [ "$state" = COMPLETED ] || fail "job $j ended $state"
done

py=/usr/bin/python3
gen=$(ls "$work"/out/generate-*.jsonl) || fail "no generate output"
[ "$(wc -l < "$gen")" -eq "$(wc -l < "$root/launch/examples/prompts.jsonl")" ] || fail "$gen has the wrong number of lines"
$py - "$work/out" <<'PY' || fail "sweep outputs"
import glob, sys, h5py
out = sys.argv[1]
files = sorted(glob.glob(out + "/*.h5"))
assert len(files) == 2 + 4, files  # curve: prefill + decode; scaling: 2 sizes x 2 phases
for f in files:
    with h5py.File(f) as h:
        phase = "prefill" if "prefill" in f else "decode"
        assert h.attrs["complete"] == 1, f
        assert len(h[f"{phase}/points"][()]) >= 1, f
        assert h.attrs["slurm_job_id"].decode() != "", f
print("sweeps:", ", ".join(f.split("/")[-1] for f in files))
PY
ls "$work"/out/curve-*-plots/decode.png "$work"/out/curve-*-plots/prefill.png >/dev/null || fail "no plots"

# A generate job signalled mid-run (as --signal=B:USR1 does before the time limit): it drains, exits 75, requeues
# itself, and its next run resumes; the output then holds every request once, equal to an uninterrupted run's.
big=$work/out/requeue-in.jsonl ref=$work/out/requeue-ref.jsonl
$py - "$big" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for i in range(600):
        f.write(json.dumps({"id": f"q{i}", "prompt_token_ids": [rng.randrange(3, 300) for _ in range(rng.randrange(2, 30))],
                            "max_new_tokens": rng.randrange(16, 64), "temperature": 0.8 * (i % 2)}) + "\n")
PY
"$build/deepinfer" generate --model "$fixture" --device cpu --input "$big" --output "$ref" --ordered-output \
  > "$work/out/requeue-ref.log" 2>&1 || fail "the reference run"
job=$(EXTRA_ARGS="--device cpu --window 50 --sync-interval 0.2 --progress-interval 2" DRAIN_TIMEOUT=60 \
  sbatch --parsable --ntasks=4 -o requeue-%j.log "$root/slurm/generate.sbatch" "$fixture" \
  "$root/configs/deploy/2p2d.toml" "$big" "$work/out/requeue") || fail "sbatch requeue job"
out=$work/out/requeue/generate-$job.jsonl
# (the whole run takes a second or two here: the signal must come early, and be sent as soon as it is due)
for i in $(seq 3000); do
  [ "$(cat "$out" 2>/dev/null | wc -l)" -ge 20 ] && break
  sleep 0.05
  [ "$i" = 3000 ] && fail "the requeue job wrote no results in 150 s"
done
scancel --signal=USR1 --batch "$job" || fail "scancel --signal=USR1"
echo "signalled job $job with $(wc -l < "$out") results written"
for i in $(seq 600); do
  info=$(scontrol show job "$job" 2>/dev/null)
  state=$(grep -o "JobState=[A-Z_]*" <<< "$info" | cut -d= -f2)
  restarts=$(grep -o "Restarts=[0-9]*" <<< "$info" | cut -d= -f2)
  [ "$state" = COMPLETED ] && [ "${restarts:-0}" -ge 1 ] && break
  # A requeued job waits for its begin time: let it start now.
  [ "$state" = PENDING ] && scontrol update JobId="$job" StartTime=now >/dev/null 2>&1
  # (a job being requeued passes through a terminal state for a moment: only one that stays is an end)
  case "$state" in FAILED|CANCELLED|TIMEOUT|NODE_FAIL) ended=$((${ended:-0} + 1));; *) ended=0;; esac
  [ "${ended:-0}" -gt 15 ] && fail "the requeue job ended $state (restarts ${restarts:-0})"
  sleep 1
  [ "$i" = 600 ] && fail "the requeue job is $state (restarts ${restarts:-0}) after 600 s"
done
grep -q "requeueing job $job" "$work"/out/requeue-"$job".log || fail "the job did not requeue itself"
grep -q '"state": "complete"' "$work/out/requeue/generate-$job.status.json" || fail "its status is not complete"
$py - "$ref" "$out" <<'PY' || fail "the requeued job's output"
import json, sys
ref = {r["id"]: r["output_token_ids"] for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(line) for line in open(sys.argv[2])]
assert len(got) == len({r["id"] for r in got}) == len(ref), (len(got), len(ref))
assert all(ref[r["id"]] == r["output_token_ids"] for r in got)
print(f"requeue: {len(got)} results, each id once, equal to the uninterrupted run")
PY
echo "ok: generation, the 4P+64D curves (68 tasks), 2 scaling sizes, and a signalled generate job that requeued itself and resumed, under Slurm"

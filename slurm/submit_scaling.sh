#!/usr/bin/env bash
# Submits the scaling study: one job per deployment size, each with as many tasks as the deployment has ranks.
#   slurm/submit_scaling.sh MODEL [OUTDIR] [DEPLOY...]
# Default sizes: 1p1d (2 ranks), 2p6d (8), 4p16d (20), 4p64d (68). Extra sbatch flags: SBATCH_FLAGS="...".
# Prints one job id per line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=$1 outdir=${2:-$PWD}
shift $(( $# >= 2 ? 2 : 1 ))
deploys=("$@")
[ ${#deploys[@]} -eq 0 ] && deploys=("$root"/configs/deploy/{1p1d,2p6d,4p16d,4p64d}.toml)
for deploy in "${deploys[@]}"; do
  ranks=$(python3 -c "import tomllib,sys; d=tomllib.load(open(sys.argv[1],'rb')); print(sum(v['ranks'] for v in d.values() if isinstance(v, dict)))" "$deploy")
  sbatch --parsable --ntasks="$ranks" ${SBATCH_FLAGS:-} "$root/slurm/scaling.sbatch" "$model" "$deploy" "$outdir"
done

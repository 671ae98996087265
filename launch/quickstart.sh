#!/usr/bin/env bash
# From a clone to a running multi-rank job: install, build, then run the main job on an embedded default —
# CPU, a tiny model, ranks of both roles (1 prefill + 1 decode by default; DEPLOY=configs/deploy/2p2d.toml
# for more).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/launch/setup.sh"
"$root/launch/build.sh"
source "$root/launch/mpi_env.sh"
deploy=${DEPLOY:-$root/configs/deploy/1p1d.toml}
ranks=$(python3 -c "import tomllib,sys; d=tomllib.load(open(sys.argv[1],'rb')); print(sum(v['ranks'] for v in d.values() if isinstance(v, dict)))" "$deploy")
echo "== topology: mpirun -np $ranks deepinfer info --deploy $deploy"
mpirun -np "$ranks" "$root/build/deepinfer" info --deploy "$deploy"

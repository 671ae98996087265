#!/usr/bin/env bash
# One device call on the H200: a prefill and a decode sweep at DeepSeek-V2-Lite shape on one GPU (colocated1),
# then the Pareto plots beside the official points. Binaries from a pack (tests/gpu/run.sh says how):
#   PACK=/tmp/b launch/lab/sweep_h200.sh        results and plots in $OUT
set -uo pipefail
source "$(dirname "$0")/pack_env.sh" /tmp/sweep-out
common="--model $model --load-format dummy --device cuda --deploy configs/deploy/colocated1.toml"
mpirun -np 1 $di sweep prefill $common --points ${PREFILL_POINTS:-4096,8192,16384,32768,65536} --prompt-len 1024 \
  --warmup 1 --steps 3 --output "$out/h200-v2lite-prefill.h5" 2>&1 | grep -E "sweep|error|wrote"
mpirun -np 1 $di sweep decode $common --points ${DECODE_POINTS:-8,16,32,64,128,256} --context 1024 --nextn 3 \
  --acceptance 0.75 --warmup 2 --steps 5 --output "$out/h200-v2lite-decode.h5" 2>&1 | grep -E "sweep|error|wrote"
python3 launch/plot_sweeps.py --out "$out" "$out/h200-v2lite-prefill.h5" "$out/h200-v2lite-decode.h5"

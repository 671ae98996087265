#!/usr/bin/env bash
# One device call on the H200: deepinfer's decode and prefill benchmarks at DeepSeek-V2-Lite shape (dummy
# bf16 weights generated on the GPU), then the transformers peer on the same card. Results (HDF5 tables
# decode/points and prefill/points; the peer's JSON lines) and logs go to $OUT. Binaries from a pack
# (tests/gpu/run.sh says how): PACK=/tmp/b launch/lab/bench_h200.sh. PROFILE_BATCHES=1,256 adds per-phase profiles
# of those decode batches at context 1024 (DEEPINFER_PROFILE=1) to $OUT/profile.log.
set -uo pipefail
source "$(dirname "$0")/pack_env.sh" /tmp/bench-out
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
$di bench decode --model $model --load-format dummy --device cuda --batch ${BATCHES:-1,8,64,256} \
  --context ${CONTEXTS:-512,1024,4096} --warmup 3 --steps ${STEPS:-10} --output "$out/h200-v2lite-decode.h5" 2>&1 | tee "$out/decode.log"
$di bench prefill --model $model --load-format dummy --device cuda --chunk-tokens ${CHUNKS:-4096,16384,65536} --prompt-len 1024 \
  --warmup 1 --steps 3 --output "$out/h200-v2lite-prefill.h5" 2>&1 | tee "$out/prefill.log"
for b in $(echo "${PROFILE_BATCHES:-}" | tr ',' ' '); do
  DEEPINFER_PROFILE=1 $di bench decode --model $model --load-format dummy --device cuda --batch $b --context 1024 \
    --warmup 2 --steps 2 2>&1 | tail -n 40 >> "$out/profile.log"
done
if [ -z "${SKIP_PEER:-}" ]; then
  PYTHONUNBUFFERED=1 python3 launch/lab/peer_transformers.py --config $model --batch 1,64,256 --context 512 \
    --prefill-prompts 256 --prompt-len 512 --output "$out/peer.jsonl" 2>&1 | grep -v Warning | tee "$out/peer.log"
fi

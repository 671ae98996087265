#!/usr/bin/env bash
# Session 14, call 2 (issue #28): after call 1, V4.1's grouped low-rank output projection (wo_a) under the flag
# through the skinny kernel too (tiny-v41, bf16, had 22-27 of 32 bit-identical). The GPU suite; the end-to-end check
# on tiny-v41 and tiny-v41-fp8 with --expect-identical; then the flag's cost, off / eager / on in this one call:
# DeepSeek-V2-Lite whole (27 layers, bf16, dummy weights) and V4.1-Flash width (4 layers, FP8 + FP4, as session
# 12), decode at batch 1 / 64 / 256 over 4,096 cached tokens, prefill 16 x 1,024.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 /tmp/b/build-gpu/tests/gpu_tests > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|ran\." $w/gpu_tests.log | tail -8
grep -E "CudaBatchInvariant|worst row" $w/gpu_tests.log | head -8
for m in tiny-v41 tiny-v41-fp8; do
  timeout 100 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m "--args=--batch-invariant" --expect-identical > $w/$m-invariant.log 2>&1
  echo "$m rc=$?"; grep -E "outputs equal|exit|FAIL|rror" $w/$m-invariant.log | head -10
done
for model in v2lite v41; do
  if [ $model = v2lite ]; then common="--model configs/models/deepseek-v2-lite.json --load-format dummy --device cuda"
  else common="--model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram"; fi
  for mode in off eager on; do
    flag=""; [ $mode = on ] && flag="--batch-invariant"; [ $mode = eager ] && flag="--no-cuda-graphs"
    timeout 120 $di bench decode $common $flag --batch 1,64,256 --context 4096 --warmup 3 --steps 9 \
      --output $w/$model-decode-$mode.jsonl > $w/$model-decode-$mode.log 2>&1
    echo "$model decode $mode rc=$?"; grep -hE "ms/step" $w/$model-decode-$mode.log | cut -c30-150
  done
  for mode in off on; do
    flag=""; [ $mode = on ] && flag="--batch-invariant"
    timeout 120 $di bench prefill $common $flag --chunk 16384 --prompt-len 1024 --warmup 2 --steps 5 \
      --output $w/$model-prefill-$mode.jsonl > $w/$model-prefill-$mode.log 2>&1
    echo "$model prefill $mode rc=$?"; grep -hE "ms/step" $w/$model-prefill-$mode.log | cut -c30-160
  done
done
xz $w/gpu_tests.log
tar -C $w -cJf $OUT/s14b.tar.xz .

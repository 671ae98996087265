#!/usr/bin/env bash
# Session 14, call 1 (issue #28): V2/V3 under --batch-invariant — every row absorbed in one KV split, W_uk through a
# transposed copy and the skinny kernel, bf16 experts through the grouped kernel. The GPU suite (new:
# CudaBatchInvariant.*), tests/gpu/check_batch_invariance.py with --expect-identical on tiny-v3-bf16, tiny-v2-bf16
# (no q_lora) and tiny-v41 / tiny-v41-fp8 (V4.1, bf16 and FP4 experts), then speculation on the GPU across 2p2d
# against one rank (check_speculation.py with --batch-invariant: a deployment must give one rank's outputs).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 /tmp/b/build-gpu/tests/gpu_tests > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|ran\." $w/gpu_tests.log | tail -8
grep -E "CudaBatchInvariant|worst row" $w/gpu_tests.log | head -8
for m in tiny-v3-bf16 tiny-v2-bf16 tiny-v41 tiny-v41-fp8; do
  start=$(date +%s)
  timeout 150 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m "--args=--batch-invariant" --expect-identical > $w/$m-invariant.log 2>&1
  echo "$m rc=$? ($(( $(date +%s) - start )) s)"; grep -E "outputs equal|exit|FAIL|rror" $w/$m-invariant.log | head -10
done
for m in tiny-v41-fp8 tiny-v3-bf16; do
  start=$(date +%s)
  timeout 120 python3 tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m --deploy configs/deploy/2p2d.toml --ranks 4 --args "--device cuda --batch-invariant" \
    > $w/spec-$m.log 2>&1
  echo "speculation $m rc=$? ($(( $(date +%s) - start )) s)"; grep -E "^ok|equal one rank|Error|assert" $w/spec-$m.log | head -8
done
xz $w/gpu_tests.log
tar -C $w -cJf $OUT/s14a.tar.xz .

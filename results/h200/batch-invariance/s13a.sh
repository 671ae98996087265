#!/usr/bin/env bash
# Session 13, call 1 (issue #28): entries summed in k order under expert parallelism (pair outputs) and
# --logits-hashes. The GPU suite (new rows: gather_rows, logits_row_hashes), the NCCL dispatch at one rank (pair
# outputs bit for bit against the host's fma order), then tests/gpu/check_batch_invariance.py — 32 requests alone vs
# together, 96-token chunks, among 224 companions at <= 2 / 64 / 256 running, 2p2d and colocated4 on the GPU, tokens
# and logits hashes — on V4.1 (tiny-v41-fp8) with and without the flag, and V3 (tiny-v3-bf16) with it.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 /tmp/b/build-gpu/tests/gpu_tests > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
grep -E "gather_rows|logits_row_hashes" $w/gpu_tests.log | grep -E "OK|FAILED" | head -8
timeout 120 mpirun --oversubscribe -np 1 /tmp/b/build-gpu/tests/mp_tests --gtest_filter='Nccl*' > $w/mp_nccl.log 2>&1
echo "mp Nccl* rc=$?"; grep -E "OK \]|FAILED|Failure" $w/mp_nccl.log | head -8
for run in "tiny-v41-fp8 --batch-invariant" "tiny-v41-fp8 " "tiny-v3-bf16 --batch-invariant"; do
  set -- $run; m=$1; flag=${2:-}
  name=$m${flag:+-invariant}
  start=$(date +%s)
  timeout 240 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m "--args=$flag" > $w/$name.log 2>&1
  echo "$name rc=$? ($(( $(date +%s) - start )) s)"; grep -E "outputs equal|exit|FAIL|rror" $w/$name.log | head -10
done
xz $w/gpu_tests.log
tar -C $w -cJf $OUT/s13a.tar.xz .

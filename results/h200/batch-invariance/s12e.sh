#!/usr/bin/env bash
# Session 12, call 6 (issue #28): end to end — 32 requests alone vs together, in 96-token prefill chunks and under
# 2p2d on one GPU, without and with --batch-invariant, on V4.1 (tiny-v41-fp8: FP8 projections, FP4 experts) and V3
# (tiny-v3-bf16, whose MLA kernels the flag does not cover yet).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
for m in tiny-v41-fp8 tiny-v3-bf16; do
  for flag in "" "--batch-invariant"; do
    name=$m${flag:+-invariant}
    timeout 280 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
      --model tests/fixtures/$m "--args=$flag" > $w/$name.log 2>&1
    echo "$name rc=$?"; grep -E "outputs equal|exit|FAIL|rror" $w/$name.log | head -6
  done
done
tar -C $w -cJf $OUT/s12e.tar.xz .

#!/usr/bin/env bash
# Session 12, call 14, after the review: the whole GPU suite; --batch-invariant's end-to-end check on V4.1 (now with
# the shared expert's side lane invariant too, and the eager decode decided by CudaMoe::experts_stay_on_device);
# the masking benchmark at batch 64 (microbench.h's timer).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
timeout 200 /tmp/b/build-gpu/tests/gpu_tests > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -6
timeout 120 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
  --model tests/fixtures/tiny-v41-fp8 "--args=--batch-invariant" > $w/tiny-v41-fp8-invariant.log 2>&1
echo "invariance rc=$?"; grep -E "outputs equal|rror" $w/tiny-v41-fp8-invariant.log
xz -dc tests/fixtures/tokenizer/tokenizer.json.xz > /tmp/tokenizer.json
timeout 60 /tmp/b/build-gpu/benchmarks/structured_output_bench /tmp/tokenizer.json --batches 64 --repeats 20 \
  > $w/bench.jsonl 2>&1
echo "bench rc=$?"; head -1 $w/bench.jsonl | cut -c1-300
xz $w/gpu_tests.log
tar -C $w -cJf $OUT/s12j.tar.xz .

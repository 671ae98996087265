#!/usr/bin/env bash
# Session 16, call 1. The grouped FP4 decode experts (moe_grouped_gemv_fp4: the pairs sorted by expert on the device,
# each expert streamed once for its pairs, the per-pair kernels' bits): their op rows (bit for bit against the
# per-pair kernels, and against the CPU) with memcheck and racecheck; the three forms timed (moe_fp4_gemv_bench);
# the DSpark drafter's step with the grouped form off (DEEPINFER_FP4_GROUPED_FROM_PAIRS huge: session 15's paths), at
# its default threshold, and for every pair count below the route's limit (DEEPINFER_FP4_TILES_FROM_PAIRS=4096);
# then the GPU tests whose models take the grouped form (the fixtures' decode steps).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s16a.tar.xz . ; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > $w/gpu.txt
timeout 120 $t --gtest_filter='*moe_gemv_fp4*:*moe_route*:*fp4_rows*' --gtest_brief=1 > $w/ops.log 2>&1
echo "ops rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|not the same" $w/ops.log | head -12
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $w/memcheck.log | tail -3
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $w/racecheck.log | tail -3
pack
timeout 150 $b/benchmarks/moe_fp4_gemv_bench > $w/moe_fp4_gemv_bench.txt 2>&1
echo "bench rc=$?"; cat $w/moe_fp4_gemv_bench.txt
pack
d="$b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60,96"
DEEPINFER_FP4_GROUPED_FROM_PAIRS=1000000 timeout 200 $d > $w/dspark-off.jsonl 2>&1
echo "dspark off rc=$?"; grep '^{' $w/dspark-off.jsonl
pack
timeout 200 $d > $w/dspark-default.jsonl 2>&1
echo "dspark default rc=$?"; grep '^{' $w/dspark-default.jsonl
pack
DEEPINFER_FP4_TILES_FROM_PAIRS=4096 timeout 200 $d > $w/dspark-grouped.jsonl 2>&1
echo "dspark grouped rc=$?"; grep '^{' $w/dspark-grouped.jsonl
pack
timeout 240 $t --gtest_filter='CudaV41*:CudaDspark*:CudaGraphs*:CudaOverlap*:CudaSpeculat*:CudaBatchInvariant*' --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -10
pack

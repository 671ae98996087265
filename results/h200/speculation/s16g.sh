#!/usr/bin/env bash
# Session 16, call 7. The tensor-core grouped form with 16-byte code loads (a lane's 16 bytes of a row: one scale block,
# 8 MMAs a 128-value segment; call 5's form loaded 4-byte words, 4 MMAs a 64-value segment, and streamed at ~1.25 TB/s
# with one chunk an expert). Op rows and memcheck, the forms timed, V4.1-Flash 4-layer decode where it runs, the
# DSpark drafter, and the GPU tests of the FP4 models' paths.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s16g.tar.xz . ; }
timeout 120 $t --gtest_filter='*moe_gemv_fp4*' > $w/ops.log 2>&1
echo "ops rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $w/ops.log | head -8
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $w/memcheck.log | tail -1
pack
timeout 150 $b/benchmarks/moe_fp4_gemv_bench > $w/moe_fp4_gemv_bench.txt 2>&1
echo "bench rc=$?"; cat $w/moe_fp4_gemv_bench.txt
pack
timeout 200 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60,96 > $w/dspark-default.jsonl 2>&1
echo "dspark rc=$?"; grep '^{' $w/dspark-default.jsonl
timeout 200 $di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 192,256,384 --context 4096 --warmup 3 --steps 9 --output $w/decode-default.jsonl > $w/decode-default.log 2>&1
echo "decode rc=$?"; grep -hE "ms/step" $w/decode-default.log | cut -c30-150
pack
timeout 200 $t --gtest_filter='CudaV41*:CudaDspark*:CudaGraphs*:CudaOverlap*:CudaSpeculat*:CudaBatchInvariant*:*moe*:*fp4*' --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack

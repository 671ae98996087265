#!/usr/bin/env bash
# Session 16, call 4. The tensor-core grouped form (moe_grouped_mma_fp4: 16 weight rows a warp by 8 pairs an MMA) in
# the tiles' place from their threshold to 16 pairs a place: op rows against the CPU, memcheck and racecheck; the four
# forms timed; V4.1-Flash 4-layer decode and the DSpark drafter with it off (DEEPINFER_FP4_MMA_UP_TO_PAIRS=0: call
# s16c's rule) and on; the whole GPU suite.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s16d.tar.xz . ; }
timeout 120 $t --gtest_filter='*moe_gemv_fp4*' > $w/ops.log 2>&1
echo "ops rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|relative|tensor-core" $w/ops.log | head -16
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $w/memcheck.log | tail -1
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY" $w/racecheck.log | tail -1
pack
timeout 150 $b/benchmarks/moe_fp4_gemv_bench > $w/moe_fp4_gemv_bench.txt 2>&1
echo "bench rc=$?"; cat $w/moe_fp4_gemv_bench.txt
pack
dec="$di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 128,192,256,384 --context 4096 --warmup 3 --steps 9"
DEEPINFER_FP4_MMA_UP_TO_PAIRS=0 timeout 200 $dec --output $w/decode-mma-off.jsonl > $w/decode-mma-off.log 2>&1
echo "decode mma off rc=$?"; grep -hE "ms/step" $w/decode-mma-off.log | cut -c30-150
timeout 200 $dec --output $w/decode-default.jsonl > $w/decode-default.log 2>&1
echo "decode default rc=$?"; grep -hE "ms/step" $w/decode-default.log | cut -c30-150
pack
d="$b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60,96"
timeout 200 $d > $w/dspark-default.jsonl 2>&1
echo "dspark default rc=$?"; grep '^{' $w/dspark-default.jsonl
pack
timeout 330 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack

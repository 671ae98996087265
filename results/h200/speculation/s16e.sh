#!/usr/bin/env bash
# Session 16, call 5. The tensor-core grouped form with each expert's chunks of 8 pairs dealt to 4 blocks (call 4: one
# block an expert, and the DSpark drafter's steps at 60 and 96 sequences got slower than with the tiles, 12.26 ->
# 12.85 and 13.59 -> 17.29 ms, where the benchmark's uniform routing had it faster), up to 8 pairs a place (16 in
# call 4). The op rows with memcheck and racecheck, the forms timed, V4.1-Flash 4-layer decode and the drafter with
# it off (DEEPINFER_FP4_MMA_UP_TO_PAIRS=0) and on, the whole GPU suite.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s16e.tar.xz . ; }
timeout 120 $t --gtest_filter='*moe_gemv_fp4*' > $w/ops.log 2>&1
echo "ops rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $w/ops.log | head -8
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $w/memcheck.log | tail -1
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY" $w/racecheck.log | tail -1
pack
timeout 150 $b/benchmarks/moe_fp4_gemv_bench > $w/moe_fp4_gemv_bench.txt 2>&1
echo "bench rc=$?"; cat $w/moe_fp4_gemv_bench.txt
pack
d="$b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60,96"
DEEPINFER_FP4_MMA_UP_TO_PAIRS=0 timeout 200 $d > $w/dspark-mma-off.jsonl 2>&1
echo "dspark mma off rc=$?"; grep '^{' $w/dspark-mma-off.jsonl
timeout 200 $d > $w/dspark-default.jsonl 2>&1
echo "dspark default rc=$?"; grep '^{' $w/dspark-default.jsonl
pack
dec="$di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 128,192,256,384 --context 4096 --warmup 3 --steps 9"
timeout 200 $dec --output $w/decode-default.jsonl > $w/decode-default.log 2>&1
echo "decode default rc=$?"; grep -hE "ms/step" $w/decode-default.log | cut -c30-150
pack
timeout 330 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack

#!/usr/bin/env bash
# Session 16, call 2. The FP4 decode dispatch by pairs a place (per-pair kernels below a quarter, the grouped form up
# to four, the tiles above): the kernels at more batch sizes (moe_fp4_gemv_bench); V4.1-Flash width, 4 layers, decode
# at context 4096 with session 15's rule (DEEPINFER_FP4_GROUPED_FROM_PAIRS huge, DEEPINFER_FP4_TILES_FROM_PAIRS=480:
# per pair below 480 pairs, tiles from it) and with the new default; the DSpark drafter at the default; the whole
# GPU suite.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer
pack() { tar -C $w -cJf $OUT/s16b.tar.xz . ; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > $w/gpu.txt
timeout 150 $b/benchmarks/moe_fp4_gemv_bench > $w/moe_fp4_gemv_bench.txt 2>&1
echo "bench rc=$?"; cat $w/moe_fp4_gemv_bench.txt
pack
dec="$di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 1,16,32,64,96,128,192,256 --context 4096 --warmup 3 --steps 9"
DEEPINFER_FP4_GROUPED_FROM_PAIRS=1000000 DEEPINFER_FP4_TILES_FROM_PAIRS=480 timeout 200 $dec --output $w/decode-s15-rule.jsonl > $w/decode-s15-rule.log 2>&1
echo "decode s15 rule rc=$?"; grep -hE "ms/step" $w/decode-s15-rule.log | cut -c30-200
pack
timeout 200 $dec --output $w/decode-default.jsonl > $w/decode-default.log 2>&1
echo "decode default rc=$?"; grep -hE "ms/step" $w/decode-default.log | cut -c30-200
pack
timeout 200 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60,96 > $w/dspark-default.jsonl 2>&1
echo "dspark rc=$?"; grep '^{' $w/dspark-default.jsonl
pack
timeout 330 $b/tests/gpu_tests --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack

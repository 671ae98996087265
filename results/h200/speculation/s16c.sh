#!/usr/bin/env bash
# Session 16, call 3. The FP4 decode rule as committed: the grouped form from a quarter to 2.5 pairs a place, the
# tiles from max(256, 2.5 a place), the per-pair kernels otherwise (the fixtures' few experts below 256 pairs, as
# before). The whole GPU suite (call 2's rule, tiles from 4 a place without the 256 floor, took the fixtures' steps to
# the tiles and failed 4 tests that need their verify and decode rows on bit-compatible paths), then V4.1-Flash decode
# around the new threshold (4 layers, context 4096).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer
pack() { tar -C $w -cJf $OUT/s16c.tar.xz . ; }
timeout 330 $b/tests/gpu_tests --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack
timeout 200 $di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 128,160,192,256 --context 4096 --warmup 3 --steps 9 --output $w/decode-default.jsonl > $w/decode-default.log 2>&1
echo "decode default rc=$?"; grep -hE "ms/step" $w/decode-default.log | cut -c30-200
pack

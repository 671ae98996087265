#!/usr/bin/env bash
# Session 12, call 13: the FP4 tile crossover as the default (1.25 pairs a place, at least 256) — the whole GPU suite
# again, and decode at 64 / 96 / 256 with the default (V4.1-Flash width, 4 layers, context 4096).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
timeout 300 /tmp/b/build-gpu/tests/gpu_tests > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -6
timeout 150 $di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda \
  --num-layers 4 --no-engram --batch 1,64,96,256 --context 4096 --warmup 3 --steps 9 --output $w/decode-default.jsonl \
  > $w/decode-default.log 2>&1
echo "decode rc=$?"; grep -hE "ms/step" $w/decode-default.log | cut -c30-200
xz $w/gpu_tests.log
tar -C $w -cJf $OUT/s12i.tar.xz .

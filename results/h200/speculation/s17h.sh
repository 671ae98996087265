#!/usr/bin/env bash
# Session 17, call 8. The FP4 decode rule with the tensor-core grouped form from max(96, a quarter a place) pairs
# (call 7: from 96 pairs it beat the CUDA-core form at batch 16-40 by 8-15%): the whole GPU suite, V4.1-Flash decode at
# 4 layers across the small batches (and the tensor cores from 48 pairs at batch 8 and 12, the rest of the kernel
# benchmark's lead), and the DSpark drafter and loop (its draft experts at 16 sequences, 240 pairs of 128 experts, now
# take the tensor cores).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s17h.tar.xz . ; }
timeout 240 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack
run() {  # tag, batches, env...
  local tag=$1 batches=$2; shift 2
  env "$@" timeout 200 $di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch $batches --context 4096 --warmup 3 --steps 9 --output $w/decode-$tag.jsonl > $w/decode-$tag.log 2>&1
  echo "$tag rc=$?"; grep -hE "ms/step" $w/decode-$tag.log | cut -c30-130
  pack
}
run rule 1,8,12,16,24,32,40,48,64,128 X=1
run mma48-1 8,12 DEEPINFER_FP4_MMA_FROM_PAIRS=48
run rule-low 8,12 X=1
run mma48-2 8,12 DEEPINFER_FP4_MMA_FROM_PAIRS=48
timeout 200 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60 > $w/dspark.jsonl 2>&1
echo "dspark rc=$?"; grep '^{' $w/dspark.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "step", round(d["step_ms"],3), "draft", round(d["draft_ms"],3), "loop", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3))'
pack

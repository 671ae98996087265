#!/usr/bin/env bash
# Session 17, call 9. Above 8 pairs a place the tiles take FP4 decode steps (they read the experts' row counts back,
# so those steps run eagerly). Does the tensor-core grouped form pay there too? DEEPINFER_FP4_MMA_UP_TO_PAIRS=4095 (its
# kernel's limit: every step below 4,096 pairs) against the rule (binaries of f220bbb): V4.1-Flash decode at batch 512
# (3,072 pairs, 8 a place: on the tensor cores either way), 576 and 640 (9 and 10 a place), and the DSpark loop at 96
# sequences (verify 576 rows = 3,456 pairs of 384 experts, draft 1,440 pairs of 128: both on the tiles by the rule).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer
pack() { tar -C $w -cJf $OUT/s17i.tar.xz . ; }
run() {  # tag, env...
  local tag=$1; shift
  env "$@" timeout 150 $di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 512,576,640 --context 4096 --warmup 3 --steps 9 --output $w/decode-$tag.jsonl > $w/decode-$tag.log 2>&1
  echo "$tag rc=$?"; grep -hE "ms/step" $w/decode-$tag.log | cut -c30-130
  env "$@" timeout 150 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 96 > $w/dspark-$tag.jsonl 2>&1
  echo "dspark $tag rc=$?"; grep '^{' $w/dspark-$tag.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "step", round(d["step_ms"],3), "draft", round(d["draft_ms"],3), "loop", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3))'
  pack
}
run rule-1 X=1
run mma-1 DEEPINFER_FP4_MMA_UP_TO_PAIRS=4095
run rule-2 X=1
run mma-2 DEEPINFER_FP4_MMA_UP_TO_PAIRS=4095

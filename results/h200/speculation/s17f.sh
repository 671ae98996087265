#!/usr/bin/env bash
# Session 17, call 6. Call 5 meant to time the tensor-core form from 256 pairs but set only DEEPINFER_FP4_GROUPED_FROM_PAIRS,
# which left the tensor cores at their floor (max(256, 2.5 a place) = 961 pairs) and timed the per-pair kernels
# instead. Here with DEEPINFER_FP4_TILES_FROM_PAIRS=256 as well (the tensor-core form starts where the tiles' floor
# is): V4.1-Flash decode at 4 layers, context 4096, committed rule against it, two rounds alternating.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
pack() { tar -C $w -cJf $OUT/s17f.tar.xz . ; }
run() {  # tag, env...
  local tag=$1; shift
  env "$@" timeout 250 $di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 32,48,64,96,128,160 --context 4096 --warmup 3 --steps 9 --output $w/decode-$tag.jsonl > $w/decode-$tag.log 2>&1
  echo "$tag rc=$?"; grep -hE "ms/step" $w/decode-$tag.log | cut -c30-130
  pack
}
run rule-1 X=1
run mma-1 DEEPINFER_FP4_GROUPED_FROM_PAIRS=1000000 DEEPINFER_FP4_TILES_FROM_PAIRS=256
run mma-2 DEEPINFER_FP4_GROUPED_FROM_PAIRS=1000000 DEEPINFER_FP4_TILES_FROM_PAIRS=256
run rule-2 X=1

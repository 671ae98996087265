#!/usr/bin/env bash
# Session 17, call 5. The lead session 16 left: the tensor-core grouped form from 256 pairs (its own bits) in place of
# the CUDA-core grouped form (the per-pair kernels' bits) between 256 pairs and 2.5 a place. V4.1-Flash decode at 4
# layers, context 4096, the committed rule against DEEPINFER_FP4_GROUPED_FROM_PAIRS=1000000 (no CUDA-core grouped
# form: per pair below 256 pairs, tensor cores from 256), two rounds alternating.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
pack() { tar -C $w -cJf $OUT/s17e.tar.xz . ; }
run() {  # tag, env...
  local tag=$1; shift
  env "$@" timeout 250 $di bench decode --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 32,48,64,96,128,160 --context 4096 --warmup 3 --steps 9 --output $w/decode-$tag.jsonl > $w/decode-$tag.log 2>&1
  echo "$tag rc=$?"; grep -hE "ms/step" $w/decode-$tag.log | cut -c30-130
  pack
}
run rule-1 X=1
run mma-1 DEEPINFER_FP4_GROUPED_FROM_PAIRS=1000000
run mma-2 DEEPINFER_FP4_GROUPED_FROM_PAIRS=1000000
run rule-2 X=1

#!/usr/bin/env bash
# Session 12, calls 9 and 10 (issue #28; call 10 with --bench-only, as call 9's benches lacked env.sh): s12e.sh's end-to-end check with --batch-invariant (decode steps now eager under the
# flag), then its cost again with the whole flag (Linear, experts, indexer, eager decode): V4.1-Flash width, 4 layers.
set -u
if [ "${1:-}" != "--bench-only" ]; then
  bash results/h200/batch-invariance/s12e.sh > /dev/null 2>&1
  mkdir -p /tmp/e && tar -C /tmp/e -xJf $OUT/s12e.tar.xz && grep -H -E "outputs equal|rror" /tmp/e/*.log | sed 's|/tmp/e/||'
else
  rm -rf /tmp/b; mkdir -p /tmp/b && tar -C /tmp/b -xJf .device/pack.tar.xz
fi
source /tmp/b/env.sh
w=/tmp/w2; mkdir -p $w; di=/tmp/b/build-gpu/deepinfer
common="--model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram"
for mode in off eager on; do
  flag=""; [ $mode = on ] && flag="--batch-invariant"; [ $mode = eager ] && flag="--no-cuda-graphs"
  timeout 150 $di bench decode $common $flag --batch 1,64,256 --context 4096 --warmup 3 --steps 9 \
    --output $w/decode-$mode.jsonl > $w/decode-$mode.log 2>&1
  echo "decode $mode rc=$?"; grep -hE "ms/step" $w/decode-$mode.log | cut -c30-140
done
timeout 150 $di bench prefill $common --batch-invariant --chunk 16384 --prompt-len 1024 --warmup 2 --steps 5 \
  --output $w/prefill-on.jsonl > $w/prefill-on.log 2>&1
echo "prefill on rc=$?"; grep -hE "ms/step" $w/prefill-on.log | cut -c30-160
tar -C $w -cJf $OUT/s12f.tar.xz .

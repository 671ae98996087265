#!/usr/bin/env bash
# Session 10, call 2: the compact-form model test again (the GPU-vs-CPU bound as every V4.1 fixture's), 65,536-token
# prompts off and compact on the 64P+64D prefill rank's slice (EP 64) and on 4P+64D's (EP 4; off ran out of memory in
# session 9), then the whole GPU test run.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build; di=$b/deepinfer; t=$b/tests/gpu_tests
timeout 60 $t --gtest_color=no --gtest_filter='CudaV41.Compact*' > $w/compact-test.log 2>&1; echo "compact test rc=$?"
grep -E "V4.1 GPU|OK|FAILED|Failure|PASSED|actual" $w/compact-test.log | cut -c1-240 | head
m=configs/models/deepseek-v4.1-flash.json
for d in 64p64d 4p64d; do
  for mode in off compact; do
    [ $d = 4p64d ] && [ $mode = off ] && continue
    keep=""; [ $mode = compact ] && keep="--yoco-keep-tokens 140"
    start=$(date +%s)
    timeout 120 $di bench prefill --model $m --load-format dummy --device cuda --no-engram --routing uniform \
      --rank-slice configs/deploy/$d.toml --slice-rank 0 --chunk 65536 --prompt-len 65536 --yoco-truncation $mode $keep \
      --warmup 1 --steps 2 --output $w/prefill-$d-65536.jsonl > $w/prefill-$d-65536-$mode.log 2>&1
    echo "$d 65536 $mode rc=$? $(( $(date +%s) - start )) s"; grep -hE "ms/step|rror" $w/prefill-$d-65536-$mode.log | cut -c30-300
  done
done
OUT=$w/run timeout 380 tests/gpu/run.sh > $w/run.log 2>&1; echo "run.sh rc=$?"; tail -n 25 $w/run.log
tar -C $w -cJf $OUT/s10b.tar.xz .

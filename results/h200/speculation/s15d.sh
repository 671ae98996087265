#!/usr/bin/env bash
# Session 15, call 4. Issue #27: where DSpark's draft time goes (call 3: 11.4-13.6 ms a block step at 16-96 sequences
# beside 8-30 ms for a 4-layer main step): drafter_bench under DEEPINFER_PROFILE=1 (CUDA events between phases; eager,
# so the phases' sum against the wall clock shows the host's share).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; bench=/tmp/b/build-gpu/benchmarks/drafter_bench
DEEPINFER_PROFILE=1 timeout 240 $bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60 \
  > $w/dspark-profile.jsonl 2> $w/dspark-profile.log
echo "dspark profiled rc=$?"; cat $w/dspark-profile.jsonl
grep -A16 "DSpark: 16 blocks" $w/dspark-profile.log | tail -17
grep -A16 "DSpark: 60 blocks" $w/dspark-profile.log | tail -17
tar -C $w -cJf $OUT/s15d.tar.xz .

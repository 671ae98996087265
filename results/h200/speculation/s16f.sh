#!/usr/bin/env bash
# Session 16, call 6. Where the DSpark block step's time goes now (DEEPINFER_PROFILE=1: each phase synchronised), at
# 16 / 60 / 96 sequences: call s16e's step barely moved at 60-96 sequences with the tensor-core grouped experts.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; bench=/tmp/b/build-gpu/benchmarks/drafter_bench
DEEPINFER_PROFILE=1 timeout 240 $bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60,96 \
  > $w/dspark-profile.log 2>&1
echo "dspark profiled rc=$?"; grep '^{' $w/dspark-profile.log
for s in 16 60 96; do grep "profile DSpark: $s blocks" $w/dspark-profile.log | tail -1 | cut -c30-600; done
xz $w/dspark-profile.log
tar -C $w -cJf $OUT/s16f.tar.xz .

#!/usr/bin/env bash
# Session 17, call 1. DSpark's draft without a host round trip per slot (every slot queued on the device, the tokens
# and scores read back once) and the device's idle time of a drafter's call counted as a step's: the drafters' GPU
# tests, then the drafter's cost with session 16's binary (.device/old/drafter_bench, e6b9ff6) and this one, which
# also times the engine's speculative loop (verify step + postprocessing + the next draft, in order).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s17a.tar.xz . ; }
timeout 150 $t --gtest_filter='CudaDspark*:CudaMtp*:CudaSpeculat*' --gtest_brief=1 > $w/drafter_tests.log 2>&1
echo "drafter tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/drafter_tests.log | tail -8
pack
timeout 170 .device/old/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 1,16,60 > $w/dspark-old.jsonl 2>&1
echo "dspark old rc=$?"; grep '^{' $w/dspark-old.jsonl
pack
timeout 300 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 1,16,60,96 > $w/dspark-new.jsonl 2>&1
echo "dspark new rc=$?"; grep '^{' $w/dspark-new.jsonl; tail -3 $w/dspark-new.jsonl
pack

#!/usr/bin/env bash
# Session 17, call 2. The whole GPU suite on the binaries of call 1 (also the first GPU run of e6b9ff6's dispatch
# refactor), racecheck over the FP4 decode forms' op rows, and V3's MTP drafter in the engine's speculative loop.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s17b.tar.xz . ; }
timeout 330 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $t --gtest_filter='*moe_gemv_fp4*' --gtest_brief=1 > $w/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $w/racecheck.log | tail -3
pack
timeout 100 $b/benchmarks/drafter_bench mtp configs/models/deepseek-v3.json --layers 4 --context 4096 --batches 1,16,60 > $w/mtp.jsonl 2>&1
echo "mtp rc=$?"; grep '^{' $w/mtp.jsonl
pack

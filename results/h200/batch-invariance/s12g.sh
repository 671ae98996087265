#!/usr/bin/env bash
# Session 12, call 11: the whole GPU test suite (every CUDA op against its CPU form, the models end to end, graphs,
# speculation) after the session's CUDA changes (masks in sampling, Lane::batch_invariant, the expert path choice).
set -u
rm -rf /tmp/b; mkdir -p /tmp/b && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
cd tests/gpu 2>/dev/null && cd ../..
timeout 480 /tmp/b/build-gpu/tests/gpu_tests > /tmp/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |tests ran|FAILED  \]" /tmp/gpu_tests.log | tail -8
cp /tmp/gpu_tests.log $OUT/gpu_tests.log

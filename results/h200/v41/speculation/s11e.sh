#!/usr/bin/env bash
# Session 11, call 7 (issue #27): the session's last binaries — the whole gpu_tests suite, the speculation tests
# under compute-sanitizer memcheck, and the slice's device form against its host form.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > $w/gpu.txt
timeout 280 $t --gtest_color=no > $w/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"
grep -E "^\[ +(FAILED|PASSED) +\]|identical up to" $w/gpu_tests.log | cut -c1-160 | head -20
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $t --gtest_filter='*CudaSpeculativeGeneration*:CudaVerifyRows.*' \
  --gtest_brief=1 --gtest_color=no > $w/memcheck-spec.log 2>&1; echo "memcheck spec rc=$?"; tail -n 3 $w/memcheck-spec.log
tests/gpu/check_slice_device.sh $di $w; echo "slice check rc=$?"
tar -C $w -cJf $OUT/s11e.tar.xz .

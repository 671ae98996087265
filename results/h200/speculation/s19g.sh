#!/usr/bin/env bash
# Session 19, call 7. After the review: the engram hash written once for host and device (kernels/engram_hash_row.h,
# engram_rows now hashing engram_hash_sources as the kernel does). The whole GPU suite again.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; t=/tmp/b/build-gpu/tests/gpu_tests
timeout 270 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|engram, " $w/gpu_tests.log | tail -14
xz $w/gpu_tests.log
tar -C $w -cJf $OUT/s19g.tar.xz .

#!/usr/bin/env bash
# Session 15, call 5. Issue #27: DSpark's features under bounded replay's compact form (gathered with the kept rows
# when a target layer comes before the compact layer): CudaDspark.CompactReplayWritesTheMaskFormsDraftKeys, with the
# drafters' other GPU tests and the compact-form tests beside it.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; t=/tmp/b/build-gpu/tests/gpu_tests
timeout 200 $t --gtest_filter='CudaDspark*:CudaMtp*:CudaV41.Compact*' > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|compact against|Failure|Expected|actual" $w/gpu_tests.log | tail -12
tar -C $w -cJf $OUT/s15e.tar.xz .

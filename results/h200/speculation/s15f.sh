#!/usr/bin/env bash
# Session 15, call 6, after the review: the V4.1 model's query/K=V projections and hyper-connection site are one
# function each now (the main layers and DSpark's draft layers call them; same kernels, same scratch order) and the
# model-drafter engine tests share one helper. The GPU tests those paths run.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; t=/tmp/b/build-gpu/tests/gpu_tests
timeout 240 $t --gtest_filter='CudaV41*:CudaDspark*:CudaMtp*:CudaGraphs*:CudaOverlap*:CudaSpeculat*:CudaVerify*:CudaBatchInvariant*' --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|compact against" $w/gpu_tests.log | tail -12
tar -C $w -cJf $OUT/s15f.tar.xz .

#!/usr/bin/env bash
# Session 15, call 3. Issue #27: the GPU drafters' cost at a released shape, on dummy weights with the draft module
# generated (benchmarks/drafter_bench.cpp): DeepSeek-V4.1-Flash (4 layers, the DSpark targets its last three) and
# DeepSeek-V3 (4 layers) at 16 / 60 / 96 sequences of 4,096 cached tokens. Before it, the GPU tests the dummy-weight
# loading rule touches (graphs, overlap, V4.1, the drafters).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; t=/tmp/b/build-gpu/tests/gpu_tests; bench=/tmp/b/build-gpu/benchmarks/drafter_bench
pack() { tar -C $w -cJf $OUT/s15c.tar.xz . ; }
timeout 150 $t --gtest_filter='CudaGraphs*:CudaOverlap*:CudaMtp*:CudaDspark*:CudaV41*:CudaSpeculat*' --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
pack
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader > $w/gpu.txt
timeout 240 $bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 16,60,96 > $w/dspark.jsonl 2> $w/dspark.log
echo "dspark rc=$?"; cat $w/dspark.jsonl; grep -iE "error|what" $w/dspark.log | head -3
pack
timeout 200 $bench mtp configs/models/deepseek-v3.json --layers 4 --context 4096 --batches 16,60,96 > $w/mtp.jsonl 2> $w/mtp.log
echo "mtp rc=$?"; cat $w/mtp.jsonl; grep -iE "error|what" $w/mtp.log | head -3
pack

#!/usr/bin/env bash
# Session 17, call 3. DSpark's draft queued at the end of a step and waited for only after the next step's schedule
# (overlapped scheduling, the default; --no-overlap-schedule waits at once): the drafters' and speculation GPU tests
# (the DSpark engine cases in order and overlapped: same drafts, verified and accepted counts, plain outputs), then
# the engine's speculative loop both ways (drafter_bench), V4.1-Flash 4 layers, DSpark, and V3 4 layers, MTP.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s17c.tar.xz . ; }
timeout 200 $t --gtest_filter='CudaDspark*:CudaMtp*:CudaSpeculat*:CudaV41*:CudaGraphs*:CudaOverlap*:CudaBatchInvariant*' > $w/gpu_tests.log 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|overlapped:" $w/gpu_tests.log | tail -12
pack
timeout 330 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 1,16,60,96 > $w/dspark.jsonl 2>&1
echo "dspark rc=$?"; grep '^{' $w/dspark.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "loop overlapped", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "| in order", round(d["engine_in_order_step_ms"],3), "idle", round(d["engine_in_order_device_idle_ms"],3))'
pack

#!/usr/bin/env bash
# Session 17, call 10. After the review that made drafter_bench's engine loop call bench_decode (with
# DecodeSpeculation::model_drafter) instead of building its own engine: the same figures as calls s17a/s17b/s17h
# should come out (DSpark at 1, 16, 60 sequences; MTP at 1, 16), and the drafters' and speculation GPU tests pass.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s17j.tar.xz . ; }
timeout 150 $t --gtest_filter='CudaDspark*:CudaMtp*:CudaSpeculat*:*moe_gemv_fp4*' --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -4
show() { grep '^{' $1 | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["drafter"], d["sequences"], "draft", round(d["draft_ms"],3), "loop", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "tokens/step", d["engine_tokens_per_step"])'; }
timeout 200 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 1,16,60 > $w/dspark.jsonl 2>&1
echo "dspark rc=$?"; show $w/dspark.jsonl
timeout 120 $b/benchmarks/drafter_bench mtp configs/models/deepseek-v3.json --layers 4 --context 4096 --batches 1,16 > $w/mtp.jsonl 2>&1
echo "mtp rc=$?"; show $w/mtp.jsonl
pack

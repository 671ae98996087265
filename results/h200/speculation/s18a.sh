#!/usr/bin/env bash
# Session 18, call 1. Overlapped scheduling with speculation: each DSpark draft chained behind its verify step
# (acceptance on the device, the draft's rows moved by it, the next verify's drafts filled from the draft there).
# gpu_tests: the new CudaDspark.AcceptanceKernelsFollowTheEnginesRule / ChainedDraftIsTheInOrderDraft /
# ChainedDraftsGiveTheInOrderRun and the other speculation, overlap and graph tests; then the whole suite;
# check_speculation.py with --draft dspark on the GPU (chained and --no-overlap-schedule, 1 rank and 2p2d); then the
# engine's loop at the V4.1-Flash shape (4 layers), in order and chained, at 1 and 64 sequences.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s18a.tar.xz . ; }
timeout 200 $t --gtest_filter='CudaDspark*:CudaMtp*:CudaSpeculat*:CudaVerify*:CudaGraphs*:CudaOverlap*' > $w/gpu_tests-filtered.log 2>&1
echo "gpu_tests (filtered) rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|chained|Failure|rror" $w/gpu_tests-filtered.log | tail -30
pack
spec() {  # fixture drafter tag args
  timeout 300 python3 tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$1 --deploy configs/deploy/2p2d.toml --ranks 4 --model-drafter $2 --args "$4" > $w/spec-$2-$3.log 2>&1
  echo "check_speculation $1 --draft $2 [$4] rc=$?"; grep -E "^ok|differ|exit|rror|ssert" $w/spec-$2-$3.log | tail -14
  pack
}
spec tiny-v41-dspark dspark invariant "--device cuda --batch-invariant"
timeout 240 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack
timeout 300 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 1,64 > $w/dspark.jsonl 2>&1
echo "dspark rc=$?"; grep '^{' $w/dspark.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3))'
grep -v '^{' $w/dspark.jsonl | grep -iE "rror|what" | tail -5
pack

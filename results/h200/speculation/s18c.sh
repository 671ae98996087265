#!/usr/bin/env bash
# Session 18, call 3. Chained drafts under --spec-varlen too (the draft queued behind its verify step, the next step
# laid out once the draft is back): the whole GPU suite (CudaDspark.ChainedDraftsGiveTheInOrderRun now with a
# variable-length case); check_speculation.py --draft dspark --batch-invariant again (1 rank, 2p2d); the engine's
# DSpark loop under the variable-length rule, in order and chained, at 1, 64 and 256 sequences.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s18c.tar.xz . ; }
timeout 240 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|varlen.*chained" $w/gpu_tests.log | tail -8
xz $w/gpu_tests.log
pack
timeout 300 python3 tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
  --model tests/fixtures/tiny-v41-dspark --deploy configs/deploy/2p2d.toml --ranks 4 --model-drafter dspark \
  --args "--device cuda --batch-invariant" > $w/spec-dspark-invariant.log 2>&1
echo "check_speculation tiny-v41-dspark --draft dspark [--device cuda --batch-invariant] rc=$?"; grep -E "^ok|differ|exit|rror|ssert" $w/spec-dspark-invariant.log | tail -14
pack
timeout 300 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 1,64,256 --varlen 1 > $w/dspark-varlen.jsonl 2>&1
echo "dspark varlen rc=$?"; grep '^{' $w/dspark-varlen.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3), "tok/step", round(d["engine_tokens_per_step"],2), round(d["chained_tokens_per_step"],2))'
grep -v '^{' $w/dspark-varlen.jsonl | grep -iE "rror|what|verify step cost" | tail -8
pack

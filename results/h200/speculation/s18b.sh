#!/usr/bin/env bash
# Session 18, call 2. The chained-draft engine test fixed (nextn up to the fixture's block; confidences near, not
# bit-equal: a chained draft also covers the sequences its verify step finished); check_speculation.py --draft dspark
# without --batch-invariant (chained and in order, 1 rank and 2p2d); then overlap on vs off with speculation at the
# V4.1-Flash shape (4 layers, context 4096): the engine's DSpark loop in order and chained at 1, 16, 60, 64, 96 and 256
# sequences, twice.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s18b.tar.xz . ; }
timeout 200 $t --gtest_filter='CudaDspark*:CudaOverlap*' > $w/gpu_tests-filtered.log 2>&1
echo "gpu_tests (filtered) rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|chained|Failure|rror" $w/gpu_tests-filtered.log | tail -12
pack
timeout 300 python3 tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
  --model tests/fixtures/tiny-v41-dspark --deploy configs/deploy/2p2d.toml --ranks 4 --model-drafter dspark \
  --args "--device cuda" > $w/spec-dspark-default.log 2>&1
echo "check_speculation tiny-v41-dspark --draft dspark [--device cuda] rc=$?"; grep -E "^ok|differ|exit|rror|ssert" $w/spec-dspark-default.log | tail -14
pack
for rep in 1 2; do
  timeout 330 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 4 --context 4096 --batches 1,16,60,64,96,256 > $w/dspark-$rep.jsonl 2>&1
  echo "dspark run $rep rc=$?"; grep '^{' $w/dspark-$rep.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3), "tok/step", round(d["engine_tokens_per_step"],2), round(d["chained_tokens_per_step"],2))'
  grep -v '^{' $w/dspark-$rep.jsonl | grep -iE "rror|what" | tail -5
  pack
done

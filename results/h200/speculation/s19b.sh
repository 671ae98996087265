#!/usr/bin/env bash
# Session 19, call 2. The MTP module's attention too over the rows read only (every row still writes its cache
# layer): the whole GPU suite (gather_int32_rows new); check_speculation.py --batch-invariant with --model-drafter mtp
# (tiny-v3-bf16), 1 rank and 2p2d; V3 with MTP (4 layers) in order and chained at 1, 64, 256 sequences, twice, with
# the module's time over a verify step's two rows a sequence (draft_two_rows_ms).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s19b.tar.xz . ; }
timeout 240 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|chained .* drafted" $w/gpu_tests.log | tail -14
xz $w/gpu_tests.log
pack
spec() {  # fixture drafter
  timeout 300 python3 tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$1 --deploy configs/deploy/2p2d.toml --ranks 4 --model-drafter $2 \
    --args "--device cuda --batch-invariant" > $w/spec-$2-invariant.log 2>&1
  echo "check_speculation $1 --draft $2 [--device cuda --batch-invariant] rc=$?"; grep -E "^ok|differ|exit|rror|ssert" $w/spec-$2-invariant.log | tail -10
  pack
}
spec tiny-v3-bf16 mtp
bench() {  # drafter config batches tag
  timeout 280 $b/benchmarks/drafter_bench $1 $2 --layers 4 --context 4096 --batches $3 > $w/$1-$4.jsonl 2>&1
  echo "$1 $4 rc=$?"; grep '^{' $w/$1-$4.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "two rows", round(d.get("draft_two_rows_ms",0),3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3))'
  grep -v '^{' $w/$1-$4.jsonl | grep -iE "rror|what" | tail -5
  pack
}
bench mtp configs/models/deepseek-v3.json 1,64,256 run1
bench mtp configs/models/deepseek-v3.json 1,64,256 run2

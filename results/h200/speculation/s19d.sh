#!/usr/bin/env bash
# Session 19, call 4. Engram rows hashed on the device (cuda::engram_hash_rows), so that a V4.1 model with engram
# layers (tables whole on the rank) starts steps before their inputs reach the host: overlapped scheduling and chained
# DSpark drafts for it. The whole GPU suite (CudaV41.EngramRowsHashedOnTheDeviceAreTheHosts,
# CudaOverlap.V41WithEngramStartedStepsTakeTheirInputsOnTheDevice, CudaDspark.ChainedDraftsWithEngramLayersGiveTheInOrderRun
# new); check_overlap_schedule.py on tiny-v41-engram (--device cuda --batch-invariant); V4.1-Flash at 7 layers (its
# engram layer 1 among them): generate in order vs overlapped at 1 / 64 / 256 running, and drafter_bench dspark's
# engine loop in order vs chained at 1 / 64 / 256 sequences.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s19d.tar.xz . ; }
timeout 270 $t --gtest_brief=1 > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|engram, " $w/gpu_tests.log | tail -14
xz $w/gpu_tests.log
pack
timeout 300 python3 tests/cli/check_overlap_schedule.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
  --model tests/fixtures/tiny-v41-engram --deploy-dir configs/deploy --args "--device cuda --batch-invariant" \
  > $w/overlap-engram.log 2>&1
echo "check_overlap_schedule tiny-v41-engram rc=$?"; grep -E "^ok|differ|exit|rror|ssert|overlapped scheduling" $w/overlap-engram.log | sort | uniq -c | tail -12
pack
python3 - > $w/in.jsonl <<'PY'
import json, random
rng = random.Random(5)
for i in range(256):
    print(json.dumps({"id": f"r{i}", "prompt_token_ids": [rng.randrange(3, 120000) for _ in range(128)], "max_new_tokens": 32, "ignore_eos": True}))
PY
for r in 1 64 256; do
  head -n $r $w/in.jsonl > $w/in-$r.jsonl
  for mode in --no-overlap-schedule --overlap-schedule; do
    timeout 150 $di generate --model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda \
      --num-layers 7 --max-running $r --input $w/in-$r.jsonl --output $w/out-$r$mode.jsonl $mode > $w/gen-$r$mode.log 2>&1
    echo "generate running $r $mode rc=$? $(grep -oE 'decode steps [0-9.]+ tok/s.*|device idle[^;]*' $w/gen-$r$mode.log | tail -1)"
  done
  cmp -s $w/out-$r--no-overlap-schedule.jsonl $w/out-$r--overlap-schedule.jsonl && echo "running $r: outputs equal" || echo "running $r: outputs differ"
  pack
done
grep -hE "engram|overlapped scheduling" $w/gen-1--overlap-schedule.log | head -4
timeout 280 $b/benchmarks/drafter_bench dspark configs/models/deepseek-v4.1-flash.json --layers 7 --context 4096 \
  --batches 1,64,256 > $w/dspark-engram.jsonl 2>&1
echo "drafter_bench dspark --layers 7 rc=$?"; grep '^{' $w/dspark-engram.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3))'
grep -v '^{' $w/dspark-engram.jsonl | grep -iE "rror|what|engram|overlapped" | sort | uniq -c | tail -6
rm -f $w/in*.jsonl $w/out-*.jsonl
pack

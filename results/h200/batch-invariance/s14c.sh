#!/usr/bin/env bash
# Session 14, call 3. Issue #28: V2/V3's flag with a fixed 16 KV splits (call 2: one split left DeepSeek-V2-Lite's
# batch-1 decode at 4.3x the default's time), rows launched in groups that bound the partial sums' workspace — the GPU
# suite, forward --batch-invariant against transformers, the end-to-end check on tiny-v3-bf16 / tiny-v2-bf16 with
# --expect-identical, V2-Lite's cost off / on. Issue #27: overlapped scheduling with the tokens left on the device
# (gpu_tests CudaOverlap.*, check_overlap_schedule.py with --device cuda --batch-invariant), then generate on
# DeepSeek-V2-Lite (dummy weights) at 1 / 64 / 256 running, in order vs --overlap-schedule: decode tok/s and the
# device's idle time before a step.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 /tmp/b/build-gpu/tests/gpu_tests > $w/gpu_tests.log 2>&1
echo "gpu_tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|ran\." $w/gpu_tests.log | tail -8
grep -E "CudaBatchInvariant|CudaOverlap|worst row" $w/gpu_tests.log | head -12
timeout 120 mpirun --oversubscribe -np 1 /tmp/b/build-gpu/tests/mp_tests --gtest_filter='Nccl*' > $w/mp_nccl.log 2>&1
echo "mp Nccl* rc=$?"; grep -E "OK \]|FAILED|Failure" $w/mp_nccl.log | head -8
for flag in "" --batch-invariant; do
  for f in tiny-v3-fp32 tiny-v3-bf16 tiny-v2-fp32 tiny-v2-bf16; do
    timeout 60 python3 tests/cli/check_forward.py tests/fixtures/$f all --bf16-yardstick 1.5 -- $di forward \
      --model tests/fixtures/$f --device cuda $flag > $w/forward-$f$flag.log 2>&1
    echo "forward $f $flag rc=$?: $(grep -E "relative error|Error|error" $w/forward-$f$flag.log | head -3)"
  done
done
for m in tiny-v3-bf16 tiny-v2-bf16; do
  timeout 100 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m "--args=--batch-invariant" --expect-identical > $w/$m-invariant.log 2>&1
  echo "$m rc=$?"; grep -E "outputs equal|exit|FAIL|rror" $w/$m-invariant.log | head -10
done
for m in tiny-v3-bf16 tiny-v41-fp8; do
  timeout 120 python3 tests/cli/check_overlap_schedule.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m --deploy-dir configs/deploy --args "--device cuda --batch-invariant" > $w/overlap-$m.log 2>&1
  echo "overlap $m rc=$?"; grep -E "equal|differs|exit|rror" $w/overlap-$m.log | head -8
done
common="--model configs/models/deepseek-v2-lite.json --load-format dummy --device cuda"
for mode in off on; do
  flag=""; [ $mode = on ] && flag="--batch-invariant"
  timeout 120 $di bench decode $common $flag --batch 1,64,256 --context 4096 --warmup 3 --steps 9 \
    --output $w/v2lite-decode-$mode.jsonl > $w/v2lite-decode-$mode.log 2>&1
  echo "v2lite decode $mode rc=$?"; grep -hE "ms/step" $w/v2lite-decode-$mode.log | cut -c30-150
  timeout 120 $di bench prefill $common $flag --chunk 16384 --prompt-len 1024 --warmup 2 --steps 5 \
    --output $w/v2lite-prefill-$mode.jsonl > $w/v2lite-prefill-$mode.log 2>&1
  echo "v2lite prefill $mode rc=$?"; grep -hE "ms/step" $w/v2lite-prefill-$mode.log | cut -c30-160
done
python3 - <<'PY' > $w/overlap-requests.jsonl
import json, random
rng = random.Random(27)
for i in range(512):
    print(json.dumps({"id": f"q{i}", "prompt_token_ids": [rng.randrange(3, 100000) for _ in range(128)],
                      "max_new_tokens": 64, "ignore_eos": True}))
PY
for running in 1 64 256; do
  n=$(( running == 1 ? 4 : 2 * running ))
  head -n $n $w/overlap-requests.jsonl > $w/req-$running.jsonl
  for mode in in-order overlap; do
    flag=""; [ $mode = overlap ] && flag="--overlap-schedule"
    timeout 150 $di generate $common --input $w/req-$running.jsonl --max-running $running $flag \
      --output $w/gen-$running-$mode.jsonl > $w/gen-$running-$mode.log 2>&1
    echo "generate $running running, $mode rc=$?: $(grep -hE "device idle|generated tok/s" $w/gen-$running-$mode.log | cut -c30-220 | tr '\n' ' ')"
  done
done
xz $w/gpu_tests.log
rm -f $w/overlap-requests.jsonl $w/gen-*.jsonl $w/req-*.jsonl
tar -C $w -cJf $OUT/s14c.tar.xz .

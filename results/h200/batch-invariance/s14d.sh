#!/usr/bin/env bash
# Session 14, call 4 (the session's last device time, so the most needed first; the logs re-packed after each part).
# Issue #27: after call 3, the owed-input targets in the sampler's own buffer (a captured decode graph replayed with
# shifted scratch addresses) and the first slot's pinned buffer — gpu_tests CudaOverlap.*, check_overlap_schedule.py
# on the GPU, then generate on DeepSeek-V2-Lite (dummy) at 1 / 64 / 256 running, in order vs overlapped. Issue #28:
# V2/V3's flag splits each sequence's keys in chunks of a fixed size (call 3's fixed 16 splits cost prefill 4.8x) —
# the end-to-end check (prefill chunks of 37 / 96 / 200 now), V2-Lite's cost off / on, forward against transformers.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
pack() { tar -C $w --exclude='gen-*.jsonl' --exclude='req-*.jsonl' --exclude='overlap-requests.jsonl' -cJf $OUT/s14d.tar.xz . ; }
timeout 100 /tmp/b/build-gpu/tests/gpu_tests --gtest_filter='CudaOverlap*:CudaBatchInvariant*:*fixed_chunks*:*scatter_sampled*:*mla_decode*:CudaGraphs*' > $w/gpu_tests.log 2>&1
echo "gpu_tests (filtered) rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|ran\.|mean row" $w/gpu_tests.log | tail -8
for m in tiny-v41-fp8 tiny-v3-bf16; do
  timeout 100 python3 tests/cli/check_overlap_schedule.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m --deploy-dir configs/deploy --args "--device cuda --batch-invariant" > $w/overlap-$m.log 2>&1
  echo "overlap $m rc=$?"; grep -E "equal|differs|exit|rror" $w/overlap-$m.log | head -6
done
pack
common="--model configs/models/deepseek-v2-lite.json --load-format dummy --device cuda"
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
    flag="--no-overlap-schedule"; [ $mode = overlap ] && flag="--overlap-schedule"
    timeout 60 $di generate $common --input $w/req-$running.jsonl --max-running $running $flag \
      --output $w/gen-$running-$mode.jsonl > $w/gen-$running-$mode.log 2>&1
    echo "generate $running running, $mode rc=$?: $(grep -hE "device idle|generated tok/s|rror" $w/gen-$running-$mode.log | cut -c30-220 | tr '\n' ' ')"
  done
  python3 -c "
import json
a=[json.loads(l)['output_token_ids'] for l in open('$w/gen-$running-in-order.jsonl')]
b=[json.loads(l)['output_token_ids'] for l in open('$w/gen-$running-overlap.jsonl')]
print('  outputs equal in order and overlapped:', sum(x==y for x,y in zip(a,b)), 'of', len(a))" 2>&1 | tail -1
done
pack
for f in tiny-v3-bf16 tiny-v2-bf16; do
  timeout 60 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$f "--args=--batch-invariant" --expect-identical > $w/$f-invariant.log 2>&1
  echo "$f rc=$?"; grep -E "outputs equal|exit|FAIL|rror" $w/$f-invariant.log | head -10
done
pack
for mode in on off; do
  flag=""; [ $mode = on ] && flag="--batch-invariant"
  timeout 60 $di bench decode $common $flag --batch 1,64,256 --context 4096 --warmup 3 --steps 9 \
    --output $w/v2lite-decode-$mode.jsonl > $w/v2lite-decode-$mode.log 2>&1
  echo "v2lite decode $mode rc=$?"; grep -hE "ms/step" $w/v2lite-decode-$mode.log | cut -c30-150
  timeout 60 $di bench prefill $common $flag --chunk 16384 --prompt-len 1024 --warmup 2 --steps 5 \
    --output $w/v2lite-prefill-$mode.jsonl > $w/v2lite-prefill-$mode.log 2>&1
  echo "v2lite prefill $mode rc=$?"; grep -hE "ms/step" $w/v2lite-prefill-$mode.log | cut -c30-160
  pack
done
for f in tiny-v3-bf16 tiny-v2-bf16; do
  timeout 30 python3 tests/cli/check_forward.py tests/fixtures/$f all --bf16-yardstick 1.5 -- $di forward \
    --model tests/fixtures/$f --device cuda --batch-invariant > $w/forward-$f.log 2>&1
  echo "forward $f --batch-invariant rc=$?: $(grep -E "relative error|Error|error" $w/forward-$f.log | head -3)"
done
for f in tiny-v41 tiny-v41-fp8; do
  timeout 60 python3 tests/gpu/check_batch_invariance.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$f "--args=--batch-invariant" --expect-identical > $w/$f-invariant.log 2>&1
  echo "$f rc=$?"; grep -E "outputs equal|exit|FAIL|rror" $w/$f-invariant.log | head -10
done
pack

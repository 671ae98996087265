#!/usr/bin/env bash
# Session 15, call 1. Issue #27: DeepSeek-V3's MTP module on the GPU (CudaDeepseekModel::mtp_forward/mtp_draft) —
# gpu_tests CudaMtp.* (GPU module against the CPU one, drafts = the logits' argmax, the drafter through the engine)
# and the argmax op row (its probability output), then check_speculation.py --model-drafter mtp on the GPU at one
# rank and 2p2d; then the overlap figures at batch 1 repeated (session 14 had one short run).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
pack() { tar -C $w --exclude='gen-*.jsonl' --exclude='req-*.jsonl' --exclude='overlap-requests.jsonl' -cJf $OUT/s15a.tar.xz . ; }
timeout 150 /tmp/b/build-gpu/tests/gpu_tests --gtest_filter='CudaMtp*:*argmax_rows*:CudaSpeculat*:CudaVerify*:CudaGraphs*:CudaOverlap*' > $w/gpu_tests.log 2>&1
echo "gpu_tests (filtered) rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|GPU against CPU|MTP drafts" $w/gpu_tests.log | tail -14
pack
for args in "--device cuda --batch-invariant"; do
  tag=$(echo "$args" | tr -d ' -')
  timeout 240 python3 tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/tiny-v3-bf16 --deploy configs/deploy/2p2d.toml --ranks 4 --model-drafter mtp \
    --args "$args" > $w/spec-mtp-$tag.log 2>&1
  echo "check_speculation mtp [$args] rc=$?"; grep -E "equal|differ|speculative decoding:|exit|rror|OK|ok" $w/spec-mtp-$tag.log | tail -12
  pack
done
common="--model configs/models/deepseek-v2-lite.json --load-format dummy --device cuda"
python3 - <<'PY' > $w/overlap-requests.jsonl
import json, random
rng = random.Random(27)
for i in range(512):
    print(json.dumps({"id": f"q{i}", "prompt_token_ids": [rng.randrange(3, 100000) for _ in range(128)],
                      "max_new_tokens": 256, "ignore_eos": True}))
PY
head -n 4 $w/overlap-requests.jsonl > $w/req-1.jsonl
for rep in 1 2 3; do
  for mode in in-order overlap; do
    flag="--no-overlap-schedule"; [ $mode = overlap ] && flag="--overlap-schedule"
    timeout 60 $di generate $common --input $w/req-1.jsonl --max-running 1 $flag \
      --output $w/gen-1-$mode-$rep.jsonl > $w/gen-1-$mode-$rep.log 2>&1
    echo "generate 1 running, $mode, run $rep rc=$?: $(grep -hE "device idle|rror" $w/gen-1-$mode-$rep.log | cut -c30-220 | tr '\n' ' ')"
  done
done
pack

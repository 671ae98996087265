#!/usr/bin/env bash
# Session 15, call 1. Issue #27: the drafters on the GPU — DeepSeek-V3's MTP module (CudaDeepseekModel::mtp_forward /
# mtp_draft) and DeepSeek-V4.1's DSpark drafter (cuda_v41_dspark.cpp): gpu_tests CudaMtp.* / CudaDspark.* (GPU modules
# against the CPU ones, the drafters through the engine) and the new op rows (argmax probability, hc_collapse,
# hc_head_weights); then check_speculation.py with the model drafters on the GPU at one rank and 2p2d; then the
# overlap figures at batch 1 repeated (session 14 had one short run).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
pack() { tar -C $w --exclude='gen-*.jsonl' --exclude='req-*.jsonl' --exclude='overlap-requests.jsonl' -cJf $OUT/s15a.tar.xz . ; }
timeout 200 /tmp/b/build-gpu/tests/gpu_tests --gtest_filter='CudaMtp*:CudaDspark*:*argmax_rows*:*hc_collapse*:*hc_head_weights*:CudaSpeculat*:CudaVerify*:CudaGraphs*:CudaOverlap*' > $w/gpu_tests.log 2>&1
echo "gpu_tests (filtered) rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|GPU against CPU|drafts|Failure|error" $w/gpu_tests.log | tail -30
pack
spec() {  # fixture drafter tag args
  timeout 200 python3 tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$1 --deploy configs/deploy/2p2d.toml --ranks 4 --model-drafter $2 --args "$4" > $w/spec-$2-$3.log 2>&1
  echo "check_speculation $1 --draft $2 [$4] rc=$?"; grep -E "equal|differ|speculative decoding:|exit|rror|ssert" $w/spec-$2-$3.log | tail -14
  pack
}
spec tiny-v41-dspark dspark invariant "--device cuda --batch-invariant"
spec tiny-v3-bf16 mtp invariant "--device cuda --batch-invariant"
common="--model configs/models/deepseek-v2-lite.json --load-format dummy --device cuda"
python3 - <<'PY' > $w/overlap-requests.jsonl
import json, random
rng = random.Random(27)
for i in range(4):
    print(json.dumps({"id": f"q{i}", "prompt_token_ids": [rng.randrange(3, 100000) for _ in range(128)],
                      "max_new_tokens": 256, "ignore_eos": True}))
PY
for rep in 1 2 3; do
  for mode in in-order overlap; do
    flag="--no-overlap-schedule"; [ $mode = overlap ] && flag="--overlap-schedule"
    timeout 60 $di generate $common --input $w/overlap-requests.jsonl --max-running 1 $flag \
      --output $w/gen-1-$mode-$rep.jsonl > $w/gen-1-$mode-$rep.log 2>&1
    echo "generate 1 running, $mode, run $rep rc=$?: $(grep -hE "device idle|rror" $w/gen-1-$mode-$rep.log | cut -c30-220 | tr '\n' ' ')"
  done
done
pack
spec tiny-v41-dspark dspark default "--device cuda"

#!/usr/bin/env bash
# Session 11, call 1 (issue #27): speculative decoding on the H200 — the engine's verify steps through the CUDA
# models against plain decoding (gpu_tests CudaSpeculativeGeneration.*), then DeepSeek's fixed-5 vs
# confidence-scheduled table in shape: the V4.1-Flash decode rank of 4P+64D (EP 64, 40 layers, context 4096) at
# 16, 60 and 96 requests, plain, --nextn 5 and --nextn 5 --spec-varlen, with the controlled drafter (mean
# acceptance 0.865 so that fixed 5 accepts ~3.3 a step as DeepSeek's does; logit spread 1.5; drawn correctness).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > $w/gpu.txt
timeout 240 $t --gtest_color=no --gtest_filter='CudaSpeculativeGeneration.*' > $w/spec-tests.log 2>&1; echo "spec tests rc=$?"
grep -E "identical up to|OK \]|FAILED \]|PASSED|first difference" $w/spec-tests.log | cut -c1-200 | head -60
m=configs/models/deepseek-v4.1-flash.json
common="--model $m --load-format dummy --device cuda --no-engram --routing uniform --rank-slice configs/deploy/4p64d.toml --slice-rank 4 --batch 16,60,96 --context 4096 --warmup 3 --steps 12"
drafter="--draft-acceptance 0.865 --draft-spread 1.5"
for mode in plain fixed varlen; do
  spec=""; [ $mode = fixed ] && spec="--nextn 5 $drafter"; [ $mode = varlen ] && spec="--nextn 5 --spec-varlen $drafter"
  start=$(date +%s)
  timeout 200 $di bench decode $common $spec --output $w/decode-$mode.jsonl > $w/decode-$mode.log 2>&1
  echo "$mode rc=$? $(( $(date +%s) - start )) s"; grep -hE "ms/step|speculative \(|rror" $w/decode-$mode.log | cut -c30-330
done
tar -C $w -cJf $OUT/s11a.tar.xz .

#!/usr/bin/env bash
# Session 11, call 2 (issue #27): the CUDA speculation tests (call 1's filter matched none), then the fixed-5 vs
# confidence-scheduled table on the V4.1-Flash decode rank of 4P+64D (EP 64, 40 layers, context 4096) at 16, 60 and
# 96 requests with the controlled drafter at mean acceptance 0.865 and logit spreads 1.5 and 4, the cost curve now a
# line fitted to 3 warm-up steps per verify length; then the whole gpu_tests suite (no sanitizers).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > $w/gpu.txt
timeout 240 $t --gtest_color=no --gtest_filter='*CudaSpeculativeGeneration*' > $w/spec-tests.log 2>&1; echo "spec tests rc=$?"
grep -E "identical up to|OK \]|FAILED \]|PASSED|first difference" $w/spec-tests.log | cut -c1-160 | head -60
m=configs/models/deepseek-v4.1-flash.json
common="--model $m --load-format dummy --device cuda --no-engram --routing uniform --rank-slice configs/deploy/4p64d.toml --slice-rank 4 --batch 16,60,96 --context 4096 --warmup 3 --steps 20"
run() {  # name, options
  local name=$1; shift; start=$(date +%s)
  timeout 200 $di bench decode $common "$@" --output $w/decode-$name.jsonl > $w/decode-$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s) - start )) s"; grep -hE "ms/step|speculative \(|cost by rows|rror" $w/decode-$name.log | cut -c30-400
}
run plain
for spread in 1.5 4; do
  run fixed-s$spread --nextn 5 --draft-acceptance 0.865 --draft-spread $spread
  run varlen-s$spread --nextn 5 --spec-varlen --draft-acceptance 0.865 --draft-spread $spread
done
timeout 280 $t --gtest_color=no > $w/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"
grep -E "^\[ +(FAILED|PASSED) +\]|tests ran" $w/gpu_tests.log | head -20
tar -C $w -cJf $OUT/s11b.tar.xz .

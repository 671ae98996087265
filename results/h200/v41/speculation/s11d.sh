#!/usr/bin/env bash
# Session 11, call 4 (issue #27): with the CUDA V3 model verifying through the absorbed decode kernels, the
# speculation tests and the verify-row logits again, the whole gpu_tests suite, and the speculative decode step of
# V2-Lite's shape (dummy weights, one rank: all experts local) plain vs --nextn 3 at 1, 16 and 64 requests.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > $w/gpu.txt
timeout 240 $t --gtest_color=no --gtest_filter='*CudaSpeculativeGeneration*:CudaVerifyRows.*' > $w/spec-tests.log 2>&1; echo "spec tests rc=$?"
grep -E "identical up to|verify row|FAILED \]|PASSED|first difference" $w/spec-tests.log | cut -c1-160 | head -60
m=configs/models/deepseek-v2-lite.json
for mode in plain fixed3; do
  spec=""; [ $mode = fixed3 ] && spec="--nextn 3 --draft-acceptance 0.75"
  timeout 200 $di bench decode --model $m --load-format dummy --device cuda --batch 1,16,64 --context 4096 --warmup 3 \
    --steps 20 $spec --output $w/v2lite-$mode.jsonl > $w/v2lite-$mode.log 2>&1
  echo "v2-lite $mode rc=$?"; grep -hE "ms/step|speculative \(|rror" $w/v2lite-$mode.log | cut -c30-330
done
timeout 280 $t --gtest_color=no > $w/gpu_tests.log 2>&1; echo "gpu_tests rc=$?"
grep -E "^\[ +(FAILED|PASSED) +\]" $w/gpu_tests.log | head -20
tar -C $w -cJf $OUT/s11d.tar.xz .

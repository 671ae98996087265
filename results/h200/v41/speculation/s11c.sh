#!/usr/bin/env bash
# Session 11, call 3 (issue #27): the CUDA speculation tests and the verify rows' logits against one-row decode
# steps (V3 bf16's tokens differed in call 2), then, with the slice's layouts copied into grown buffers instead of
# allocated per step size (call 2's variable-length steps paid cudaMalloc per new size), the fixed-5 vs
# confidence-scheduled table on the V4.1-Flash decode rank of 4P+64D (EP 64, 40 layers, context 4096) at 16, 60 and
# 96 requests with the controlled drafter at mean acceptance 0.865 and logit spreads 1.5 and 4, the cost curve now a
# line fitted to 3 warm-up steps per verify length;
# last, the slice's device form against its host form, and a speculative tiny slice under memcheck.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > $w/gpu.txt
timeout 240 $t --gtest_color=no --gtest_filter='*CudaSpeculativeGeneration*:CudaVerifyRows.*' > $w/spec-tests.log 2>&1; echo "spec tests rc=$?"
grep -E "identical up to|verify row|OK \]|FAILED \]|PASSED|first difference" $w/spec-tests.log | cut -c1-160 | head -60
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
tests/gpu/check_slice_device.sh $di $w; echo "slice check rc=$?"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $di bench decode --model tests/fixtures/tiny-v41-fp8 \
  --device cuda --rank-slice configs/deploy/2p2d.toml --slice-rank 2 --routing uniform --batch 4,7 --context 48 \
  --nextn 3 --spec-varlen --warmup 1 --steps 4 > $w/memcheck-slice-spec.log 2>&1; echo "memcheck slice spec rc=$?"
tail -n 2 $w/memcheck-slice-spec.log
tar -C $w -cJf $OUT/s11c.tar.xz .

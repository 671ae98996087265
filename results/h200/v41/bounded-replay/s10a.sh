#!/usr/bin/env bash
# Session 10, call 1: bounded replay on the GPU — the window-floor op rows, the V4.1 model's compact form against
# its mask form and the CPU's (plain and under memcheck), then one prompt of 4K..32K tokens prefilled on the
# 4P+64D prefill rank's slice (EP 4, 40 layers) with --yoco-truncation off and compact (keep 140).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build; di=$b/deepinfer; t=$b/tests/gpu_tests
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv > $w/gpu.txt
timeout 120 $t --gtest_color=no --gtest_filter='*sparse_window*:CudaV41.*' > $w/tests.log 2>&1; echo "tests rc=$?"
grep -E "V4.1 GPU\] compact|compact form|OK|FAILED|Failure|PASSED" $w/tests.log | cut -c1-220 | head -40
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $t --gtest_filter='CudaV41.Compact*:*sparse_window*' --gtest_brief=1 --gtest_color=no > $w/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -n 3 $w/memcheck.log
m=configs/models/deepseek-v4.1-flash.json
common="--model $m --load-format dummy --device cuda --no-engram --routing uniform --rank-slice configs/deploy/4p64d.toml --slice-rank 0"
for L in ${LENGTHS:-4096 8192 16384 32768}; do
  for mode in off compact; do
    keep=""; [ $mode = compact ] && keep="--yoco-keep-tokens 140"
    start=$(date +%s)
    timeout 150 $di bench prefill $common --chunk $L --prompt-len $L --yoco-truncation $mode $keep --warmup 1 --steps 3 \
      --output $w/prefill-4p64d-$mode.jsonl > $w/prefill-$L-$mode.log 2>&1
    echo "L=$L $mode rc=$? $(( $(date +%s) - start )) s"; grep -hE "ms/step|rror" $w/prefill-$L-$mode.log | cut -c30-300
  done
done
tar -C $w -cJf $OUT/s10a.tar.xz .

#!/usr/bin/env bash
# Issue #56, one launch a hyper-connection site (cuda::hc_site): in one H200 call, the new kernel's op rows, the
# whole GPU suite, compute-sanitizer memcheck and racecheck on the new rows, the kernel alone
# (benchmarks/hc_site_bench: the old chain against the one launch), and the decode-rank slice of 4P+64D (EP 64,
# 40 layers, context 4096, 8 / 64 / 256 requests) with the old chain (DEEPINFER_HC_SITE_CHAIN=1) and the new site,
# then the per-step profiles at 8 and 64 requests and the prefill rank (4,096 tokens), old and new. Run from the
# repository root with the pack at $PACK (../shared/device/pack.sh of build-gpu/deepinfer, build-gpu/tests/gpu_tests,
# build-gpu/benchmarks/hc_site_bench, build-gpu/source_dir.txt and build-gpu/commit.txt; see below).
set -u
pack=${PACK:-.device/pack.tar.xz}
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf "$pack" || exit 1
source /tmp/b/env.sh
# The test binary looks for configs and fixtures under the source folder it was built in.
# (build-gpu/source_dir.txt in the pack names it: `pwd > build-gpu/source_dir.txt` where the pack is made).
src=$(cat /tmp/b/build-gpu/source_dir.txt 2>/dev/null)
[[ -n $src && ! -e $src ]] && mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
save() { tar -C $w -cJf "$OUT/hc-site.tar.xz" . ; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $w/gpu.txt
# The commit measured: `git rev-parse HEAD > build-gpu/commit.txt` where the pack is made.
cat /tmp/b/build-gpu/commit.txt 2>/dev/null | tee $w/commit.txt

echo "== hc_site op rows"
timeout 120 $t --gtest_filter='*hc_site*' --gtest_color=no > $w/op-hc-site.log 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |Failure|tests ran" $w/op-hc-site.log | head -8; save

echo "== the kernel alone, old chain vs one launch"
timeout 90 $b/benchmarks/hc_site_bench --reps 20 > $w/hc-site-bench.txt 2>&1; echo "rc=$?"; cat $w/hc-site-bench.txt; save

m=configs/models/deepseek-v4.1-flash.json
common="--model $m --load-format dummy --device cuda --no-engram --routing uniform --context 4096"
common+=" --rank-slice configs/deploy/4p64d.toml --slice-rank 4"
for side in chain site; do
  [[ $side == chain ]] && export DEEPINFER_HC_SITE_CHAIN=1 || unset DEEPINFER_HC_SITE_CHAIN
  echo "== decode-rank slice, $side"
  timeout 110 $di bench decode $common --batch 8,64,256 --warmup 2 --steps 8 --output $w/slice-$side.jsonl \
    > $w/slice-$side.log 2>&1
  echo "rc=$?"; grep -hE "ms/step" $w/slice-$side.log | cut -c30-150; save
done
for batch in 8 64; do
  for side in chain site; do
    [[ $side == chain ]] && export DEEPINFER_HC_SITE_CHAIN=1 || unset DEEPINFER_HC_SITE_CHAIN
    echo "== profile batch $batch, $side"
    DEEPINFER_PROFILE=1 timeout 70 $di bench decode $common --batch $batch --warmup 1 --steps 1 \
      > $w/profile-b$batch-$side.log 2>&1
    echo "rc=$?"; grep "profile V4.1" $w/profile-b$batch-$side.log | tail -1 | cut -c30-420; save
  done
done
unset DEEPINFER_HC_SITE_CHAIN

echo "== the whole GPU suite (op table, V4.1 model, DSpark, graphs == eager, overlap, MTP)"
timeout 240 $t --gtest_color=no > $w/gpu-tests.log 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $w/gpu-tests.log | head -20; save
echo "== compute-sanitizer on the hc_site rows"
for tool in memcheck racecheck; do
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 $t --gtest_filter='*hc_site*' --gtest_brief=1 \
    --gtest_color=no > $w/$tool.log 2>&1; echo "$tool rc=$?"; grep -E "FAILED|PASSED|SUMMARY" $w/$tool.log | head -4
done
save

# The prefill rank of 4P+64D (EP 4), one 4,096-token chunk: the sites at prefill size, old and new.
p="--model $m --load-format dummy --device cuda --no-engram --routing uniform"
p+=" --rank-slice configs/deploy/4p64d.toml --slice-rank 0 --chunk 4096 --prompt-len 4096 --warmup 1 --steps 3"
for side in chain site; do
  [[ $side == chain ]] && export DEEPINFER_HC_SITE_CHAIN=1 || unset DEEPINFER_HC_SITE_CHAIN
  echo "== prefill-rank slice, $side"
  timeout 150 $di bench prefill $p --output $w/prefill-$side.jsonl > $w/prefill-$side.log 2>&1
  echo "rc=$?"; grep -hE "ms/step" $w/prefill-$side.log | cut -c30-150; save
done

#!/usr/bin/env bash
# The GPU machine's test run, in the repository's copy there, with the binaries from a pack
# (../shared/device/README.md):
#   here:  launch/build.sh && ../shared/device/pack.sh .device/pack.tar.xz build/deepinfer build/tests
#   there: mkdir -p /tmp/b && tar -C /tmp/b -xJf .device/pack.tar.xz && PACK=/tmp/b tests/gpu/run.sh
# Runs the CUDA op suite against the CPU ops, then the same under compute-sanitizer memcheck, and leaves
# the logs under $OUT (or /tmp/gpu-out).
set -uo pipefail
pack=${PACK:-/tmp/b}
source "$pack/env.sh"
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
build=$pack/build
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
status=0
echo "== CUDA ops vs CPU"
$build/tests/gpu_tests --gtest_color=no 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|error" || status=1
grep -q "FAILED" "$out/gpu_tests.log" && status=1
echo "== compute-sanitizer memcheck"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 9 $build/tests/gpu_tests --gtest_brief=1 --gtest_color=no \
    > "$out/memcheck.log" 2>&1 || status=1
  tail -n 4 "$out/memcheck.log"
else
  echo "compute-sanitizer not found"; status=1
fi
exit $status

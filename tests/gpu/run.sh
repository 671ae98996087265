#!/usr/bin/env bash
# The GPU machine's test run, in the repository's copy there, with the binaries from a pack
# (../shared/device/README.md):
#   here:  launch/build.sh && ../shared/device/pack.sh .device/pack.tar.xz build/deepinfer build/tests
#   there: mkdir -p /tmp/b && tar -C /tmp/b -xJf .device/pack.tar.xz && PACK=/tmp/b tests/gpu/run.sh
# Runs the CUDA op suite against the CPU ops, then the same under compute-sanitizer, then the end-to-end checks, and
# leaves the logs under $OUT (or /tmp/gpu-out). PARTS picks some of them ("ops sanitizers e2e", the default): the op
# table and the end-to-end checks took 5 minutes together, memcheck over the table about 5 and racecheck 4 (2026-12-05,
# results/h200/tests/2026-12-05-6bd1b40.md), so a device call of at most 10 minutes runs PARTS="ops e2e", and the
# sanitizers as launch/lab/device_call.sh steps over two more calls (memcheck in GTEST_TOTAL_SHARDS shards).
set -uo pipefail
pack=${PACK:-/tmp/b}
source "$pack/env.sh"
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
build=$pack/build
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
status=0
parts=" ${PARTS:-ops sanitizers e2e} "
want() { [[ $parts == *" $1 "* ]]; }
if want ops; then
echo "== CUDA ops vs CPU"
$build/tests/gpu_tests --gtest_color=no 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|error" || status=1
grep -q "FAILED" "$out/gpu_tests.log" && status=1
fi
if want sanitizers; then
echo "== compute-sanitizer memcheck"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 9 $build/tests/gpu_tests --gtest_brief=1 --gtest_color=no \
    > "$out/memcheck.log" 2>&1 || status=1
  tail -n 4 "$out/memcheck.log"
else
  echo "compute-sanitizer not found"; status=1
fi

echo "== compute-sanitizer synccheck and initcheck on the decode attention (stale shared memory shows there)"
if command -v compute-sanitizer >/dev/null; then
  for tool in synccheck initcheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 $build/tests/gpu_tests --gtest_filter='*mla_decode*' --gtest_brief=1 \
      --gtest_color=no > "$out/$tool.log" 2>&1 || status=1
    grep -E "FAILED|Failure|SUMMARY|PASSED" "$out/$tool.log" | head -4
  done
fi

echo "== compute-sanitizer racecheck on the shared-memory kernels of V4.1 (hyper-connections, routing) and the norms"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool racecheck --error-exitcode 9 $build/tests/gpu_tests --gtest_filter='*hc_*:*route_topk*:*rms_norm*:*sparse_window*:*compress_pool*:*indexer_scores*:*select_topk*:*candidate_blocks*:*moe_gemv_fp4*:*fp4_rows*:*fp8_blocks*:*linear_skinny*' \
    --gtest_brief=1 --gtest_color=no > "$out/racecheck.log" 2>&1 || status=1
  grep -E "FAILED|Failure|SUMMARY|PASSED" "$out/racecheck.log" | head -4
fi

fi

if ! want e2e; then echo "run.sh: status $status"; exit $status; fi
echo "== NCCL communicator vs MPI (one rank: the only NCCL run one GPU allows)"
mpirun -np 1 $build/tests/mp_tests --gtest_filter='Nccl*' --gtest_color=no 2>&1 | grep -E "OK|FAILED|SKIPPED|PASSED" | tee -a "$out/e2e.log"
grep -q "FAILED" "$out/e2e.log" && status=1

# End to end: the transformers fixtures on the GPU.
py=python3
di=$build/deepinfer
echo "== forward --device cuda vs transformers fp32 (mean bound: 1.5 x transformers' own bf16 error + 5e-3)"
for flag in "" --batch-invariant; do  # (the flag: every row absorbed, W_uk and W_uv by the skinny kernel, issue #28)
  for f in tiny-v3-fp32 tiny-v3-bf16 tiny-v2-fp32 tiny-v2-bf16; do
    $py tests/cli/check_forward.py tests/fixtures/$f all --bf16-yardstick 1.5 -- $di forward --model tests/fixtures/$f --device cuda \
      $flag > /tmp/fw.log 2>&1 || status=1
    echo "$f $flag: $(grep -E "relative error|Error|error" /tmp/fw.log)" | tee -a "$out/e2e.log"
  done
done
echo "== V4.1 and V3 FP8: forward --device cuda vs --device cpu through the CLI, the V4.1 fixtures' longest prompt (the bounds: gpu_tests CudaV41.*)"
toks=$($py -c "import json; print(','.join(map(str, json.load(open('tests/fixtures/tiny-v41/reference.json'))['prompts'][3])))")
for f in tiny-v41 tiny-v41-fp8 tiny-v3-fp8; do  # (tiny-v3-fp8: V3's FP8 format, 16 x 16 fp32 block scales)
  $di forward --model tests/fixtures/$f --device cpu --tokens $toks --output /tmp/fw-cpu.h5 > /dev/null 2>&1 || status=1
  $di forward --model tests/fixtures/$f --device cuda --tokens $toks --output /tmp/fw-cuda.h5 > /dev/null 2>&1 || status=1
  $py -c "
import h5py, numpy as np
a = h5py.File('/tmp/fw-cpu.h5')['logits'][()].astype(np.float64); b = h5py.File('/tmp/fw-cuda.h5')['logits'][()]
print(f'$f forward cuda vs cpu: {a.shape[0]} positions, relative error {np.linalg.norm(b - a) / np.linalg.norm(a):.3e}, '
      f'argmax agreement {100 * np.mean(a.argmax(1) == b.argmax(1)):.1f}%')" | tee -a "$out/e2e.log" || status=1
done
echo "== generate: CUDA vs CPU (V3, V2, V4.1 fp32 and FP8/FP4 fixtures)"
# The example prompts with their ids folded into the V4.1 fixtures' vocabulary of 256.
$py -c "
import json, sys
for line in open('launch/examples/prompts.jsonl'):
    r = json.loads(line); r['prompt_token_ids'] = [t % 256 for t in r['prompt_token_ids']]; print(json.dumps(r))
" > /tmp/prompts-256.jsonl
for f in tiny-v3-bf16 tiny-v3-fp8 tiny-v2-bf16 tiny-v41 tiny-v41-fp8; do
  prompts=launch/examples/prompts.jsonl
  [[ $f == tiny-v41* ]] && prompts=/tmp/prompts-256.jsonl
  $di generate --model tests/fixtures/$f --device cpu --input $prompts --output /tmp/cpu-$f.jsonl > /dev/null 2>&1 || status=1
  $di generate --model tests/fixtures/$f --device cuda --input $prompts --output /tmp/cuda-$f.jsonl 2>&1 | grep -E "tok/s|error" | tee -a "$out/e2e.log"
  $py tests/gpu/compare_generate.py /tmp/cpu-$f.jsonl /tmp/cuda-$f.jsonl "$f 1 rank cuda vs cpu" | tee -a "$out/e2e.log" || status=1
  mpirun -np 4 --oversubscribe $di generate --model tests/fixtures/$f --device cuda --deploy configs/deploy/2p2d.toml \
    --input $prompts --output /tmp/cuda2p2d-$f.jsonl > "$out/2p2d-$f.log" 2>&1 || status=1
  $py tests/gpu/compare_generate.py /tmp/cpu-$f.jsonl /tmp/cuda2p2d-$f.jsonl "$f 2p2d cuda (one GPU, MPI transport) vs cpu" | tee -a "$out/e2e.log" || status=1
  $py tests/gpu/compare_generate.py /tmp/cuda-$f.jsonl /tmp/cuda2p2d-$f.jsonl "$f 2p2d cuda vs 1 rank cuda" | tee -a "$out/e2e.log" || status=1
done
grep -hE "transport" "$out"/2p2d-*.log | head -1 | tee -a "$out/e2e.log"
echo "== engram tables split across the EP group's ranks (the default) == whole tables, same deployment"
for f in tiny-v41-engram tiny-v41-engram-fp8; do
  for split in group none; do
    mpirun -np 4 --oversubscribe $di generate --model tests/fixtures/$f --device cuda --deploy configs/deploy/colocated4.toml \
      --engram-split $split --input /tmp/prompts-256.jsonl --output /tmp/engram-$split.jsonl > "$out/engram-$f-$split.log" 2>&1 || status=1
  done
  grep -hE "engram: .*part" "$out/engram-$f-group.log" | head -1 | tee -a "$out/e2e.log"
  $py tests/gpu/compare_generate.py /tmp/engram-none.jsonl /tmp/engram-group.jsonl "$f colocated4 split vs whole tables" \
    --identical | tee -a "$out/e2e.log" || status=1
done
echo "== the model drafters on the GPU: speculation (fixed and, where the flag allows, variable) = plain, 1 rank and 2p2d"
for pair in "tiny-v3-bf16 mtp" "tiny-v41-dspark dspark"; do
  set -- $pair
  $py tests/cli/check_speculation.py --deepinfer $di --mpirun "mpirun --oversubscribe" --model tests/fixtures/$1 \
    --deploy configs/deploy/2p2d.toml --ranks 4 --model-drafter $2 --args "--device cuda --batch-invariant" \
    > "$out/spec-$2.log" 2>&1 || status=1
  grep -E "^ok:|Error" "$out/spec-$2.log" | sed "s/^/$1: /" | tee -a "$out/e2e.log"
done
echo "== rank slice: the device form's served pairs and exchange == the host form's on the CPU (one step)"
bash tests/gpu/check_slice_device.sh $di /tmp 2>&1 | tee -a "$out/e2e.log" || status=1
echo "== KV cache sized from GPU memory"
$di generate --model tests/fixtures/tiny-v3-bf16 --device cuda --gpu-memory-fraction 0.5 --input launch/examples/prompts.jsonl \
  --output /tmp/frac.jsonl 2>&1 | grep -E "KV cache|error" | tee -a "$out/e2e.log" || status=1
$py tests/gpu/compare_generate.py /tmp/cuda-tiny-v3-bf16.jsonl /tmp/frac.jsonl "tiny-v3-bf16 --gpu-memory-fraction 0.5 vs default cache" | tee -a "$out/e2e.log"
echo "run.sh: status $status"
exit $status

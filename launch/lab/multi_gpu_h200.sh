#!/usr/bin/env bash
# One device call on a machine of several H200s (device kind nvidia-h200-x2, -x4, -x8), one rank per GPU,
# NCCL with NVLink multicast off (NCCL_NVLS_ENABLE=0, as the device README requires). Binaries from a pack
# (tests/gpu/run.sh says how):   PACK=/tmp/b launch/lab/multi_gpu_h200.sh      logs and results in $OUT
#  1. the link between the GPUs (nvidia-smi topo -m);
#  2. the multi-rank NCCL tests (communicator, device dispatch/combine) at one rank per GPU;
#  3. `bench dispatch`: the engine's dispatch/combine against ncclAlltoAll (nccl-tests-style table);
#  4. `generate` at 1P+1D and at EP over every GPU, each against the CPU's outputs;
#  5. prefill and decode sweeps at DeepSeek-V2-Lite shape with EP over every GPU, plotted beside the same
#     sweeps on one GPU (same binary, same call).
# At most 8 files come back from a call: $OUT holds the 4 sweep files, 2 plots, the dispatch table and
# logs.tar.gz (every log and generate output).
# SKIP_SWEEPS=1 stops after step 4.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
pack=${PACK:-/tmp/b}
source "$pack/env.sh"
out=${OUT:-/tmp/multi-gpu-out}
# A device call returns at most 8 files: the logs and generate outputs go back as one archive (logs.tar.gz).
logs=$out/logs gen=$out/logs/generate
mkdir -p "$gen"
di=$pack/build/deepinfer
n=$(nvidia-smi -L | wc -l)
mpi_at() { echo "mpirun -np $1 --oversubscribe -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x PATH"; }
mpi=$(mpi_at $n)
status=0
nvidia-smi topo -m > "$logs/topo.txt" 2>&1; cat "$logs/topo.txt"

echo "== NCCL tests at $n ranks, one GPU each"
$mpi $pack/build/tests/mp_tests --gtest_filter='Nccl*' --gtest_color=no 2>&1 | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|rror" \
  | tee "$logs/mp_tests.log"
grep -qE "FAILED|SKIPPED" "$logs/mp_tests.log" && status=1

echo "== bench dispatch at EP $n"
$mpi $di bench dispatch --tokens 128,4096 --hidden 2048,7168 --top-k 6,8 --warmup 5 --iters 20 \
  --output "$out/dispatch-ep$n.jsonl" 2>&1 | tee "$logs/dispatch-ep$n.log" | grep -vE "^\s*$" || status=1

echo "== generate at 1P+1D and colocated EP $n vs CPU"
# compare_generate.py: the common prefix with the CPU's (and one GPU's) tokens; check_greedy_against_cpu.py:
# every generated token is the CPU model's greedy choice, or within a bf16 near-tie of it (teacher-forced), and
# no farther from it than the one-GPU run's tokens are.
for f in tiny-v3-bf16 tiny-v2-bf16; do
  $di generate --model tests/fixtures/$f --device cpu --input launch/examples/prompts.jsonl --output $gen/cpu-$f.jsonl > /dev/null 2>&1 || status=1
  $di generate --model tests/fixtures/$f --device cuda --input launch/examples/prompts.jsonl --output $gen/cuda-$f.jsonl > /dev/null 2>&1 || status=1
  for deploy in 1p1d colocated$n; do
    ranks=$([[ $deploy == 1p1d ]] && echo 2 || echo $n)
    $(mpi_at $ranks) $di generate --model tests/fixtures/$f --device cuda --deploy configs/deploy/$deploy.toml \
      --input launch/examples/prompts.jsonl --output $gen/$deploy-$f.jsonl > "$logs/generate-$deploy-$f.log" 2>&1 || status=1
    grep -hE "transport|tok/s|rror" "$logs/generate-$deploy-$f.log" | head -3
    python3 tests/gpu/compare_generate.py $gen/cpu-$f.jsonl $gen/$deploy-$f.jsonl "$f $deploy on $n GPUs vs cpu" \
      | tee -a "$logs/generate.log" || status=1
    python3 tests/gpu/compare_generate.py $gen/cuda-$f.jsonl $gen/$deploy-$f.jsonl "$f $deploy on $n GPUs vs 1 GPU" \
      | tee -a "$logs/generate.log" || status=1
    python3 tests/gpu/check_greedy_against_cpu.py $di tests/fixtures/$f launch/examples/prompts.jsonl \
      $gen/$deploy-$f.jsonl "$f $deploy on $n GPUs" --baseline $gen/cuda-$f.jsonl | tee -a "$logs/generate.log" || status=1
  done
done

if [[ -z ${SKIP_SWEEPS:-} ]]; then
  # The same sweeps on one GPU with the same binary, so the curves differ only in the GPU count.
  for ranks in 1 $n; do
    echo "== sweeps at DeepSeek-V2-Lite shape, EP $ranks"
    common="--model configs/models/deepseek-v2-lite.json --load-format dummy --device cuda --deploy configs/deploy/colocated$ranks.toml"
    $(mpi_at $ranks) $di sweep prefill $common --points ${PREFILL_POINTS:-4096,8192,16384,32768} --prompt-len 1024 \
      --warmup 1 --steps 3 --output "$out/h200x$ranks-v2lite-prefill.h5" 2>&1 | grep -E "sweep|rror|wrote|transport" || status=1
    $(mpi_at $ranks) $di sweep decode $common --points ${DECODE_POINTS:-8,16,32,64,128,256} --context 1024 --nextn 3 \
      --acceptance 0.75 --warmup 2 --steps 5 --output "$out/h200x$ranks-v2lite-decode.h5" 2>&1 \
      | grep -E "sweep|rror|wrote|transport" || status=1
  done
  python3 launch/plot_sweeps.py --out "$out" "$out/h200x1-v2lite-prefill.h5" "$out/h200x$n-v2lite-prefill.h5" \
    "$out/h200x1-v2lite-decode.h5" "$out/h200x$n-v2lite-decode.h5" || status=1
fi
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -r "$logs"
echo "multi_gpu_h200.sh: status $status"
exit $status

#!/usr/bin/env bash
# One device call made of named steps, run in order on the GPU machine from a pack of binaries (tests/gpu/run.sh says
# how to make one; PACK=/tmp/b by default), each step's log under $OUT (or /tmp/device-call) and the whole folder
# packed after every step to $TAR (default $OUT/call.tar.xz: a device call brings back at most 8 files and drops the
# rest, so point TAR into the call's $OUT and OUT elsewhere, and run several steps in one device_call.sh rather than
# several device_call.sh with a tarball each), so that a call cut short by its time limit still brings back what ran.
# The one-off scripts of earlier device calls were all compositions of these steps (results/h200/runs.md lists them).
#
#   launch/lab/device_call.sh STEP [STEP ...]
#   suite                         tests/gpu/run.sh: the CUDA op suite against the CPU, the sanitizers, the end-to-end
#                                 checks (PARTS=... picks some: run.sh says which fit a call)
#   ops FILTER                    gpu_tests --gtest_filter=FILTER
#   memcheck FILTER               compute-sanitizer over those op rows (also racecheck, synccheck, initcheck; the
#                                 GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX variables split the rows across calls)
#   decode MODEL BATCHES CONTEXTS [ARGS...]   bench decode at dummy weights (MODEL: configs/models/NAME.json)
#   prefill MODEL CHUNKS PROMPT_LEN [ARGS...]  bench prefill
#   bench NAME [ARGS...]          build/benchmarks/NAME (kernel and drafter benchmarks)
#   peer NAME [ARGS...]           .device/peer/NAME from the pack: a peer built outside the repository
#                                 (launch/lab/peers/build_flashmla_peer.sh: flashmla_dense_decode)
#   profile MODEL BATCH CONTEXT [ARGS...]      one decode step per phase, each synchronised (DEEPINFER_PROFILE=1)
# ARGS go to deepinfer as they are (e.g. --num-layers 4 --no-engram --batch-invariant). Steps are separated by "--":
#   launch/lab/device_call.sh suite -- decode configs/models/deepseek-v2-lite.json 1,64,256 1024,4096 -- \
#     prefill configs/models/deepseek-v4.1-flash.json 4096 4096 --num-layers 4 --no-engram
set -uo pipefail
source "$(dirname "$0")/pack_env.sh" /tmp/device-call  # $pack, $out, $di
build=$pack/build
n=0
tarball=${TAR:-$out/call.tar.xz}
keep() { tar -C "$out" --exclude=call.tar.xz -cJf "$tarball" . 2>/dev/null; }

step() {
  local name=$1; shift
  n=$((n + 1))
  local log="$out/$(printf '%02d' $n)-$name.log"
  case "$name" in
    suite) OUT="$out/suite" "$(dirname "$0")/../../tests/gpu/run.sh" > "$log" 2>&1 ;;
    ops) timeout 600 $build/tests/gpu_tests --gtest_color=no --gtest_filter="$1" > "$log" 2>&1 ;;
    memcheck|racecheck|synccheck|initcheck)
      timeout 600 compute-sanitizer --tool "$name" --error-exitcode 9 $build/tests/gpu_tests --gtest_brief=1 \
        --gtest_color=no --gtest_filter="$1" > "$log" 2>&1 ;;
    decode)
      local model=$1 batches=$2 contexts=$3; shift 3
      timeout 600 $di bench decode --model "$model" --load-format dummy --device cuda --batch "$batches" \
        --context "$contexts" --warmup 3 --steps 10 --output "$out/$(printf '%02d' $n)-decode.jsonl" "$@" > "$log" 2>&1 ;;
    prefill)
      local model=$1 chunks=$2 prompt=$3; shift 3
      timeout 600 $di bench prefill --model "$model" --load-format dummy --device cuda --chunk-tokens "$chunks" \
        --prompt-len "$prompt" --warmup 1 --steps 3 --output "$out/$(printf '%02d' $n)-prefill.jsonl" "$@" > "$log" 2>&1 ;;
    bench) local bench=$1; shift; timeout 600 $build/benchmarks/$bench "$@" > "$log" 2>&1 ;;
    peer) local peer=$1; shift; timeout 600 $pack/.device/peer/$peer "$@" > "$log" 2>&1 ;;
    profile)
      local model=$1 batch=$2 context=$3; shift 3
      DEEPINFER_PROFILE=1 timeout 600 $di bench decode --model "$model" --load-format dummy --device cuda \
        --batch "$batch" --context "$context" --warmup 2 --steps 2 "$@" > "$log" 2>&1 ;;
    *) echo "unknown step '$name' (suite, ops, memcheck, racecheck, synccheck, initcheck, decode, prefill, bench," \
            "peer, profile)"; return 2 ;;
  esac
  local status=$?
  echo "step $n $name $*: exit $status ($(basename "$log"))"
  grep -hE "ms/step|tok/s|PASSED|FAILED|ERROR SUMMARY" "$log" | cut -c1-200 | tail -n 12
  keep
  return $status
}

overall=0
args=()
for a in "$@" --; do
  if [ "$a" = "--" ]; then
    [ ${#args[@]} -gt 0 ] && { step "${args[@]}" || overall=1; }
    args=()
  else
    args+=("$a")
  fi
done
exit $overall

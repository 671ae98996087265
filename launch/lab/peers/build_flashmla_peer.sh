#!/usr/bin/env bash
# Builds the FlashMLA peer (launch/lab/peers/flashmla_dense_decode.cu) on this machine (nvcc only; no GPU needed) into
# .device/peer/flashmla_dense_decode (ignored: nothing of FlashMLA enters the repository), for a device call to run
# beside build/benchmarks/attention_bench. FlashMLA's sources come from a git directory (the `fetch` tool's
# github:deepseek-ai/FlashMLA), at $COMMIT (default 9241ae3, the one its figures in results/ were taken at); CUTLASS
# from third_party/cutlass (launch/fetch_cutlass.sh) in place of FlashMLA's submodule.
#   launch/lab/peers/build_flashmla_peer.sh /work/.mirror/deepseek-ai+FlashMLA/repo
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
git_dir=${1:?usage: build_flashmla_peer.sh FLASHMLA_GIT_DIR}
commit=${COMMIT:-9241ae3}
src=$root/.device/peer/FlashMLA
mkdir -p "$src"
git --git-dir="$git_dir" archive "$commit" csrc | tar -x -C "$src"
cutlass=$root/third_party/cutlass/include
[ -f "$cutlass/cutlass/version.h" ] || "$root/launch/fetch_cutlass.sh"
flags=(-O3 -std=c++20 -DNDEBUG -D_USE_MATH_DEFINES -Wno-deprecated-declarations --expt-relaxed-constexpr
       --expt-extended-lambda --use_fast_math -gencode arch=compute_90a,code=sm_90a
       -I"$src/csrc" -I"$src/csrc/kerutils/include" -I"$src/csrc/sm90" -isystem "$cutlass")
out=$root/.device/peer
objs=()
for f in csrc/sm90/decode/dense/instantiations/bf16.cu csrc/smxx/decode/combine/combine.cu \
         csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu; do
  obj=$out/$(basename "${f%.cu}").o
  nvcc "${flags[@]}" -c "$src/$f" -o "$obj"
  objs+=("$obj")
done
nvcc "${flags[@]}" "$root/launch/lab/peers/flashmla_dense_decode.cu" "${objs[@]}" -o "$out/flashmla_dense_decode"
echo "built $out/flashmla_dense_decode (FlashMLA $commit)"

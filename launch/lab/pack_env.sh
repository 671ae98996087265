# Sourced by the GPU-lab scripts: the packed binaries ($PACK, default /tmp/b; tests/gpu/run.sh says how to make
# one) on PATH with their libraries, the results folder ($OUT, default the script's own), deepinfer, and the
# DeepSeek-V2-Lite configuration the H200 figures are measured at. Usage: source pack_env.sh DEFAULT_OUT
pack=${PACK:-/tmp/b}
source "$pack/env.sh"
out=${OUT:-$1}
mkdir -p "$out"
di=${DI:-$pack/build/deepinfer}  # DI: another binary (an A/B side)
model=configs/models/deepseek-v2-lite.json

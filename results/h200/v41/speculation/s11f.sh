#!/usr/bin/env bash
# Session 11, call 8 (issue #27): speculative decoding through `generate --device cuda` on the V4.1 FP8/FP4 fixture,
# one rank and 2p2d (four ranks sharing the GPU over the MPI transport): outputs against plain decoding's
# (tests/cli/check_speculation.py: fixed and --spec-varlen, greedy and sampled requests, stop tokens).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
timeout 500 python3 tests/cli/check_speculation.py --deepinfer $di "--mpirun=mpirun --oversubscribe" \
  --model tests/fixtures/tiny-v41-fp8 --deploy configs/deploy/2p2d.toml --ranks 4 --args "--device cuda" \
  > $w/check-speculation-cuda.log 2>&1; echo "check rc=$?"
grep -E "^ok:|Error|assert|differs" $w/check-speculation-cuda.log | cut -c1-220
tar -C $w -cJf $OUT/s11f.tar.xz .

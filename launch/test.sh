#!/usr/bin/env bash
# The test command: install what is missing, build (with the CUDA code whenever nvcc exists), then run the
# unit, multi-rank (up to 68 ranks, oversubscribed) and command-line tests with ctest. GPU tests skip
# themselves without a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/launch/setup.sh"
"$root/launch/build.sh" -DDEEPINFER_WERROR=ON
source "$root/launch/mpi_env.sh"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 900 "$@"

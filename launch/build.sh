#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR). The CUDA backend is compiled whenever nvcc is found
# (DEEPINFER_CUDA=AUTO); pass extra CMake arguments after the script name, e.g. -DDEEPINFER_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$jobs"

#!/usr/bin/env bash
# Puts CUTLASS 4's C++ headers (the Hopper FP8 block-scaled GEMMs that kernels/cuda_sm90a/fp8_gemm.cu instantiates) into
# third_party/cutlass (or $CUTLASS_PREFIX), from PyPI's nvidia-cutlass wheel, which carries them under
# cutlass_library/source. Header-only: nothing is built. Idempotent; the release and its checksum are pinned.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${CUTLASS_PREFIX:-$root/third_party/cutlass}
version=4.2.0.0
sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
url=https://files.pythonhosted.org/packages/21/6b/e86fc2fd536dd4b8bd2209aa31d7002610c501b0802337787eac9c9b328c/nvidia_cutlass-$version-py3-none-any.whl
[ -f "$prefix/include/cutlass/version.h" ] && [ -f "$prefix/include/cutlass/util/packed_stride.hpp" ] && exit 0
echo "fetch_cutlass: CUTLASS $version headers into $prefix"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
wheel=$work/nvidia_cutlass-$version-py3-none-any.whl
curl -fsSL --retry 3 -o "$wheel" "$url"
echo "$sha256  $wheel" | sha256sum -c --quiet
python3 - "$wheel" "$work/x" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist()
                               if n.startswith(("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/"))])
EOF
mkdir -p "$prefix/include"
cp -r "$work/x/cutlass_library/source/include/." "$prefix/include/"
cp -r "$work/x/cutlass_library/source/tools/util/include/." "$prefix/include/"

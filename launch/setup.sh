#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, then builds xgrammar (launch/build_xgrammar.sh). Idempotent;
# silent when everything is present.
set -euo pipefail
packages=(build-essential cmake pkg-config git libopenmpi-dev openmpi-bin libhdf5-dev libspdlog-dev libfmt-dev
          libcli11-dev libgtest-dev nlohmann-json3-dev libpcre2-dev xz-utils libtomlplusplus-dev python3 python3-numpy python3-h5py
          python3-matplotlib python3-jsonschema curl ca-certificates slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Not packaged by Debian: xgrammar's C++ core (structured output), built from its PyPI source distribution.
"$(dirname "$0")/build_xgrammar.sh"
# Not packaged by Debian: CUTLASS 4's headers (the Hopper FP8 GEMM), from PyPI's nvidia-cutlass wheel.
"$(dirname "$0")/fetch_cutlass.sh"

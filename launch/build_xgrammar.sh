#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar engine of structured output, issue #30) from its PyPI source distribution
# into third_party/xgrammar (or $XGRAMMAR_PREFIX): a static library and its headers. Idempotent: nothing to do when
# the library is there. The release and its checksum are pinned; only the C++ library is built (no Python bindings,
# no LTO, so that the archive links into any build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${XGRAMMAR_PREFIX:-$root/third_party/xgrammar}
version=0.2.9
url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$version.tar.gz
sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
[ -f "$prefix/lib/libxgrammar.a" ] && [ -f "$prefix/include/xgrammar/xgrammar.h" ] && exit 0
echo "build_xgrammar: building xgrammar $version into $prefix"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL --retry 3 -o "$work/xgrammar.tar.gz" "$url"
echo "$sha256  $work/xgrammar.tar.gz" | sha256sum -c --quiet
tar -xzf "$work/xgrammar.tar.gz" -C "$work"
src=$work/xgrammar-$version
mkdir -p "$src/build"
# The build directory's config.cmake wins over the package's own (which turns the Python bindings on).
printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\nset(XGRAMMAR_ENABLE_CPPTRACE OFF)\n' \
  > "$src/build/config.cmake"
cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="-fno-lto" \
  -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build "$src/build" -j "${JOBS:-$(nproc)}" --target xgrammar >/dev/null
cmake --install "$src/build" >/dev/null

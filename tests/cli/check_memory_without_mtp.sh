#!/usr/bin/env bash
# deepinfer memory counts a V3 checkpoint's MTP layer only where the checkpoint has it: a copy of the FP8 fixture whose
# eh_proj is renamed in its header (as a checkpoint saved without the module lacks it) is reported without one.
# Usage: check_memory_without_mtp.sh PYTHON SOURCE_DIR DEEPINFER
set -euo pipefail
py=$1 root=$2 di=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$root"/tests/fixtures/tiny-v3-fp8/config.json "$root"/tests/fixtures/tiny-v3-fp8/model.safetensors "$dir"/
"$py" - "$dir/model.safetensors" <<'PY'
import sys
path = sys.argv[1]
data = open(path, "rb").read()
key = b'"model.layers.3.eh_proj.weight"'
assert data.count(key) == 1
open(path, "wb").write(data.replace(key, b'"model.layers.3.eh_proX.weight"'))
PY
deploy=$root/configs/deploy/colocated4.toml
with=$("$di" memory --deploy "$deploy" --model "$root/tests/fixtures/tiny-v3-fp8" | head -1)
without=$("$di" memory --deploy "$deploy" --model "$dir" | head -1)
grep -q "its MTP layer counted" <<< "$with" || { echo "FAIL: the fixture's MTP layer not counted: $with"; exit 1; }
grep -q "no draft module in the checkpoint (no model.layers.3.eh_proj.weight)" <<< "$without" ||
  { echo "FAIL: a checkpoint without the module: $without"; exit 1; }
echo "ok: the MTP layer counted where the checkpoint has it, not where it does not"

#!/usr/bin/env bash
# launch/lab/v3_curves.py on rank slices made here on the CPU (the tiny V3 fixture standing in a decode and a prefill
# rank of configs/deploy/v3-8p8d.toml): every output written, each point's modelled exchange and floor present, the
# published figures and targets kept as attributes.
# Usage: check_v3_curves.sh PYTHON SOURCE_DIR DEEPINFER
set -euo pipefail
py=$1 root=$2 di=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
model=(--model "$root/tests/fixtures/tiny-v3-bf16" --routing uniform --rank-slice "$root/configs/deploy/v3-8p8d.toml")
"$di" bench decode "${model[@]}" --slice-rank 8 --batch 2,4,8 --context 16 --warmup 1 --steps 2 \
  --output "$out/decode.jsonl" > "$out/decode.log" 2>&1
"$di" bench prefill "${model[@]}" --slice-rank 0 --chunk-tokens 32,64 --prompt-len 32 --warmup 1 --steps 2 \
  --output "$out/prefill.jsonl" > "$out/prefill.log" 2>&1
"$py" "$root/launch/lab/v3_curves.py" --out "$out/curves" --decode "$out/decode.jsonl" --prefill "$out/prefill.jsonl" \
  > "$out/summary.txt"
for f in v3-curves.h5 v3-decode.png v3-prefill.png; do
  test -s "$out/curves/$f" || { echo "missing $f"; exit 1; }
done
"$py" - "$out" <<'PY'
import json, sys
import h5py
out = sys.argv[1]
first = json.loads(open(f"{out}/decode.jsonl").readline())
assert first["rank_slice"]["moe_layers"] == 2, first["rank_slice"]  # tiny-v3: 3 layers, the first dense
with h5py.File(f"{out}/curves/v3-curves.h5") as f:
    d, p = f["decode"], f["prefill"]
    assert len(d["compute_ms"]) == 3 and len(p["compute_ms"]) == 2
    assert (d["comm_ms"][()] > 0).all() and (p["comm_ms"][()] > 0).all(), "every point's modelled exchange"
    assert (d["step_overlap_ms"][()] >= d["compute_ms"][()]).all()
    assert (d["floor_ms"][()] > 0).all() and (d["floor_bytes_ms"][()] > 0).all(), "floored as V3"
    assert (d["tokens_per_s_per_gpu"][()] == d["batch"][()] * d["tokens_per_s_per_user"][()]).all()
    published = json.loads(f.attrs["published"])
    assert {p["hardware"] for p in published} == {"H800", "H100", "H200"} and all(p["source"] for p in published)
    assert json.loads(f.attrs["targets"])["decode"]["tokens_per_s_per_gpu"] == 3000
print("v3_curves.py: curves and plots from CPU rank slices of v3-8p8d, with the published figures")
PY

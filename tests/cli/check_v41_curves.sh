#!/usr/bin/env bash
# launch/lab/v41_curves.py on the H200 rank slices kept in results/: every output written, the HDF5 tables and
# attributes readable, the scaling study naming the deployment that does not fit.
# Usage: check_v41_curves.sh PYTHON SOURCE_DIR
set -euo pipefail
py=$1 root=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
r=$root/results/h200/v41/rank-slices
"$py" "$root/launch/lab/v41_curves.py" --out "$out" --decode "$r/decode-4p64d-ep64-ctx4k.jsonl" "$r/decode-4p64d-ep64-ctx32k.jsonl" \
  --prefill "$r/prefill-4p64d-ep4.jsonl" --scaling "$r/decode-4p16d-ep16-ctx4k.jsonl" "$r/prefill-64p64d-ep64.jsonl" > "$out/summary.txt"
for f in v41-curves.h5 v41-decode.png v41-prefill.png v41-scaling.h5 v41-scaling.png; do
  test -s "$out/$f" || { echo "missing $f"; exit 1; }
done
"$py" - "$out" <<'PY'
import json, sys
import h5py
out = sys.argv[1]
with h5py.File(f"{out}/v41-curves.h5") as f:
    d = f["decode"]
    assert len(d["compute_ms"]) == 11 and (d["comm_ms"][()] > 0).all(), "decode points and their modelled exchange"
    assert (d["step_overlap_ms"][()] >= d["compute_ms"][()]).all()
    assert json.loads(f["decode"].attrs["slice"])["ep_size"] == 64
    assert "DeepEP" in json.loads(f.attrs["communication_model"])["decode"]
with h5py.File(f"{out}/v41-scaling.h5") as f:
    assert "prefill_missing" in f["1p1d"].attrs and set(f["64p64d"]) == {"decode", "prefill"}
    assert (f["4p64d/decode/tokens_per_s_deployment"][()] == 64 * f["4p64d/decode/tokens_per_s_per_gpu"][()]).all()
print("v41_curves.py: curves, plots and the scaling study from the committed H200 slices")
PY

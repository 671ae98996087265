#!/usr/bin/env bash
# check_plot.sh PYTHON ROOT -- SWEEP_COMMAND...: runs a small decode sweep to a temporary file, draws the Pareto
# plots with launch/plot_sweeps.py, and checks that both PNGs were written.
set -euo pipefail
py=$1 root=$2; shift 3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$@" --output "$tmp/decode.h5"
"$py" "$root/launch/plot_sweeps.py" --out "$tmp/plots" "$tmp/decode.h5"
for f in decode prefill; do [ -s "$tmp/plots/$f.png" ] || { echo "FAIL: no $f.png"; exit 1; }; done
echo "ok: $(ls "$tmp/plots")"

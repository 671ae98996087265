#!/usr/bin/env bash
# Session 12, call 12: FP4 experts all on one rank at decode — the matrix-vector kernels (the default, CUDA graphs)
# against the tile kernel (DEEPINFER_FP4_TILES_FROM_PAIRS=0: eager, the row counts read back), V4.1-Flash width,
# 4 layers, context 4096, batch 16..256: where the tiles start to pay.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
common="--model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram --batch 16,32,64,96,128,192,256 --context 4096 --warmup 3 --steps 9"
timeout 200 $di bench decode $common --output $w/decode-gemv.jsonl > $w/decode-gemv.log 2>&1
echo "gemv rc=$?"; grep -hE "ms/step" $w/decode-gemv.log | cut -c30-110
DEEPINFER_FP4_TILES_FROM_PAIRS=0 timeout 200 $di bench decode $common --output $w/decode-tiles.jsonl > $w/decode-tiles.log 2>&1
echo "tiles rc=$?"; grep -hE "ms/step" $w/decode-tiles.log | cut -c30-110
tar -C $w -cJf $OUT/s12h.tar.xz .

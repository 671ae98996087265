#!/usr/bin/env bash
# Session 11, call 12 (issue #27): the lead of call 11 tested — the variable-length rule with its totals restricted
# to rows a multiple of 32 (--spec-row-quantum 32: steps in few shapes) against plain variable and fixed 5, on the
# V4.1-Flash decode rank of 4P+64D at 16, 60 and 96 requests, spread 4.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
m=configs/models/deepseek-v4.1-flash.json
common="--model $m --load-format dummy --device cuda --no-engram --routing uniform --rank-slice configs/deploy/4p64d.toml --slice-rank 4 --batch 16,60,96 --context 4096 --warmup 3 --steps 20 --nextn 5 --draft-acceptance 0.865 --draft-spread 4"
run() {
  local name=$1; shift
  timeout 150 $di bench decode $common "$@" --output $w/decode-$name.jsonl > $w/decode-$name.log 2>&1
  echo "$name rc=$?"; grep -hE "ms/step|speculative \(" $w/decode-$name.log | cut -c30-330
}
run fixed
run varlen --spec-varlen
run varlen-q32 --spec-varlen --spec-row-quantum 32
tar -C $w -cJf $OUT/s11h.tar.xz .

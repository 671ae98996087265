#!/usr/bin/env bash
# Session 11, call 11 (issue #27): where a ragged verify step (each request its own number of drafts, --spec-varlen)
# spends more than a uniform one of about the same rows — DEEPINFER_PROFILE=1 phase breakdowns (each phase synchronised,
# so the totals exceed the unprofiled step) on the V4.1-Flash decode rank of 4P+64D at 60 requests: uniform 4 drafts
# (300 rows) and variable up to 5 (spread 4: ~275 rows).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
m=configs/models/deepseek-v4.1-flash.json
common="--model $m --load-format dummy --device cuda --no-engram --routing uniform --rank-slice configs/deploy/4p64d.toml --slice-rank 4 --batch 60 --context 4096"
DEEPINFER_PROFILE=1 timeout 200 $di bench decode $common --nextn 4 --draft-acceptance 0.865 --draft-spread 4 --warmup 2 --steps 4 > $w/profile-uniform4.log 2>&1; echo "uniform rc=$?"
DEEPINFER_PROFILE=1 timeout 200 $di bench decode $common --nextn 5 --spec-varlen --draft-acceptance 0.865 --draft-spread 4 --warmup 2 --steps 4 > $w/profile-varlen.log 2>&1; echo "varlen rc=$?"
for f in uniform4 varlen; do echo "== $f"; grep "profile V4.1" $w/profile-$f.log | tail -n 3 | cut -c30-700; done
tar -C $w -cJf $OUT/s11g.tar.xz .

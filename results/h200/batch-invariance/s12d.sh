#!/usr/bin/env bash
# Session 12, call 5 (issue #28): --batch-invariant's Linear layers — the probe again (the model's dispatch under the
# flag at every shape), and its cost: V4.1-Flash width, 4 layers, FP8 + FP4, decode at batch 1 / 64 / 256 x 4096 and
# prefill 16 x 1024, the flag off and on in one call.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
timeout 200 /tmp/b/build-gpu/benchmarks/batch_invariance_probe > $w/probe.jsonl 2> $w/probe.err
echo "probe rc=$?"; tail -2 $w/probe.err
python3 - <<'PY'
import json, collections
by = collections.OrderedDict()
for l in open('/tmp/w/probe.jsonl'):
    r = json.loads(l); by.setdefault(r['op'], []).append(r)
for op, rs in by.items():
    print(f"{op}: {len({r['hash'] for r in rs})} distinct result(s) over {len(rs)} runs")
PY
common="--model configs/models/deepseek-v4.1-flash.json --load-format dummy --device cuda --num-layers 4 --no-engram"
for mode in off on; do
  flag=""; [ $mode = on ] && flag="--batch-invariant"
  timeout 200 $di bench decode $common $flag --batch 1,64,256 --context 4096 --warmup 3 --steps 9 \
    --output $w/decode-$mode.jsonl > $w/decode-$mode.log 2>&1
  echo "decode $mode rc=$?"; grep -hE "ms/step" $w/decode-$mode.log | cut -c30-200
  timeout 200 $di bench prefill $common $flag --chunk 16384 --prompt-len 1024 --warmup 2 --steps 5 \
    --output $w/prefill-$mode.jsonl > $w/prefill-$mode.log 2>&1
  echo "prefill $mode rc=$?"; grep -hE "ms/step|tok/s" $w/prefill-$mode.log | cut -c30-200 | head -3
done
tar -C $w -cJf $OUT/s12d.tar.xz .

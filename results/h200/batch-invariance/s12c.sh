#!/usr/bin/env bash
# Session 12, calls 3 and 4 (issue #28's first map): benchmarks/batch_invariance_probe on the H200 — which row-wise ops give
# a row other bits inside a batch of M rows than alone (Linear dispatch bf16/FP8 at V4.1-Flash's shapes and the LM
# head, the sparse window attention, argmax and the top-p sampler).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
timeout 500 /tmp/b/build-gpu/benchmarks/batch_invariance_probe > /tmp/w/probe.jsonl 2> /tmp/w/probe.err
echo "probe rc=$?"; tail -3 /tmp/w/probe.err
python3 - <<'PY'
import json, collections
rows = [json.loads(l) for l in open('/tmp/w/probe.jsonl')]
by = collections.OrderedDict()
for r in rows:
    by.setdefault(r['op'], []).append(r)
for op, rs in by.items():
    classes = collections.OrderedDict()
    for r in rs:
        classes.setdefault(r['hash'], []).append(f"{r['batch']}" + ("" if r['probe_row'] == 0 else f"@{r['probe_row']}"))
    text = ' | '.join(' '.join(v) for v in classes.values())
    print(f"{op}: {len(classes)} distinct result(s): {text}")
PY
tar -C /tmp/w -cJf $OUT/s12c.tar.xz .

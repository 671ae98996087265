#!/usr/bin/env bash
# Session 19, call 6. s19e's DSpark loop again, drafter_bench now giving its model-level steps the tokens before
# each row (engram layers hash them): V4.1-Flash at 7 layers (engram layer 1 among them, tables of s19e's 25M rows),
# the engine's speculative loop in order vs chained at 1 / 64 / 256 sequences, twice.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s19f.tar.xz . ; }
python3 - > $w/flash-small-engram.json <<'PY'
import json
root = json.load(open("configs/models/deepseek-v4.1-flash.json"))
root["text_config"]["engram_vocab_size"] = 1000000
root["text_config"]["engram_num_embeddings"] = [25000000, 25000000]  # (24 primes just above 1M a layer)
print(json.dumps(root, indent=1))
PY
cfg=$w/flash-small-engram.json
timeout 280 $b/benchmarks/drafter_bench dspark $cfg --layers 7 --context 4096 \
  --batches 1,64,256 > $w/dspark-engram-run1.jsonl 2>&1
echo "drafter_bench dspark --layers 7 run1 rc=$?"; grep '^{' $w/dspark-engram-run1.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3))'
grep -v '^{' $w/dspark-engram-run1.jsonl | grep -iE "rror|what|engram|overlapped" | sort | uniq -c | tail -6
pack
timeout 280 $b/benchmarks/drafter_bench dspark $cfg --layers 7 --context 4096 \
  --batches 1,64,256 > $w/dspark-engram-run2.jsonl 2>&1
echo "drafter_bench dspark --layers 7 run2 rc=$?"; grep '^{' $w/dspark-engram-run2.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3))'
grep -v '^{' $w/dspark-engram-run2.jsonl | grep -iE "rror|what|engram|overlapped" | sort | uniq -c | tail -6
pack

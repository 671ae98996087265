#!/usr/bin/env bash
# Session 19, call 3. s19b's benchmark again without its module-over-two-rows timing (a two-row step that is not a
# verify step runs the expanded attention, out of memory at 256 sequences): V3 with MTP (4 layers) in order and
# chained at 1, 64, 256 sequences, twice.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s19c.tar.xz . ; }
bench() {  # drafter config batches tag
  timeout 280 $b/benchmarks/drafter_bench $1 $2 --layers 4 --context 4096 --batches $3 > $w/$1-$4.jsonl 2>&1
  echo "$1 $4 rc=$?"; grep '^{' $w/$1-$4.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3))'
  grep -v '^{' $w/$1-$4.jsonl | grep -iE "rror|what" | tail -5
  pack
}
bench mtp configs/models/deepseek-v3.json 1,64,256 run1
bench mtp configs/models/deepseek-v3.json 1,64,256 run2

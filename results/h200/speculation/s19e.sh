#!/usr/bin/env bash
# Session 19, call 5. s19d's measurements again with engram tables that fit beside the model (s19d ran out of memory:
# V4.1-Flash's one kept engram layer alone is 384M rows of 256): engram_vocab_size 1,000,000 (25M rows a layer, 6 GB;
# the per-step work — hash, row gathers, projection — does not depend on the tables' size, and either size is far
# beyond the L2). V4.1-Flash at 7 layers (its engram layer 1 among them): generate in order vs overlapped at 1 / 64 /
# 256 running, and drafter_bench dspark's engine loop in order vs chained at 1 / 64 / 256 sequences.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; b=/tmp/b/build-gpu; di=$b/deepinfer; t=$b/tests/gpu_tests
pack() { tar -C $w -cJf $OUT/s19e.tar.xz . ; }
python3 - > $w/flash-small-engram.json <<'PY'
import json
root = json.load(open("configs/models/deepseek-v4.1-flash.json"))
root["text_config"]["engram_vocab_size"] = 1000000
root["text_config"]["engram_num_embeddings"] = [25000000, 25000000]  # (24 primes just above 1M a layer)
print(json.dumps(root, indent=1))
PY
cfg=$w/flash-small-engram.json
python3 - > $w/in.jsonl <<'PY'
import json, random
rng = random.Random(5)
for i in range(256):
    print(json.dumps({"id": f"r{i}", "prompt_token_ids": [rng.randrange(3, 120000) for _ in range(128)], "max_new_tokens": 32, "ignore_eos": True}))
PY
for r in 1 64 256; do
  head -n $r $w/in.jsonl > $w/in-$r.jsonl
  for mode in --no-overlap-schedule --overlap-schedule; do
    timeout 150 $di generate --model $cfg --load-format dummy --device cuda \
      --num-layers 7 --max-running $r --input $w/in-$r.jsonl --output $w/out-$r$mode.jsonl $mode > $w/gen-$r$mode.log 2>&1
    echo "generate running $r $mode rc=$? $(grep -oE 'decode steps [0-9.]+ tok/s.*|device idle[^;]*' $w/gen-$r$mode.log | tail -1)"
  done
  cmp -s $w/out-$r--no-overlap-schedule.jsonl $w/out-$r--overlap-schedule.jsonl && echo "running $r: outputs equal" || echo "running $r: outputs differ"
  pack
done
grep -hE "engram|overlapped scheduling" $w/gen-1--overlap-schedule.log | head -4
timeout 280 $b/benchmarks/drafter_bench dspark $cfg --layers 7 --context 4096 \
  --batches 1,64,256 > $w/dspark-engram.jsonl 2>&1
echo "drafter_bench dspark --layers 7 rc=$?"; grep '^{' $w/dspark-engram.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d["sequences"], "draft", round(d["draft_ms"],3), "in order", round(d["engine_step_ms"],3), "idle", round(d["engine_device_idle_ms"],3), "chained", round(d["chained_step_ms"],3), "idle", round(d["chained_device_idle_ms"],3))'
grep -v '^{' $w/dspark-engram.jsonl | grep -iE "rror|what|engram|overlapped" | sort | uniq -c | tail -6
rm -f $w/in*.jsonl $w/out-*.jsonl
pack

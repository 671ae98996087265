#!/usr/bin/env bash
# check_compact_replay.sh DEEPINFER SCRATCH — bounded replay at the release's layer pattern (40 layers, tiny width,
# dummy weights: configs/models/tiny-v41-release-layers.json): a 1,000-token prompt with KEEP 140 gives the same
# output under mask and compact, and compact reports the 860 rows below the floor dropped from layer 21 on in the
# 19 layers that follow (860 x 19 = 16,340 pairs), the saving the release's shape gets.
set -eu
di=$1; dir=$2/compact-replay; mkdir -p "$dir"
model=$(dirname "$0")/../../configs/models/tiny-v41-release-layers.json
python3 -c "
import json, random
r = random.Random(5)
print(json.dumps({'id': 'p', 'prompt_token_ids': [r.randrange(2, 256) for _ in range(1000)], 'max_new_tokens': 3}))" > "$dir/in.jsonl"
run() { timeout 300 "$di" generate --ordered-output --model "$model" --load-format dummy --input "$dir/in.jsonl" --output "$dir/$1.jsonl" \
          --kv-cache-tokens 2048 --yoco-truncation "$1" --yoco-keep-tokens 140 2>&1; }
run mask > "$dir/mask.log"
run compact > "$dir/compact.log"
cmp "$dir/mask.jsonl" "$dir/compact.jsonl" || { echo "FAIL: compact's output differs from mask's"; exit 1; }
grep -E "bounded replay: 860 prompt rows below the decoder layers' floor, 16340 \(row, layer\) pairs not computed" \
  "$dir/compact.log" || { echo "FAIL: compact's counters"; cat "$dir/compact.log"; exit 1; }
echo "ok: compact == mask at the release's layer pattern"

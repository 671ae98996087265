#!/usr/bin/env bash
# Session 17, call 4. What waiting for the DSpark draft after the next schedule (overlapped, the default) hides where
# the host has work between steps: `generate` with the tiny DSpark fixture (tests/fixtures/tiny-v41-dspark, steps of
# well under a millisecond of device work each) at one rank and 2p2d (4 ranks on the one GPU: the decode ranks' loop
# agrees with its group and polls the mailboxes between steps), --nextn 4 --draft dspark, overlapped vs
# --no-overlap-schedule, alternating, two rounds. The run summary's decode tok/s and device idle a step.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
pack() { tar -C $w --exclude='out-*.jsonl' -cJf $OUT/s17d.tar.xz . ; }
python3 - <<'PY' > $w/requests.jsonl
import json, random
rng = random.Random(17)
for i in range(16):
    print(json.dumps({"id": f"q{i}", "prompt_token_ids": [rng.randrange(3, 200) for _ in range(48)],
                      "max_new_tokens": 192, "ignore_eos": True}))
PY
base="generate --model tests/fixtures/tiny-v41-dspark --input $w/requests.jsonl --device cuda --nextn 4 --draft dspark"
for round in 1 2; do
  for mode in overlap order; do
    flag=""; [ $mode = order ] && flag="--no-overlap-schedule"
    timeout 60 $di $base $flag --output $w/out-1rank-$mode-$round.jsonl > $w/1rank-$mode-$round.log 2>&1
    echo "1 rank $mode round $round rc=$?"; grep -hE "device idle|speculative decoding:" $w/1rank-$mode-$round.log | cut -c1-260
    timeout 90 mpirun --oversubscribe -np 4 $di $base --deploy configs/deploy/2p2d.toml $flag --output $w/out-2p2d-$mode-$round.jsonl > $w/2p2d-$mode-$round.log 2>&1
    echo "2p2d $mode round $round rc=$?"; grep -hE "device idle|speculative decoding:" $w/2p2d-$mode-$round.log | cut -c1-260
  done
  pack
done
python3 - $w <<'PY'
import json, sys
w = sys.argv[1]
def tokens(name):
    return {json.loads(l)["id"]: json.loads(l)["output_token_ids"] for l in open(f"{w}/out-{name}.jsonl")}
for a, b in [("1rank-overlap-1", "1rank-order-1"), ("1rank-overlap-1", "1rank-overlap-2"),
             ("2p2d-overlap-1", "2p2d-order-1"), ("2p2d-overlap-1", "2p2d-order-2")]:
    print(a, "vs", b, "same outputs" if tokens(a) == tokens(b) else "DIFFERENT outputs")
PY
pack

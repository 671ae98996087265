#!/usr/bin/env bash
# The rank slice's device form (moe/device_rank_slice.h) against its host form on the CPU: at the first step both
# draw the same pairs, so a one-step point must serve the same pairs per expert and count the same exchange.
# Usage: tests/gpu/check_slice_device.sh DEEPINFER OUTDIR
set -u
di=$1; out=$2; status=0
for spec in "decode 2 --batch 8 --context 48" "prefill 0 --chunk 64 --prompt-len 32"; do
  set -- $spec; phase=$1; rank=$2; shift 2
  for dev in cpu cuda; do
    $di bench $phase --model tests/fixtures/tiny-v41-fp8 --device $dev --rank-slice configs/deploy/2p2d.toml \
      --slice-rank $rank --routing zipf:1.2 --warmup 0 --steps 1 "$@" --output $out/slice-$phase-$dev.jsonl \
      > $out/slice-$phase-$dev.log 2>&1 || { echo "slice $phase on $dev failed"; status=1; }
  done
  python3 - "$out/slice-$phase-cpu.jsonl" "$out/slice-$phase-cuda.jsonl" "$phase" <<'PY' || status=1
import json, sys
a, b = (json.loads(open(p).readlines()[-1])["rank_slice"] for p in sys.argv[1:3])
keys = ["served_pairs", "tokens_received", "tokens_sent", "dispatch_bytes", "combine_bytes", "slots_touched", "pairs"]
same = all(a[k] == b[k] for k in keys)
print(f"slice {sys.argv[3]}: device form vs host form, {sum(a['served_pairs'])} pairs served: "
      f"{'identical' if same else 'DIFFERENT'} ({b['received_rows']})")
sys.exit(0 if same else 1)
PY
done
exit $status

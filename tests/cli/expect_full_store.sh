#!/usr/bin/env bash
# expect_full_store.sh DEEPINFER MODEL INPUT — generate with --kv-store on a full 64 KB tmpfs must succeed with the
# outputs it gives without the store, and say once that the store cannot be written (needs root and mount: exits
# 77, skipped, where that is refused).
set -u
di=$1; model=$2; input=$3
dir=$(mktemp -d); out=$(mktemp -d)
cleanup() { umount "$dir" 2>/dev/null; rm -rf "$dir" "$out"; }
trap cleanup EXIT
if [ "$(id -u)" -ne 0 ] || ! mount -t tmpfs -o size=64k tmpfs "$dir" 2>/dev/null; then
  echo "skip: cannot mount a tmpfs here (needs root)"; exit 77
fi
dd if=/dev/zero of="$dir/filler" bs=4096 2>/dev/null  # until the disk is full
"$di" generate --ordered-output --model "$model" --input "$input" --output "$out/plain.jsonl" > /dev/null 2>&1 || { echo "FAIL: plain run"; exit 1; }
log=$(timeout 120 "$di" generate --ordered-output --model "$model" --input "$input" --kv-store "$dir" --output "$out/store.jsonl" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then echo "FAIL: exit $rc with a full store"; echo "$log"; exit 1; fi
count=$(grep -c -- "cannot write to" <<< "$log")
if [ "$count" -ne 1 ]; then echo "FAIL: expected one 'cannot write to' warning, saw $count"; echo "$log"; exit 1; fi
cmp -s "$out/plain.jsonl" "$out/store.jsonl" || { echo "FAIL: outputs differ with a full store"; exit 1; }
left=$(cd "$dir" && ls -A | grep -v '^filler$')
if [ -n "$left" ]; then echo "FAIL: left behind in the full store: $left"; exit 1; fi
echo "ok: $(grep -- "cannot write to" <<< "$log" | head -1 | cut -c1-160)"

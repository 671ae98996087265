#!/usr/bin/env bash
# expect_full_disk.sh MODE OUTPUT_NAME COMMAND...  — the command, writing its output to DIR/OUTPUT_NAME where
# DIR has no room (@OUT@ in COMMAND is replaced by that path), must fail within 120 s with one message naming
# the failed write, and leave neither the output nor a temporary behind in DIR.
#   MODE tmpfs: DIR is a full 64 KB tmpfs (needs root and mount; exits 77, skipped, where that is refused).
#   MODE tmpfs-8k: the same with 8 KB left, so that the output can be created and fails part-way.
#   MODE fsize: DIR is an ordinary directory and the command runs under `ulimit -f 1` (writes past 1 KB fail
#               with EFBIG, SIGXFSZ ignored): any machine.
set -u
mode=$1; name=$2; shift 2
dir=$(mktemp -d)
cleanup() { [[ $mode = tmpfs* ]] && umount "$dir" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
if [[ $mode = tmpfs* ]]; then
  if [ "$(id -u)" -ne 0 ] || ! mount -t tmpfs -o size=64k tmpfs "$dir" 2>/dev/null; then
    echo "skip: cannot mount a tmpfs here (needs root)"; exit 77
  fi
  if [ "$mode" = tmpfs-8k ]; then dd if=/dev/zero of="$dir/filler" bs=4096 count=14 2>/dev/null
  else dd if=/dev/zero of="$dir/filler" bs=4096 2>/dev/null; fi  # until the disk is full
  reason="No space left on device"
else
  reason="File too large"
fi
args=()
for a in "$@"; do args+=("${a//@OUT@/$dir/$name}"); done
if [[ $mode = tmpfs* ]]; then
  out=$(timeout 120 "${args[@]}" 2>&1); rc=$?
else
  out=$(trap '' XFSZ; ulimit -f 1; timeout 120 "${args[@]}" 2>&1); rc=$?
fi
if [ $rc -eq 124 ]; then echo "FAIL: timed out: ${args[*]}"; echo "$out"; exit 1; fi
if [ $rc -eq 0 ]; then echo "FAIL: exit 0 on a full disk: ${args[*]}"; echo "$out"; exit 1; fi
count=$(grep -c -- "$reason" <<< "$out")
if [ "$count" -ne 1 ]; then echo "FAIL: expected '$reason' once, saw it $count times (exit $rc)"; echo "$out"; exit 1; fi
left=$(cd "$dir" && ls -A | grep -v '^filler$')
if [ -n "$left" ]; then echo "FAIL: left behind in the full directory: $left"; echo "$out"; exit 1; fi
echo "ok: exit $rc, $(grep -- "$reason" <<< "$out" | head -1)"

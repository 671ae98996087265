#!/usr/bin/env bash
# expect_output.sh PATTERN COUNT COMMAND...  — the command must succeed within 300 s and print COUNT lines
# matching PATTERN (an extended regex).
set -u
pattern=$1; want=$2; shift 2
out=$(timeout 300 "$@" 2>&1); rc=$?
if [ $rc -ne 0 ]; then echo "FAIL: exit $rc: $*"; echo "$out"; exit 1; fi
count=$(grep -cE -- "$pattern" <<< "$out")
if [ "$count" -ne "$want" ]; then echo "FAIL: /$pattern/ matched $count lines, expected $want"; echo "$out"; exit 1; fi
echo "$out" | head -5
echo "ok: $count lines match /$pattern/"

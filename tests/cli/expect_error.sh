#!/usr/bin/env bash
# expect_error.sh [--absent PATH] PATTERN COMMAND...  — the command must fail (non-zero exit) within 120 s,
# its output must contain PATTERN (an extended regex) exactly once (one clear message, not one per rank), and
# PATH, if given, must not exist afterwards (nothing half-written is presented as whole).
set -u
absent=""
if [ "$1" = "--absent" ]; then absent=$2; shift 2; rm -f "$absent"; fi
pattern=$1; shift
out=$(timeout 120 "$@" 2>&1); rc=$?
if [ $rc -eq 124 ]; then echo "FAIL: timed out (hang?): $*"; echo "$out"; exit 1; fi
if [ $rc -eq 0 ]; then echo "FAIL: exit code 0, expected non-zero: $*"; echo "$out"; exit 1; fi
count=$(grep -cE -- "$pattern" <<< "$out")
if [ "$count" -ne 1 ]; then
  echo "FAIL: expected the message /$pattern/ exactly once, saw it $count times (exit $rc)"; echo "$out"; exit 1
fi
if [ -n "$absent" ] && [ -e "$absent" ]; then echo "FAIL: $absent exists after a failed run"; exit 1; fi
echo "ok: exit $rc, message: $(grep -E -- "$pattern" <<< "$out")"

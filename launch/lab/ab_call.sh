#!/usr/bin/env bash
# An A/B of two deepinfer binaries in one device call: ROUNDS rounds (default 3), each running the same
# device_call.sh steps (decode, prefill, profile, ...) with A's binary and then B's, so that both sides see the same
# machine, clocks and drift. Each side's logs and JSON lines land in $OUT/<a|b>-<round>/, the folder packed after
# every side to $TAR (default $OUT/ab.tar.xz); launch/lab/ab_table.py reads them into one table.
#
#   A=/tmp/a/deepinfer B=/tmp/b/build/deepinfer [ROUNDS=3] launch/lab/ab_call.sh STEP [-- STEP ...]
#
# The pack ($PACK) gives the libraries and B's binary by default; A is any other build of deepinfer that runs with them.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The sides before the pack's env.sh is sourced: it sets B (the pack's folder) for itself.
a=${A:?A=path of the A side\'s deepinfer}
b=${B:-}
source "$here/pack_env.sh" /tmp/ab-call  # $pack, $out, $di
b=${b:-$di}
rounds=${ROUNDS:-3}
tarball=${TAR:-$out/ab.tar.xz}
status=0
for round in $(seq 1 "$rounds"); do
  for side in a b; do
    bin=$a
    [ "$side" = b ] && bin=$b
    echo "== round $round, side $side: $bin"
    DI=$bin OUT=$out/$side-$round TAR=/dev/null "$here/device_call.sh" "$@" || status=1
    tar -C "$out" --exclude="$(basename "$tarball")" -cJf "$tarball" . 2>/dev/null
  done
done
exit $status

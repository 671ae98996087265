#!/usr/bin/env bash
# check_result_guards.sh PYTHON — the Slurm templates' guards (slurm/common.sh) judge a run by its files, for
# launchers that return 0 after failed ranks: require_result fails on a missing result, require_complete_sweep on
# a sweep file whose root attribute complete is not 1 (or that is missing), and both pass on good files.
set -u
py=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
export PYTHON=$py
source "$root/slurm/common.sh"
"$py" -c 'import h5py, sys
for name, complete in (("done.h5", 1), ("cut.h5", 0)):
    with h5py.File(sys.argv[1] + "/" + name, "w") as f: f.attrs["complete"] = complete' "$dir" || exit 1
echo '{}' > "$dir/out.jsonl"
check() {  # check EXPECTED_STATUS COMMAND...: run in a subshell (the guards exit)
  want=$1; shift
  ( "$@" ) > /dev/null 2>&1; got=$?
  if [ $((got != 0)) -ne "$want" ]; then echo "FAIL: '$*' exited $got"; exit 1; fi
}
check 0 require_result "$dir/out.jsonl"
check 1 require_result "$dir/missing.jsonl"
check 0 require_complete_sweep "$dir/done.h5"
check 1 require_complete_sweep "$dir/cut.h5"
check 1 require_complete_sweep "$dir/missing.h5"
echo "ok: the result guards pass whole results and fail missing or incomplete ones"

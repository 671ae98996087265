#!/usr/bin/env bash
# generate as a long batch job on this machine's CPU: N small requests (tiny model, dummy weights, 4-token prompts,
# 2 new tokens), on 1 rank and on 2p2d. Per run: wall time, requests/s, each rank's peak RSS; then a kill -9 of a
# 1-rank run at a random moment, what the output held against the results rank 0 had counted (its last progress
# line), and the --resume that finishes it.
#   launch/lab/durable_generate_bench.sh OUTDIR [N...]      (default N: 10000 1000000)
# Environment: DEPLOYS (default "1rank 2p2d"; "none": no scale runs), KILL_TEST (default 1: the kill at a random
# moment of the work, at the largest N).
# Writes OUTDIR/durable-bench.jsonl (one line a run) and the logs beside it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/launch/mpi_env.sh"
out=$(mkdir -p "$1" && cd "$1" && pwd); shift
sizes=("${@:-10000 1000000}")
di=${DEEPINFER_BIN:-$root/build/deepinfer}
model=$root/configs/models/tiny.json
commit=${COMMIT:-$(git -C "$root" rev-parse --short HEAD)}  # COMMIT: the binary's, when it is a copy
record() { echo "$1" >> "$out/durable-bench.jsonl"; echo "$1"; }
for n in ${sizes[@]}; do
  inp=$out/in-$n.jsonl
  [ -f "$inp" ] || python3 - "$inp" "$n" <<'PY'
import json, random, sys
rng = random.Random(0)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": i, "prompt_token_ids": [rng.randrange(3, 500) for _ in range(4)], "max_new_tokens": 2}) + "\n")
PY
  for deploy in ${DEPLOYS:-1rank 2p2d}; do
    [ "$deploy" = none ] && continue
    rm -f "$out"/rss.* "$out/out-$n-$deploy.jsonl"
    if [ $deploy = 1rank ]; then launch=(); dep=(); else launch=(mpirun -np 4); dep=(--deploy "$root/configs/deploy/2p2d.toml"); fi
    start=$(date +%s.%N)
    "${launch[@]}" sh -c '/usr/bin/time -f %M -o "$0/rss.${OMPI_COMM_WORLD_RANK:-0}" "$@"' "$out" \
      "$di" generate --model "$model" --load-format dummy --input "$inp" --output "$out/out-$n-$deploy.jsonl" \
      "${dep[@]}" --progress-interval 10 > "$out/log-$n-$deploy.txt" 2>&1
    end=$(date +%s.%N)
    lines=$(wc -l < "$out/out-$n-$deploy.jsonl")
    rss=$(for f in "$out"/rss.*; do printf '%s:%s ' "${f##*.}" "$(cat "$f")"; done)
    record "$(python3 -c "import json,sys; s,e,n,l=map(float,sys.argv[1:5]); print(json.dumps({'commit': sys.argv[7], 'requests': int(n), 'deploy': sys.argv[5], 'results': int(l), 'wall_s': round(e-s, 2), 'requests_per_s': round(n/(e-s), 1), 'peak_rss_kb_by_rank': {k: int(v) for k, v in (x.split(':') for x in sys.argv[6].split())}}))" "$start" "$end" "$n" "$lines" "$deploy" "$rss" "$commit")"
    rm -f "$out/out-$n-$deploy.jsonl"
  done
done
# A kill -9 at a random moment of a 1-rank run of the largest size, then --resume.
[ "${KILL_TEST:-1}" = 1 ] || exit 0
n=${sizes[-1]}; n=${n##* }; kout=$out/kill-$n.jsonl; rm -f "$kout"
setsid "$di" generate --model "$model" --load-format dummy --input "$out/in-$n.jsonl" --output "$kout" \
  --progress-interval 0.05 --sync-interval 1 > "$out/kill-log.txt" 2>&1 &
pid=$!
# A random moment of the work: once the first results are on disk (the input's scan comes first), 1-6 s more.
for _ in $(seq 600); do [ -s "$kout" ] && break; sleep 0.1; done
sleep "$(python3 -c 'import random; print(round(random.uniform(1, 6), 2))')"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
held=$(python3 -c "import sys; d=open(sys.argv[1],'rb').read(); print(d.count(b'\n'))" "$kout")
counted=$(grep -o "progress: [0-9]*" "$out/kill-log.txt" | tail -1 | grep -o "[0-9]*$")
start=$(date +%s.%N)
"$di" generate --model "$model" --load-format dummy --input "$out/in-$n.jsonl" --output "$kout" --resume \
  --progress-interval 30 > "$out/resume-log.txt" 2>&1
end=$(date +%s.%N)
final=$(wc -l < "$kout"); unique=$(python3 -c "import json,sys; print(len({json.loads(l)['id'] for l in open(sys.argv[1])}))" "$kout")
record "{\"commit\": \"$commit\", \"kill_at_random\": true, \"requests\": $n, \"lines_held_at_kill\": $held, \"results_counted_by_rank0_at_last_progress_line\": ${counted:-0}, \"resume_wall_s\": $(python3 -c "print(round($end-$start,2))"), \"final_lines\": $final, \"unique_ids\": $unique}"
rm -f "$kout"

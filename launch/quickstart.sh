#!/usr/bin/env bash
# From a clone to a running multi-rank job: install, build, then offline generation on the CPU with the
# embedded tiny model (a DeepSeek-V3-shaped checkpoint written by transformers, tests/fixtures/tiny-v3-bf16)
# on 2 prefill + 2 decode ranks. Override with MODEL=, DEPLOY=, INPUT=, OUTPUT=.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/launch/setup.sh"
"$root/launch/build.sh" -DDEEPINFER_WERROR=ON  # the same configuration as launch/test.sh: one build for both
source "$root/launch/mpi_env.sh"
model=${MODEL:-$root/tests/fixtures/tiny-v3-bf16}
deploy=${DEPLOY:-$root/configs/deploy/2p2d.toml}
input=${INPUT:-$root/launch/examples/prompts.jsonl}
output=${OUTPUT:-$root/build/quickstart-out.jsonl}
ranks=$(python3 -c "import tomllib,sys; d=tomllib.load(open(sys.argv[1],'rb')); print(sum(v['ranks'] for v in d.values() if isinstance(v, dict)))" "$deploy")

echo "== ranks of $deploy"
mpirun -np "$ranks" "$root/build/deepinfer" info --deploy "$deploy"
echo "== offline generation: $ranks ranks, $(wc -l < "$input") requests"
mpirun -np "$ranks" "$root/build/deepinfer" generate --model "$model" --deploy "$deploy" --input "$input" --output "$output"
echo "== first outputs ($output)"
head -n 3 "$output"
# What a user's job gives: OpenAI batch lines of text in, text out through a tokenizer (the fixtures' byte-level
# one). The model's weights are random, so the text is random too; a real checkpoint gives real text.
batch=$root/launch/examples/batch.jsonl
echo "== an OpenAI batch file of text completions through the tokenizer (random weights: random text)"
mpirun -np "$ranks" "$root/build/deepinfer" generate --model "$model" --deploy "$deploy" \
    --tokenizer "$root/tests/fixtures/tokenizer-bytes/tokenizer.json" --input "$batch" --output "$output.batch"
python3 -c "import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r['custom_id'], repr(r['response']['body']['choices'][0]['text']))" "$output.batch"

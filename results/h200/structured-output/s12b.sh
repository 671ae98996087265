#!/usr/bin/env bash
# Session 12, call 2: the masking cost again with the host masks spread over the host's threads (Engine::token_masks),
# the constrained-generation check on V4.1 with --device cuda after that change; then issue #27's pending GPU test,
# results/h200/v41/speculation/s11h.sh (--spec-row-quantum 32 against plain variable and fixed 5).
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
xz -dc tests/fixtures/tokenizer/tokenizer.json.xz > /tmp/tokenizer.json
timeout 200 /tmp/b/build-gpu/benchmarks/structured_output_bench /tmp/tokenizer.json --batches 1,64,256 --repeats 50 \
  > $w/bench.jsonl 2> $w/bench.err
echo "bench rc=$?"; cut -c1-200 $w/bench.jsonl
timeout 200 python3 tests/cli/check_structured_output.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
  --model tests/fixtures/tiny-v41 --tokenizer tests/fixtures/tokenizer-bytes/tokenizer.json \
  --deploy configs/deploy/2p2d.toml --ranks 4 --args "--device cuda" > $w/check-tiny-v41.log 2>&1
echo "check rc=$?"; grep -E "^ok|Error|assert" $w/check-tiny-v41.log | head -8
tar -C $w -cJf $OUT/s12b.tar.xz .
bash results/h200/v41/speculation/s11h.sh

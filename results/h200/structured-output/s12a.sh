#!/usr/bin/env bash
# Session 12, call 1 (issue #30): structured output on the H200 — the mask kernel against its CPU form, the
# constrained-generation check with --device cuda (V3 and V4.1 fixtures, 1 rank and 2p2d sharing the GPU, with
# speculation), and the masking cost at batch 1 / 64 / 256 with DeepSeek's 129,280-token vocabulary.
set -u
rm -rf /tmp/b /tmp/w; mkdir -p /tmp/b /tmp/w && tar -C /tmp/b -xJf .device/pack.tar.xz
source /tmp/b/env.sh
w=/tmp/w; di=/tmp/b/build-gpu/deepinfer
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $w/gpu.txt
timeout 120 /tmp/b/build-gpu/tests/gpu_tests --gtest_filter='*apply_token_bitmask*:*sample_rows*:*argmax_rows*' > $w/ops.log 2>&1
echo "ops rc=$?"; grep -E "OK|FAILED|PASSED" $w/ops.log | tail -5
python3 -c "import jsonschema" 2>/dev/null && echo "jsonschema present" || echo "jsonschema absent: the subset validator"
for m in tiny-v3-bf16 tiny-v41; do
  timeout 300 python3 tests/cli/check_structured_output.py --deepinfer $di --mpirun "mpirun --oversubscribe" \
    --model tests/fixtures/$m --tokenizer tests/fixtures/tokenizer-bytes/tokenizer.json \
    --deploy configs/deploy/2p2d.toml --ranks 4 --args "--device cuda" > $w/check-$m.log 2>&1
  echo "$m rc=$?"; grep -E "^ok|Error|assert" $w/check-$m.log | head -8
done
xz -dc tests/fixtures/tokenizer/tokenizer.json.xz > $w/tokenizer.json
timeout 300 /tmp/b/build-gpu/benchmarks/structured_output_bench $w/tokenizer.json --batches 1,64,256 --repeats 50 \
  > $w/bench.jsonl 2> $w/bench.err
echo "bench rc=$?"; cat $w/bench.jsonl; tail -3 $w/bench.err
rm -f $w/tokenizer.json
tar -C $w -cJf $OUT/s12a.tar.xz .

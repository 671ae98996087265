#!/usr/bin/env python3
"""check_greedy_tool.py DEEPINFER FIXTURE_DIR

tests/gpu/check_greedy_against_cpu.py (the multi-GPU run's check of generated tokens) can pass and can fail: the
CPU's own greedy output of the first prompts of launch/examples/prompts.jsonl scores 100% argmax with no gap and
passes, with itself as baseline too; the same output with one token replaced fails.
"""
import json
import os
import subprocess
import sys
import tempfile
from results_order import results_in_input_order

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tests", "gpu", "check_greedy_against_cpu.py")


def check(deepinfer, model, prompts, output, *extra):
    run = subprocess.run([sys.executable, TOOL, deepinfer, model, prompts, output, "test", *extra],
                         capture_output=True, text=True, timeout=600)
    print(run.stdout.strip() or run.stderr.strip())
    return run.returncode


def main():
    deepinfer, model = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        prompts, out, bad = (os.path.join(tmp, name) for name in ("in.jsonl", "out.jsonl", "bad.jsonl"))
        with open(os.path.join(ROOT, "launch", "examples", "prompts.jsonl")) as f:
            lines = f.readlines()[:6]
        open(prompts, "w").writelines(lines)
        cmd = [deepinfer, "generate", "--model", model, "--device", "cpu", "--input", prompts, "--ordered-output"]
        subprocess.run(cmd + ["--output", out], check=True, capture_output=True, timeout=300)
        assert check(deepinfer, model, prompts, out) == 0, "the CPU's own tokens must pass"
        assert check(deepinfer, model, prompts, out, "--baseline", out) == 0, "and against themselves as baseline"
        records = [json.loads(line) for line in open(out)]
        records[1]["output_token_ids"][3] = (records[1]["output_token_ids"][3] + 7) % 300
        open(bad, "w").writelines(json.dumps(r) + "\n" for r in records)
        assert check(deepinfer, model, prompts, bad) == 1, "a replaced token must fail"
        assert check(deepinfer, model, prompts, bad, "--baseline", out) == 1, "also against a clean baseline"
    print("check_greedy_tool: ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""check_greedy_against_cpu.py DEEPINFER MODEL PROMPTS.jsonl OUTPUT.jsonl LABEL [--max-gap G]

Whether a greedy `deepinfer generate` output (from any device or deployment) is what the CPU model would have
chosen, token by token. compare_generate.py stops at the first divergence, which says nothing of the rest: once
bf16 rounding swaps two near-equal candidates the continuations differ. Here the CPU model scores each request's
own tokens (prompt + output, teacher-forced through `deepinfer forward --device cpu`), and every generated token
must be the CPU's argmax or within G of it, G in units of that position's logit standard deviation (default
0.25). Prints the share of tokens that are the CPU's argmax and the largest gap; exits 1 if a gap exceeds G or
the outputs do not match the prompts.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("deepinfer")
parser.add_argument("model")
parser.add_argument("prompts")
parser.add_argument("output")
parser.add_argument("label")
parser.add_argument("--max-gap", type=float, default=0.25)
args = parser.parse_args()

prompts = {r["id"]: r["prompt_token_ids"] for r in map(json.loads, open(args.prompts))}
outputs = [json.loads(line) for line in open(args.output)]
if sorted(r["id"] for r in outputs) != sorted(prompts):
    print(f"{args.label}: the outputs describe other requests than {args.prompts}")
    sys.exit(1)

tokens = argmax = 0
worst = (0.0, "")
with tempfile.TemporaryDirectory() as tmp:
    for r in outputs:
        prompt, generated = prompts[r["id"]], r["output_token_ids"]
        if not generated:
            continue
        sequence = prompt + generated[:-1]  # the last token's logits come from the position before it
        path = os.path.join(tmp, "logits.h5")
        subprocess.run([args.deepinfer, "forward", "--model", args.model, "--device", "cpu", "--tokens",
                        ",".join(map(str, sequence)), "--output", path], check=True, capture_output=True)
        with h5py.File(path, "r") as f:
            logits = np.asarray(f["logits"], dtype=np.float64)[len(prompt) - 1:]
        for j, token in enumerate(generated):
            row = logits[j]
            gap = (row.max() - row[token]) / row.std()
            tokens += 1
            argmax += gap == 0.0
            if gap > worst[0]:
                worst = (gap, f"{r['id']} token {j}")

print(f"{args.label}: {argmax}/{tokens} generated tokens are the CPU's argmax ({100.0 * argmax / max(tokens, 1):.1f}%); "
      f"largest gap to it {worst[0]:.3f} logit std{f' ({worst[1]})' if worst[1] else ''}; bound {args.max_gap}")
sys.exit(0 if worst[0] <= args.max_gap else 1)

#!/usr/bin/env python3
"""check_batch_invariance.py --deepinfer BIN --mpirun MPIRUN --model M [--flag --batch-invariant] [--args "..."]

Issue #28 on the GPU: 32 requests (prompts of 3 to 300 tokens, greedy and sampled) generated each alone
(--max-running 1: every prefill chunk and decode step holds one request), all together, all together in prefill
chunks of 96 tokens (a prompt split across chunks, several prompts in one), and under 2p2d (four ranks sharing the
GPU, decode batches formed by the handoffs' arrival). Prints, for each way, how many of the 32 outputs equal their
run alone token for token, and exits 1 unless all do when --expect-identical is given. A row's logits are not
compared (generate does not write them): equal tokens over 24 steps of a random model, greedy and sampled, is the
check.
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile


def run(cmd, out):
    done = subprocess.run(cmd + ["--output", out], timeout=900, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-3000:])
        raise SystemExit(f"exit {done.returncode}: {' '.join(cmd)}")
    return {r["id"]: r["output_token_ids"] for r in map(json.loads, open(out))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--deploy", default="configs/deploy/2p2d.toml")
    ap.add_argument("--args", default="", help="more generate options for every run (e.g. --batch-invariant)")
    ap.add_argument("--expect-identical", action="store_true")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json")))
    text = config.get("text_config", config)
    vocab, longest = text["vocab_size"], text.get("max_position_embeddings", 4096) - 30
    rng = random.Random(28)
    reqs = []
    for i in range(32):
        n = min(longest, rng.choice([3, 17, 64, 120, 300]))
        r = {"id": f"r{i}", "prompt_token_ids": [rng.randrange(3, vocab) for _ in range(n)],
             "max_new_tokens": 24, "ignore_eos": True}
        if i % 3 == 1:
            r.update(temperature=0.9, top_p=0.95, seed=1000 + i)
        reqs.append(r)
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in reqs)
        base = [args.deepinfer, "generate", "--model", args.model, "--input", inp, "--device", "cuda"]
        base += shlex.split(args.args)
        alone = run(base + ["--max-running", "1"], os.path.join(tmp, "alone.jsonl"))
        ways = {
            "together (32 running)": base + ["--max-running", "32"],
            "together, prefill chunks of 96 tokens": base + ["--max-running", "32", "--chunk-tokens", "96"],
            f"{os.path.basename(args.deploy)} (4 ranks on the GPU)":
                shlex.split(args.mpirun) + ["-np", "4"] + base + ["--deploy", args.deploy],
        }
        failed = False
        for name, cmd in ways.items():
            got = run(cmd, os.path.join(tmp, "out.jsonl"))
            same = sum(got[k] == alone[k] for k in alone)
            print(f"{name}: {same} of {len(alone)} outputs equal their run alone")
            failed |= same != len(alone)
        if args.expect_identical and failed:
            raise SystemExit("FAIL: some outputs depend on their batch")


if __name__ == "__main__":
    main()

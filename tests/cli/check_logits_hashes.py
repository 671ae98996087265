#!/usr/bin/env python3
"""check_logits_hashes.py --deepinfer BIN --mpirun MPIRUN --model M

`generate --logits-hashes` on the CPU: every result carries one 16-hex-digit fingerprint per output token; the CPU
path is batch-invariant bit for bit, so 12 requests (prompts of 3 to 120 tokens, a third sampled) give the same
fingerprints run one at a time, all together in prefill chunks of 50 tokens, and with speculative decoding (3
controlled drafts: an accepted draft's row is a verify row of another step's shape); under 2p2d (4 ranks) the
tokens are the same and every token has its fingerprint (the first one comes with the prefill rank's handoff), but
the bits are not: the expert-parallel combine sums per destination rank. With --batch-invariant (entries summed in
k order whatever rank served them) 2p2d and colocated4 give the one-rank bits too.
"""
import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile


def run(cmd, out):
    done = subprocess.run(cmd + ["--output", out, "--logits-hashes"], timeout=240, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-3000:])
        raise SystemExit(f"exit {done.returncode}: {' '.join(cmd)}")
    results = {r["id"]: r for r in map(json.loads, open(out))}
    for rid, r in results.items():
        hashes = r["logits_hashes"]
        assert len(hashes) == len(r["output_token_ids"]) > 0, (rid, len(hashes), len(r["output_token_ids"]))
        assert all(re.fullmatch("[0-9a-f]{16}", h) for h in hashes), hashes
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--deploy", required=True)
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json")))
    vocab = config.get("text_config", config)["vocab_size"]
    rng = random.Random(3)
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w") as f:
            for i in range(12):
                r = {"id": f"r{i}", "prompt_token_ids": [rng.randrange(3, vocab) for _ in range(rng.choice([3, 17, 64, 120]))],
                     "max_new_tokens": 8, "ignore_eos": True}
                if i % 3 == 1:
                    r.update(temperature=0.9, top_p=0.95, seed=7 + i)
                f.write(json.dumps(r) + "\n")
        base = [args.deepinfer, "generate", "--model", args.model, "--input", inp]
        reference = os.path.join(tmp, "alone.jsonl")  # also the controlled drafter's reference outputs
        alone = run(base + ["--max-running", "1"], reference)
        invariant = base + ["--batch-invariant"]
        alone_invariant = run(invariant + ["--max-running", "1"], os.path.join(tmp, "alone-invariant.jsonl"))
        mpirun = shlex.split(args.mpirun) + ["-np", "4"]
        deploy_dir = os.path.dirname(args.deploy)
        ways = {"together in 50-token chunks": (base + ["--chunk-tokens", "50"], True),
                "3 controlled drafts": (base + ["--nextn", "3", "--draft-reference", reference, "--draft-acceptance",
                                                "0.7"], True),
                "2p2d": (mpirun + base + ["--deploy", args.deploy], False),
                "--batch-invariant, 2p2d": (mpirun + invariant + ["--deploy", args.deploy], True),
                "--batch-invariant, colocated4": (mpirun + invariant + ["--deploy",
                                                                         os.path.join(deploy_dir, "colocated4.toml")], True)}
        for name, (cmd, bitwise) in ways.items():
            if "--batch-invariant" in cmd:
                alone = alone_invariant
            got = run(cmd, os.path.join(tmp, "out.jsonl"))
            tokens = sum(got[k]["output_token_ids"] == alone[k]["output_token_ids"] for k in alone)
            bits = sum(got[k]["logits_hashes"] == alone[k]["logits_hashes"] for k in alone)
            print(f"{name}: {tokens} of {len(alone)} outputs equal alone, {bits} bit for bit")
            assert tokens == len(alone), name
            assert not bitwise or bits == len(alone), name


if __name__ == "__main__":
    main()

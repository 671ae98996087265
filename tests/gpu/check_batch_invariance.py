#!/usr/bin/env python3
"""check_batch_invariance.py --deepinfer BIN --mpirun MPIRUN --model M [--args "--batch-invariant"] [--expect-identical]

Issue #28 on the GPU: 32 requests (prompts of 3 to 300 tokens, a third sampled) generated each alone
(--max-running 1: every prefill chunk and decode step holds one request), then: all together, together in prefill
chunks of 37, 96 and 200 tokens (a prompt split across chunks, several prompts in one), shuffled among 224 random companions
(other prompts, lengths and sampling) with at most 2, 64 and 256 running, and under 2p2d and colocated4 (four ranks
sharing the GPU: decode batches formed by the handoffs' arrival, experts spread over an EP group). Every run writes
--logits-hashes (a fingerprint of each output token's fp32 logits row), so each way prints how many of the 32
outputs equal their run alone token for token, and how many bit for bit in every logits row. With
--expect-identical it exits 1 unless all 32 do, both ways, everywhere.
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
    done = subprocess.run(cmd + ["--output", out, "--logits-hashes"], timeout=900, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-3000:])
        raise SystemExit(f"exit {done.returncode}: {' '.join(cmd)}")
    return {r["id"]: (r["output_token_ids"], r["logits_hashes"]) for r in map(json.loads, open(out))}


def request(rid, rng, vocab, longest, sampled):
    n = min(longest, rng.choice([3, 17, 64, 120, 300]))
    r = {"id": rid, "prompt_token_ids": [rng.randrange(3, vocab) for _ in range(n)], "max_new_tokens": 24,
         "ignore_eos": True}
    if sampled:
        r.update(temperature=0.9, top_p=0.95, seed=rng.randrange(1 << 30))
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--deploy-dir", default="configs/deploy", help="where 2p2d.toml and colocated4.toml are")
    ap.add_argument("--args", default="", help="more generate options for every run (e.g. --batch-invariant)")
    ap.add_argument("--expect-identical", action="store_true")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json")))
    text = config.get("text_config", config)
    vocab, longest = text["vocab_size"], text.get("max_position_embeddings", 4096) - 30
    rng = random.Random(28)
    reqs = [request(f"r{i}", rng, vocab, longest, i % 3 == 1) for i in range(32)]
    companions = [request(f"c{i}", rng, vocab, longest, i % 2 == 1) for i in range(224)]
    for c in companions:
        c["max_new_tokens"] = rng.randrange(8, 41)
    with tempfile.TemporaryDirectory() as tmp:
        def inputs(name, rows):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            return path
        mixed = reqs + companions
        rng.shuffle(mixed)  # the 32 at random places among the companions
        plain, among = inputs("in.jsonl", reqs), inputs("mixed.jsonl", mixed)
        base = [args.deepinfer, "generate", "--model", args.model, "--device", "cuda", "--ordered-output"] + \
            shlex.split(args.args)
        alone = run(base + ["--input", plain, "--max-running", "1"], os.path.join(tmp, "alone.jsonl"))
        mpirun = shlex.split(args.mpirun) + ["-np", "4"]
        ways = {"together (32 running)": base + ["--input", plain, "--max-running", "32"]}
        for chunk in (37, 96, 200):
            ways[f"together, prefill chunks of {chunk} tokens"] = base + ["--input", plain, "--max-running", "32",
                                                                         "--chunk-tokens", str(chunk)]
        for cap in (2, 64, 256):
            ways[f"among 224 companions, at most {cap} running"] = base + ["--input", among, "--max-running", str(cap)]
        for deploy in ("2p2d", "colocated4"):
            ways[f"{deploy} (4 ranks on the GPU)"] = mpirun + base + [
                "--input", plain, "--deploy", os.path.join(args.deploy_dir, deploy + ".toml")]
        failed = False
        for name, cmd in ways.items():
            got = run(cmd, os.path.join(tmp, "out.jsonl"))
            tokens = sum(got[k][0] == alone[k][0] for k in alone)
            bits = sum(got[k] == alone[k] for k in alone)
            print(f"{name}: {tokens} of {len(alone)} outputs equal their run alone, {bits} bit for bit in every "
                  f"logits row")
            failed |= bits != len(alone)
        if args.expect_identical and failed:
            raise SystemExit("FAIL: some outputs depend on their batch")


if __name__ == "__main__":
    main()

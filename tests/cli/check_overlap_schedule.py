#!/usr/bin/env python3
"""check_overlap_schedule.py --deepinfer BIN --mpirun MPIRUN --model M --deploy-dir D [--args "..."]

`generate --overlap-schedule` (issue #27, the default): each step is scheduled and started before the previous step's
tokens are postprocessed; against `--no-overlap-schedule`. 16 requests (prompts of 3 to 120 tokens, a third sampled, some with stop tokens that end them early,
output lengths 1 to 16, two sharing a 64-token prefix) must give the same results as in order — tokens, finish
reasons and every logits row's fingerprint — and the same streamed tokens, on one rank (prefill chunks of 50 tokens;
with the prefix cache; with a KV cache small enough to preempt), under 2p2d and under colocated4. With preemption the
fingerprints are not compared: the steps in flight take their blocks a step earlier, so sequences are preempted at
other steps, and a recomputed prefix runs the prefill path (whose arithmetic DeepSeek-V3's absorbed decode does not
share bit for bit). --args: more generate options for every run; on the GPU "--device cuda --batch-invariant" (a
step in flight runs rows that in order would not, e.g. a sequence that its previous step stopped, and a GPU row's bits
depend on its batch without the flag), where the tokens stay on the device between overlapped steps.
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
from results_order import results_in_input_order


def run(cmd, tmp):
    out, stream = os.path.join(tmp, "out.jsonl"), os.path.join(tmp, "stream.jsonl")
    done = subprocess.run(cmd + ["--output", out, "--stream", stream, "--logits-hashes"], timeout=240,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-3000:])
        raise SystemExit(f"exit {done.returncode}: {' '.join(cmd)}")
    streamed = {}
    for line in open(stream):
        event = json.loads(line)
        if "id" in event:  # (the last line says the stream is done)
            streamed.setdefault(event["id"], []).extend(event.get("token_ids", []))
    return results_in_input_order(out, cmd), streamed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--deploy-dir", required=True)
    ap.add_argument("--args", default="", help="more generate options for every run")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json")))
    vocab = config.get("text_config", config)["vocab_size"]
    rng = random.Random(27)
    shared = [rng.randrange(3, vocab) for _ in range(64)]
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w") as f:
            for i in range(16):
                prompt = [rng.randrange(3, vocab) for _ in range(rng.choice([3, 17, 64, 120]))]
                r = {"id": f"o{i}", "prompt_token_ids": (shared + prompt) if i in (4, 9) else prompt,
                     "max_new_tokens": rng.choice([1, 2, 5, 9, 16]), "ignore_eos": i % 2 == 0}
                if i % 3 == 1:
                    r.update(temperature=0.9, top_p=0.95, seed=40 + i)
                if i % 4 == 2:
                    r["stop_token_ids"] = [rng.randrange(3, vocab) for _ in range(vocab // 8)]
                f.write(json.dumps(r) + "\n")
        base = [args.deepinfer, "generate", "--model", args.model, "--input", inp] + shlex.split(args.args)
        mpirun = shlex.split(args.mpirun) + ["-np", "4"]
        ways = {"1 rank, chunks of 50": (base + ["--chunk-tokens", "50"], True),
                "1 rank, prefix cache": (base + ["--prefix-cache"], True),
                "1 rank, a cache of 4 blocks": (base + ["--kv-cache-tokens", "256", "--max-running", "3"], False),
                "2p2d": (mpirun + base + ["--deploy", os.path.join(args.deploy_dir, "2p2d.toml")], True),
                "colocated4": (mpirun + base + ["--deploy", os.path.join(args.deploy_dir, "colocated4.toml")], True)}
        for name, (cmd, bits) in ways.items():
            in_order = run(cmd + ["--no-overlap-schedule"], tmp)
            overlapped = run(cmd + ["--overlap-schedule"], tmp)  # (the default)
            if not bits:
                for r in in_order[0] + overlapped[0]:
                    r.pop("logits_hashes")
            stops = sum(r["finish_reason"] == "stop" for r in in_order[0])
            assert overlapped == in_order, f"{name}: the overlapped run differs"
            print(f"{name}: {len(in_order[0])} results{' (bit for bit)' if bits else ''} and their streams equal "
                  f"with and without overlap ({stops} stopped early)")


if __name__ == "__main__":
    main()

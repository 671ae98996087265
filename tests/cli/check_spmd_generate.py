#!/usr/bin/env python3
"""check_spmd_generate.py --model M [--dummy] --deploy D --ranks N --deepinfer BIN --mpirun MPIRUN [--args "..."]
                         [--expect-log REGEX]

Generates a set of requests of mixed prompt and output lengths (a stop token on some), runs them on one rank
and across the deployment D on N ranks, and checks that every output is identical. With a transformers
fixture (a directory with reference.json) it also checks the outputs against transformers' greedy tokens.
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
from results_order import results_in_input_order


def requests_for(model, vocab):
    ref_path = os.path.join(model, "reference.json")
    rng = random.Random(42)
    prompts = json.load(open(ref_path))["prompts"] if os.path.isfile(ref_path) else []
    prompts += [[rng.randrange(2, vocab) for _ in range(n)] for n in (3, 17, 40, 70, 129, 5, 64, 90)]
    reqs = []
    for i, p in enumerate(prompts):
        reqs.append({"id": f"q{i}", "prompt_token_ids": p, "max_new_tokens": [1, 2, 5, 9, 12, 20][i % 6]})
    return reqs


def run(cmd, out, expect_log=None):
    done = subprocess.run(cmd + ["--output", out], check=True, timeout=600, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(done.stdout[-2000:])
    if expect_log is not None:
        assert re.search(expect_log, done.stdout), f"no line matching {expect_log!r} in the run's log"
    return results_in_input_order(out, cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dummy", action="store_true")
    ap.add_argument("--deploy", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--args", default="", help="more generate options, for every run")
    ap.add_argument("--expect-log", help="a regular expression the deployment run's log must match")
    ap.add_argument("--same-as-args", help="generate options whose one-rank run must give the same outputs as --args'")
    ap.add_argument("--no-reference", action="store_true", help="skip the transformers greedy check (an approximation)")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json") if os.path.isdir(args.model) else args.model))
    reqs = requests_for(args.model, config.get("text_config", config)["vocab_size"])
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")

        def write_requests():
            with open(inp, "w") as f:
                for r in reqs:
                    f.write(json.dumps(r) + "\n")

        common = [args.deepinfer, "generate", "--model", args.model, "--input", inp]
        if args.dummy:
            common += ["--load-format", "dummy", "--seed", "5"]
        base = common + shlex.split(args.args)
        # A first run tells which token each request makes third: every third request stops on it.
        write_requests()
        first = run(base, os.path.join(tmp, "first.jsonl"))
        for i, r in enumerate(reqs):
            if i % 3 == 1 and len(first[i]["output_token_ids"]) >= 3:
                r["stop_token_ids"] = [first[i]["output_token_ids"][2]]
        write_requests()
        single = run(base, os.path.join(tmp, "single.jsonl"))
        assert any(r["finish_reason"] == "stop" for r in single)
        if args.same_as_args is not None:
            other = common + shlex.split(args.same_as_args)
            assert run(other, os.path.join(tmp, "other.jsonl")) == single, f"{args.same_as_args} differs from {args.args}"
        spmd = run(shlex.split(args.mpirun) + ["-np", str(args.ranks)] + base + ["--deploy", args.deploy],
                   os.path.join(tmp, "spmd.jsonl"), args.expect_log)
    assert len(single) == len(reqs) == len(spmd), (len(single), len(spmd))
    for a, b in zip(single, spmd):
        assert a == b, f"differs:\n one rank: {a}\n {args.ranks} ranks: {b}"
    reasons = sorted({r["finish_reason"] for r in single})
    if os.path.isdir(args.model) and not args.no_reference:
        ref = json.load(open(os.path.join(args.model, "reference.json")))
        for i, greedy in enumerate(ref["greedy"]):
            greedy = greedy["tokens"] if isinstance(greedy, dict) else greedy
            got = single[i]["output_token_ids"]
            n = min(len(got), len(greedy))
            assert got[:n] == greedy[:n], (i, got, greedy)
    print(f"{len(reqs)} requests ({sum(len(r['prompt_token_ids']) for r in reqs)} prompt tokens, "
          f"{sum(r['output_tokens'] for r in single)} generated, finish reasons {reasons}): "
          f"{args.ranks} ranks ({os.path.basename(args.deploy)}) == 1 rank")


if __name__ == "__main__":
    main()

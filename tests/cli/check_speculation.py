#!/usr/bin/env python3
"""check_speculation.py --deepinfer BIN --mpirun MPIRUN --model M --deploy D --ranks N [--model-drafter mtp|dspark]
                       [--args "..."]

Speculative decoding through `generate` (issue #27): requests of mixed prompt and output lengths, greedy and
sampled, a stop token on some, run once without speculation on one rank (their results become the controlled
drafter's --draft-reference), then with --nextn (fixed and --spec-varlen) on one rank and across the deployment.
Every run's outputs must equal the plain run's on the same ranks (one rank, or the deployment), token for token, and the log must show drafts verified and
accepted (some rejected too, so rollback happened). With --model-drafter mtp (a V3 checkpoint with its MTP layer) also
--draft mtp on one rank and across the deployment; with --model-drafter dspark (a V4.1 checkpoint with its DSpark
layers) --draft dspark, fixed and --spec-varlen, likewise (the fixtures' draft weights are random: drafts verified,
few accepted); on the GPU (--args with "--device cuda") the DSpark runs chain each draft behind its verify step (overlapped scheduling, the default; one rank's log must say so) and run once more in order (--no-overlap-schedule).
--args: more generate options for every run (e.g. "--device cuda" on the GPU machine; with
"--batch-invariant" the deployment's plain run must equal one rank's there too, and the --spec-varlen runs, which the
flag refuses, are left out).
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

SPEC_LINE = re.compile(r"speculative decoding: (\d+) sequence steps, per step ([\d.]+) drafted, ([\d.]+) verified, "
                       r"([\d.]+) accepted")


def run(cmd, out):
    done = subprocess.run(cmd + ["--output", out], timeout=600, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    sys.stdout.write(done.stdout[-1500:])
    assert done.returncode == 0, f"exit {done.returncode}: {' '.join(cmd)}"
    return results_in_input_order(out, cmd), done.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--deploy", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--model-drafter", choices=["mtp", "dspark"])
    ap.add_argument("--args", default="", help="more generate options, for every run")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json")))
    vocab = config.get("text_config", config)["vocab_size"]
    rng = random.Random(7)
    reqs = []
    for i, n in enumerate((3, 17, 40, 62, 70, 129, 5, 90)):
        r = {"id": f"s{i}", "prompt_token_ids": [rng.randrange(2, vocab) for _ in range(n)],
             "max_new_tokens": [2, 30, 24, 40, 9, 33, 1, 28][i], "ignore_eos": True}
        if i % 2 == 1:
            r.update(temperature=0.8, top_p=0.9, seed=100 + i)
        reqs.append(r)
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        base = [args.deepinfer, "generate", "--model", args.model, "--input", inp] + shlex.split(args.args)

        def write_requests():
            with open(inp, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in reqs)

        write_requests()
        first, _ = run(base, os.path.join(tmp, "first.jsonl"))
        for i in (2, 5):  # a stop token met part-way
            reqs[i]["stop_token_ids"] = [first[i]["output_token_ids"][6]]
        write_requests()
        ref = os.path.join(tmp, "plain.jsonl")
        plain, _ = run(base, ref)
        assert sum(r["finish_reason"] == "stop" for r in plain) == 2, "the stop tokens did not stop two requests"
        mpirun = shlex.split(args.mpirun) + ["-np", str(args.ranks)]
        # The deployment's own plain run is its reference (on the CPU it equals the one-rank run; on a GPU a row's
        # bits depend on its batch, issue #28, so a deployment's plain outputs may differ from one rank's).
        ref_deploy = os.path.join(tmp, "plain-deploy.jsonl")
        plain_deploy, _ = run(mpirun + base + ["--deploy", args.deploy], ref_deploy)
        same = sum(a["output_token_ids"] == b["output_token_ids"] for a, b in zip(plain_deploy, plain))
        print(f"{args.deploy} without speculation: {same} of {len(plain)} outputs equal one rank's")
        invariant = "--batch-invariant" in args.args  # (issue #28: then a GPU deployment gives one rank's bits too)
        assert ("cuda" in args.args and not invariant) or same == len(plain), \
            "every deployment gives one rank's outputs (on the CPU, and on the GPU with --batch-invariant)"
        expected = {}
        runs = {
            "1 rank, --nextn 3": base + ["--nextn", "3", "--draft-reference", ref, "--draft-acceptance", "0.7"],
            "1 rank, --nextn 5 --spec-varlen": base + ["--nextn", "5", "--spec-varlen", "--draft-reference", ref,
                                                       "--draft-acceptance", "0.8", "--draft-spread", "2"],
            f"{args.deploy}, --nextn 3": mpirun + base + ["--deploy", args.deploy, "--nextn", "3", "--draft-reference",
                                                          ref_deploy, "--draft-acceptance", "0.7"],
            f"{args.deploy}, --nextn 4 --spec-varlen": mpirun + base + ["--deploy", args.deploy, "--nextn", "4",
                                                                        "--spec-varlen", "--draft-reference", ref_deploy],
        }
        if args.model_drafter == "mtp":
            runs["1 rank, --draft mtp"] = base + ["--nextn", "1", "--draft", "mtp"]
            runs[f"{args.deploy}, --draft mtp"] = mpirun + base + ["--deploy", args.deploy, "--nextn", "1", "--draft", "mtp"]
        if args.model_drafter == "dspark":
            block = config["text_config"]["dspark_block_size"]
            runs["1 rank, --draft dspark"] = base + ["--nextn", str(block), "--draft", "dspark"]
            runs["1 rank, --draft dspark --spec-varlen"] = base + ["--nextn", str(block), "--spec-varlen", "--draft",
                                                                   "dspark"]
            runs[f"{args.deploy}, --draft dspark"] = mpirun + base + ["--deploy", args.deploy, "--nextn", str(block - 1),
                                                                      "--draft", "dspark"]
            runs[f"{args.deploy}, --draft dspark --spec-varlen"] = mpirun + base + [
                "--deploy", args.deploy, "--nextn", str(block), "--spec-varlen", "--draft", "dspark"]
            if "cuda" in args.args:  # overlapped scheduling (the default) chains the drafts there; and in order
                runs["1 rank, --draft dspark --no-overlap-schedule"] = base + [
                    "--nextn", str(block), "--draft", "dspark", "--no-overlap-schedule"]
                runs[f"{args.deploy}, --draft dspark --no-overlap-schedule"] = mpirun + base + [
                    "--deploy", args.deploy, "--nextn", str(block - 1), "--draft", "dspark", "--no-overlap-schedule"]
        if invariant:  # --batch-invariant refuses --spec-varlen (its verify lengths depend on the batch)
            runs = {name: cmd for name, cmd in runs.items() if "--spec-varlen" not in cmd}
        for name in runs:
            expected[name] = plain_deploy if name.startswith(args.deploy) else plain
        for name, cmd in runs.items():
            out, log = run(cmd, os.path.join(tmp, "spec.jsonl"))
            for a, b in zip(out, expected[name]):
                assert a["id"] == b["id"] and a["output_token_ids"] == b["output_token_ids"] and \
                    a["finish_reason"] == b["finish_reason"], f"{name}: request {a['id']} differs:\n{a}\n{b}"
            assert len(out) == len(plain), f"{name}: {len(out)} results, expected {len(plain)}"
            chained = "each DSpark draft chained behind its verify step" in log
            expect_chained = "cuda" in args.args and "dspark" in name and "--no-overlap-schedule" not in name
            if name.startswith("1 rank"):  # (a deployment's rank 0, which alone logs, is a prefill rank)
                assert chained == expect_chained, f"{name}: drafts chained {chained}, expected {expect_chained}"
            stats = SPEC_LINE.findall(log)
            assert stats, f"{name}: no speculative decoding summary in the log"
            _, drafted, verified, accepted = map(float, stats[-1])
            if "mtp" in name or "dspark" in name:
                assert 0 < verified <= drafted and accepted < verified, f"{name}: {drafted} {verified} {accepted}"
            else:
                assert 0 < accepted < verified <= drafted, f"{name}: drafted {drafted}, verified {verified}, accepted {accepted}"
            print(f"ok: {name}: outputs equal the plain run's; per sequence step {drafted:.2f} drafted, "
                  f"{verified:.2f} verified, {accepted:.2f} accepted")


if __name__ == "__main__":
    main()

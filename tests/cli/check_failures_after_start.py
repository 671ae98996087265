#!/usr/bin/env python3
"""check_failures_after_start.py --deepinfer BIN --model M --tokenizer T [--launch L --deploy D]

A request that fails after the job has started ends alone, with an error record; the job and every other result go
on, equal to a run without the failing requests:
 - constraints that dead-end after their first token (a regex or an EBNF grammar that must go on with a character
   no token of the vocabulary spells), greedy and sampled: {"id", "error": {"code": "constraint_dead_end",
   "message" naming the request and where}} in the durable output (the status file counting them as failed) and in
   the --ordered-output one (in input order), and a final stream line saying "error";
 - conversations (--ordered-output's waves): a continuation whose whole prompt is found too long for the KV cache
   when its wave starts, and a continuation of a request that failed (and of that one), each an error record.
"""
import argparse
import json
import os
import shlex
import subprocess
import tempfile

FINE = [
    {"id": "fine-regex", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 4, "regex": "[a-c]+"},
    {"id": "plain", "prompt_token_ids": [9, 10, 11], "max_new_tokens": 5},
    {"id": "sampled", "prompt_token_ids": [12, 13], "max_new_tokens": 5, "temperature": 0.9, "seed": 7},
]
DEAD = [
    {"id": "dead-regex", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 4, "regex": "a\\t"},
    {"id": "dead-sampled", "prompt_token_ids": [8, 9], "max_new_tokens": 6, "regex": "[ab]\\t",
     "temperature": 1.0, "seed": 3},
    {"id": "dead-ebnf", "prompt_token_ids": [14], "max_new_tokens": 4, "ebnf": 'root ::= "c" tail\ntail ::= "\\t"'},
]


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (cmd, done.returncode, (done.stdout + done.stderr)[-3000:])
    return done.stdout + done.stderr


def by_id(path):
    lines = [json.loads(line) for line in open(path)]
    return lines, {r["id"]: r for r in lines}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--launch", default="")
    ap.add_argument("--deploy", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        def generate(name, requests, *extra):
            inp, out = os.path.join(tmp, name + ".jsonl"), os.path.join(tmp, name + ".out.jsonl")
            with open(inp, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in requests)
            cmd = shlex.split(args.launch) + [args.deepinfer, "generate", "--model", args.model, "--tokenizer",
                                              args.tokenizer, "--input", inp, "--output", out, *extra]
            if args.deploy:
                cmd += ["--deploy", args.deploy]
            return run(cmd), out

        _, ref_out = generate("reference", FINE)
        _, reference = by_id(ref_out)
        mixed = [DEAD[0], FINE[0], DEAD[1], FINE[1], DEAD[2], FINE[2]]
        status = os.path.join(tmp, "status.json")
        stream = os.path.join(tmp, "stream.jsonl")
        text, out = generate("mixed", mixed, "--status-file", status, "--stream", stream)
        lines, got = by_id(out)
        assert len(lines) == len(mixed) and set(got) == {r["id"] for r in mixed}, lines
        for r in DEAD:
            e = got[r["id"]].get("error")
            assert e and e["code"] == "constraint_dead_end", got[r["id"]]
            assert f'request id "{r["id"]}"' in e["message"] and "no token of this vocabulary continues" in e["message"], e
            assert "output_token_ids" not in got[r["id"]], got[r["id"]]
        assert 'after 1 output tokens' in got["dead-regex"]["error"]["message"], got["dead-regex"]
        for r in FINE:
            assert got[r["id"]] == reference[r["id"]], (got[r["id"]], reference[r["id"]])
        st = json.load(open(status))
        assert st["state"] == "complete" and st["failed"] == len(DEAD) and st["done"] == len(mixed), st
        ends = [json.loads(line) for line in open(stream) if '"finish_reason"' in line]
        errors = {e["id"] for e in ends if e["finish_reason"] == "error" and e["error"]["code"] == "constraint_dead_end"}
        assert errors == {r["id"] for r in DEAD}, ends
        print(f"durable: {len(DEAD)} dead-end constraints are error records, the other {len(FINE)} results equal a "
              f"run without them; status failed {st['failed']}; the stream ends them with 'error'")

        # --resume of an output cut after its first lines (and a torn one): the error records already there count.
        cut = os.path.join(tmp, "mixed.out.jsonl")
        kept = open(cut, "rb").read().split(b"\n")[:3]
        open(cut, "wb").write(b"\n".join(kept) + b"\n" + b'{"id": "torn')
        generate("mixed", mixed, "--status-file", status, "--resume")
        st = json.load(open(status))
        assert st["state"] == "complete" and st["failed"] == len(DEAD) and st["done"] == len(mixed), st
        assert by_id(cut)[1] == got, "the resumed output differs from the uninterrupted one"
        print(f"--resume after a cut: status failed {st['failed']} (the earlier error records counted)")

        # An output with error records is a draft reference as it is (their requests are drafted nothing).
        generate("drafted", mixed, "--nextn", "2", "--draft-reference", cut)
        print("an output with error records serves as --draft-reference")

        _, ordered_out = generate("ordered", mixed, "--ordered-output")
        lines, ordered = by_id(ordered_out)
        assert [r["id"] for r in lines] == [r["id"] for r in mixed], lines
        assert all(ordered[k] == got[k] for k in got), (ordered, got)
        print("--ordered-output: the same records, in input order")

        # Conversations: "long" continues "base" with a prompt past the cache (64 tokens); "after-long" continues
        # that; "after-dead" continues a dead-end; "ok" continues "base" and runs.
        conversations = [
            {"id": "base", "prompt_token_ids": list(range(3, 33)), "max_new_tokens": 8},
            DEAD[0],
            {"id": "long", "continues": "base", "prompt_token_ids": list(range(3, 33)), "max_new_tokens": 8},
            {"id": "ok", "continues": "base", "prompt_token_ids": [5, 6], "max_new_tokens": 3},
            {"id": "after-long", "continues": "long", "prompt_token_ids": [7], "max_new_tokens": 2},
            {"id": "after-dead", "continues": "dead-regex", "prompt_token_ids": [7], "max_new_tokens": 2},
        ]
        _, waves_out = generate("waves", conversations, "--ordered-output", "--kv-cache-tokens", "64")
        lines, waves = by_id(waves_out)
        assert [r["id"] for r in lines] == [r["id"] for r in conversations], lines
        assert waves["long"]["error"]["code"] == "invalid_request", waves["long"]
        assert "needs 76 tokens of KV cache" in waves["long"]["error"]["message"], waves["long"]
        for child, parent in (("after-long", "long"), ("after-dead", "dead-regex")):
            e = waves[child]["error"]
            assert e["code"] == "continues_a_failed_request" and f'(id "{parent}") failed' in e["message"], e
        assert waves["dead-regex"]["error"]["code"] == "constraint_dead_end", waves["dead-regex"]
        for k in ("base", "ok"):
            assert "error" not in waves[k] and waves[k]["output_token_ids"], waves[k]
        print("waves: a continuation too long for the cache and the continuations of failed requests are error "
              "records; the others run")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""check_prefix_cache.py --model M --deepinfer BIN [--mpirun MPIRUN --deploy D --ranks N] [--min-hit-tokens K]
                        [--kv-store]

Requests that share prefixes: a long "document" with several questions after it, a repeated prompt, and second
turns (an earlier prompt + the output it got + a follow-up). Runs them with and without --prefix-cache (one rank
with small prefill chunks, so later requests find the earlier ones' blocks; or across the deployment D) and checks
that every output is identical and that the cache served at least K prompt tokens (the summary's counter).
With --kv-store: the cached run writes a fresh directory tier, a second process reads it (it must serve prompt
tokens from there), then with one of its files truncated and another's payload flipped a third must ignore them
with a warning and still give the same outputs.
"""
import argparse
import json
import os
import random
import re
import shlex
import subprocess
import tempfile


def run(cmd, out, log=None):
    proc = subprocess.run(cmd + ["--output", out], check=True, timeout=600, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    hits = sum(c[0] for c in last_counters(text).values())
    if log is not None:
        log.append(text)
    return [json.loads(line) for line in open(out)], hits


def last_counters(text):
    """Per role, the last summary's (hit tokens, of them from the store): a run of waves prints a summary per wave,
    each counting every wave so far."""
    last = {}
    for role, hits, stored, replayed in re.findall(r"(\w+) ranks x\d+: .*prefix cache hits (\d+) prompt tokens "
                                                   r"\((\d+) from --kv-store, (\d+) of them replayed", text):
        last[role] = (int(hits), int(stored), int(replayed))
    return last


def store_tokens(text):
    return sum(c[1] for c in last_counters(text).values())


def replayed_tokens(text):
    return sum(c[2] for c in last_counters(text).values())


def swa_replay(launch, tmp, window, plain, reqs):
    """V4.1 with the store holding no window state (DeepInfer's): a second process's hits replay the window of their
    last `window` tokens — an approximation, so per request the greedy agreement with the exact outputs is reported,
    not required; a replay of at least the whole hit must be exact."""
    store, logs = os.path.join(tmp, "swa-store"), []
    replay = ["--swa-replay-tokens", str(window)]
    first, _ = run(launch + ["--kv-store", store] + replay, os.path.join(tmp, "swa-first.jsonl"), logs)
    assert first == plain, "writing a window-free store changed an output"
    second, _ = run(launch + ["--kv-store", store] + replay, os.path.join(tmp, "swa-second.jsonl"), logs)
    replayed, from_store = replayed_tokens(logs[1]), store_tokens(logs[1])
    assert replayed > 0 and from_store > replayed, (replayed, from_store)
    same = [a["output_token_ids"] == b["output_token_ids"] for a, b in zip(plain, second)]
    prefix = [next((k for k, (x, y) in enumerate(zip(a["output_token_ids"], b["output_token_ids"])) if x != y),
                   len(a["output_token_ids"])) for a, b in zip(plain, second)]
    print(f"SWA replay ({window} tokens): a second process took {from_store} prompt tokens from the window-free store, "
          f"recomputed the window of {replayed}; outputs identical to exact recompute for {sum(same)}/{len(same)} "
          f"requests, greedy tokens before the first difference per request {prefix}")
    # Replaying at least every hit token recomputes the whole window: exact.
    whole, _ = run(launch + ["--kv-store", store, "--swa-replay-tokens", "100000"], os.path.join(tmp, "swa-whole.jsonl"),
                   logs)
    assert whole == plain, "a replay of the whole hit changed an output"
    print("SWA replay of the whole hit: outputs identical to exact recompute")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--deploy", default="")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--min-hit-tokens", type=int, default=0)
    ap.add_argument("--kv-store", action="store_true")
    ap.add_argument("--yoco-keep", type=int, default=0,
                    help="also run with --yoco-truncation mask and a store: no prompt longer than this may leave a "
                         "block there (a truncated prefill's KV is not the exact one)")
    args = ap.parse_args()
    config = json.load(open(os.path.join(args.model, "config.json")))
    vocab = config.get("text_config", config)["vocab_size"]
    window = config.get("text_config", config).get("sliding_window", 0) if config["model_type"] == "deepseek_v41" else 0
    rng = random.Random(7)
    doc = [rng.randrange(3, vocab) for _ in range(150)]
    prompts = [doc + [rng.randrange(3, vocab) for _ in range(n)] for n in (5, 30, 1)]
    prompts += [list(prompts[0]), [rng.randrange(3, vocab) for _ in range(70)], doc[:128]]
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")

        def write(reqs):
            with open(inp, "w") as f:
                for r in reqs:
                    f.write(json.dumps(r) + "\n")

        reqs = [{"id": f"q{i}", "prompt_token_ids": p, "max_new_tokens": 6 + i % 4} for i, p in enumerate(prompts)]
        base = [args.deepinfer, "generate", "--model", args.model, "--input", inp, "--ordered-output"]  # continues
        write(reqs)
        first, _ = run(base, os.path.join(tmp, "first.jsonl"))
        # Second turns: an earlier conversation (prompt + its output) followed by a new message, given whole; and
        # the same follow-ups as requests that name the conversation they continue (run in a second wave), and a
        # third turn after one of those. A continuation must give what the whole conversation gives.
        follow_ups = {i: [rng.randrange(3, vocab) for _ in range(9)] for i in (0, 4)}
        for i in (0, 4):
            reqs.append({"id": f"turn2-q{i}", "max_new_tokens": 5,
                         "prompt_token_ids": prompts[i] + first[i]["output_token_ids"] + follow_ups[i]})
        whole = len(reqs)
        for i in (0, 4):
            reqs.append({"id": f"cont-q{i}", "continues": f"q{i}", "max_new_tokens": 5,
                         "prompt_token_ids": follow_ups[i]})
        reqs.append({"id": "cont3-q0", "continues": "cont-q0", "max_new_tokens": 4, "prompt_token_ids": [5, 6, 7]})
        write(reqs)
        launch = base
        if args.deploy:
            launch = shlex.split(args.mpirun) + ["-np", str(args.ranks)] + base + ["--deploy", args.deploy]
        else:
            launch = base + ["--chunk-tokens", "48"]
        plain, no_hits = run(launch, os.path.join(tmp, "plain.jsonl"))
        cached, hits = run(launch + ["--prefix-cache"], os.path.join(tmp, "cached.jsonl"))
        if args.kv_store:
            store = os.path.join(tmp, "store")
            logs = []
            # Exact hits: the store keeps V4.1's window state too (SWA replay off; no effect on V2/V3).
            exact = ["--swa-replay-tokens", "0"]
            written, _ = run(launch + ["--kv-store", store] + exact, os.path.join(tmp, "written.jsonl"), logs)
            files = sorted(f for f in os.listdir(store) if f.endswith(".kvblock"))
            assert files and not [f for f in os.listdir(store) if "partial" in f], os.listdir(store)
            reread, _ = run(launch + ["--kv-store", store] + exact, os.path.join(tmp, "reread.jsonl"), logs)
            from_store = store_tokens(logs[1])
            assert from_store >= 64, f"a second process read {from_store} prompt tokens from the store"
            with open(os.path.join(store, files[0]), "r+b") as f:  # truncated
                f.truncate(100)
            with open(os.path.join(store, files[-1]), "r+b") as f:  # a payload byte flipped
                f.seek(200)
                byte = f.read(1)
                f.seek(200)
                f.write(bytes([byte[0] ^ 0x40]))
            damaged, _ = run(launch + ["--kv-store", store] + exact, os.path.join(tmp, "damaged.jsonl"), logs)
            assert "damaged or belongs to another prefix" in logs[2], "no warning for the damaged files"
            for other in (written, reread, damaged):
                assert other == plain, "--kv-store changed an output"
            print(f"--kv-store: {len(files)} block files; a second process read {from_store} prompt tokens from "
                  f"them; damaged files ignored with a warning; outputs unchanged")
            if window:
                swa_replay(launch, tmp, window, plain, reqs)
        if args.yoco_keep:
            assert all(len(r["prompt_token_ids"]) > args.yoco_keep for r in reqs if "continues" not in r)
            store = os.path.join(tmp, "yoco-store")
            run(launch + ["--kv-store", store, "--yoco-truncation", "mask", "--yoco-keep-tokens", str(args.yoco_keep)],
                os.path.join(tmp, "yoco.jsonl"))
            left = [f for f in os.listdir(store) if f.endswith(".kvblock")] if os.path.isdir(store) else []
            assert not left, f"truncated prefills left blocks in the store: {left}"
            print("--yoco-truncation mask with --kv-store: no truncated sequence's block stored")
    assert no_hits == 0, no_hits
    for k, i in enumerate((0, 4)):  # a continuation == its conversation given whole
        assert plain[whole + k]["output_token_ids"] == plain[whole - 2 + k]["output_token_ids"], (k, i)
        assert plain[whole + k]["prompt_tokens"] == plain[whole - 2 + k]["prompt_tokens"]
    assert len(plain) == len(cached) == len(reqs)
    for a, b in zip(plain, cached):
        assert a == b, f"differs:\n without the prefix cache: {a}\n with it: {b}"
    assert hits >= args.min_hit_tokens, f"the prefix cache served {hits} prompt tokens, expected >= {args.min_hit_tokens}"
    where = f"{args.ranks} ranks ({os.path.basename(args.deploy)})" if args.deploy else "1 rank, 48-token chunks"
    print(f"{len(reqs)} requests ({sum(len(r['prompt_token_ids']) for r in reqs)} prompt tokens), {where}: outputs "
          f"with --prefix-cache == without; {hits} prompt tokens from cached blocks")


if __name__ == "__main__":
    main()

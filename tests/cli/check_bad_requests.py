#!/usr/bin/env python3
"""check_bad_requests.py --deepinfer BIN --model M [--launch L --deploy D]

Bad request lines, both ways, with the progress line and the status file:
 - by default the job is refused before any work (exit 2), one message from rank 0 naming every bad line and how
   many there are, and no output is written;
 - with --bad-requests record, each bad line gets an error record ({"id", "error": {"code", "message"}}, or an
   OpenAI line's {"custom_id", "response": null, "error"}) naming its line, the good ones run, and the progress
   line and the status file count the failed ones.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

GOOD = {"id": "good-1", "prompt_token_ids": [3, 4, 5], "max_new_tokens": 3}
LINES = [
    json.dumps(GOOD),                                                                  # 1
    '{"id": "broken", "prompt_token_ids": [1, 2',                                      # 2: malformed
    json.dumps({"custom_id": "oa-good", "method": "POST", "url": "/v1/completions",
                "body": {"prompt": [7, 8, 9], "max_tokens": 2}}),                      # 3
    json.dumps({"id": "no-max", "prompt_token_ids": [1, 2]}),                          # 4: no max_new_tokens
    json.dumps({"custom_id": "oa-bad", "method": "POST", "url": "/v1/embeddings",
                "body": {"input": "x"}}),                                              # 5: another endpoint
    json.dumps(GOOD),                                                                  # 6: its id again
    json.dumps({"id": "good-2", "prompt_token_ids": [9, 9], "max_new_tokens": 2}),   # 7
    json.dumps({"id": "vocab", "prompt_token_ids": [1, 10 ** 6], "max_new_tokens": 2}),  # 8: outside the vocabulary
]
BAD = {2, 4, 5, 6, 8}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--launch", default="")
    ap.add_argument("--deploy", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inp, out, status = (os.path.join(tmp, n) for n in ("bad.jsonl", "out.jsonl", "status.json"))
        open(inp, "w").write("\n".join(LINES) + "\n")
        base = shlex.split(args.launch) + [args.deepinfer, "generate", "--model", args.model, "--input", inp,
                                           "--output", out, "--status-file", status]
        if args.deploy:
            base += ["--deploy", args.deploy]

        refused = subprocess.run(base, capture_output=True, text=True, timeout=300)
        text = refused.stdout + refused.stderr
        assert refused.returncode == 2, (refused.returncode, text[-2000:])
        assert text.count(f"{len(BAD)} of {len(LINES)} request lines are bad") == 1, text[-2000:]
        for n in BAD:
            assert f"bad.jsonl:{n}:" in text, (n, text[-2000:])
        for n in set(range(1, len(LINES) + 1)) - BAD:
            assert f"bad.jsonl:{n}:" not in text, (n, text[-2000:])
        assert not os.path.exists(out), "a refused job wrote an output"
        print(f"refused (exit 2): one message naming lines {sorted(BAD)}")

        done = subprocess.run(base + ["--bad-requests", "record", "--progress-interval", "0.001"],
                              capture_output=True, text=True, timeout=300)
        text = done.stdout + done.stderr
        assert done.returncode == 0, (done.returncode, text[-2000:])
        results = [json.loads(line) for line in open(out)]
        assert len(results) == len(LINES), len(results)
        errors = [r for r in results if r.get("error")]
        assert len(errors) == len(BAD), errors
        for r in errors:
            assert set(r["error"]) == {"code", "message"} and re.search(r"bad\.jsonl:\d+:", r["error"]["message"]), r
            assert int(re.search(r"bad\.jsonl:(\d+):", r["error"]["message"]).group(1)) in BAD, r
        oa_bad = [r for r in errors if r.get("custom_id") == "oa-bad"]
        assert len(oa_bad) == 1 and oa_bad[0]["response"] is None, errors
        good = [r for r in results if not r.get("error")]
        assert sorted(r.get("custom_id", r["id"]) for r in good) == ["good-1", "good-2", "oa-good"], good
        st = json.load(open(status))
        assert st["state"] == "complete" and st["failed"] == len(BAD) and st["done"] == len(LINES), st
        assert st["total"] == len(LINES) and st["remaining"] == 0, st
        for key in ("requests_per_s", "prompt_tokens_per_s", "generated_tokens_per_s", "elapsed_s", "eta_s"):
            assert key in st, key
        progress = [line for line in text.splitlines() if "progress:" in line]
        assert progress and re.search(rf"{len(LINES)} / {len(LINES)} requests .*{len(BAD)} failed", progress[-1]), \
            progress
        print(f"recorded: {len(errors)} error records naming their lines, {len(good)} results; status and progress "
              f"count {st['failed']} failed of {st['total']}")


if __name__ == "__main__":
    main()

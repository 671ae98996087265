#!/usr/bin/env python3
"""check_chat_files_blamed.py --deepinfer BIN --model M --tokenizer T --chat-prose P --input CHAT_JSONL
                               --small-model S

A damaged or mismatched file is blamed by name before any request is: each case exits 2 with one error naming the
file (and the key, or the token), and no request line is named in it:
 - chat_prose.json whose {"special"} segment is a token the tokenizer lacks (one damaged variant per format part);
 - chat_prose.json whose sections are not objects (no bare JSON library message);
 - a tokenizer with more tokens than the model's vocabulary;
and a chat request without max_tokens is told about max_tokens, the name chat requests use.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile


def expect_error(cmd, pattern, what):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = done.stdout + done.stderr
    assert done.returncode == 2, (what, done.returncode, text[-2000:])
    errors = [line for line in text.splitlines() if "error" in line.lower()]
    hits = [line for line in errors if re.search(pattern, line)]
    assert len(hits) == 1, (what, pattern, errors)
    assert not re.search(r"\.jsonl:\d+", hits[0]), (what, "a request line is blamed", hits[0])
    print(f"{what}: {hits[0].split('] ', 2)[-1][:160]}")


def main():
    ap = argparse.ArgumentParser()
    for name in ("deepinfer", "model", "tokenizer", "chat-prose", "input", "small-model"):
        ap.add_argument("--" + name, required=True)
    args = ap.parse_args()
    prose = json.load(open(args.chat_prose))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.jsonl")

        def run_with_prose(damaged, pattern, what):
            path = os.path.join(tmp, "chat_prose.json")
            json.dump(damaged, open(path, "w"))
            expect_error([args.deepinfer, "generate", "--model", args.model, "--load-format", "dummy", "--tokenizer",
                          args.tokenizer, "--chat-prose", path, "--input", args.input, "--output", out], pattern, what)
            assert not os.path.exists(out), what

        for part in ("before", "after"):
            damaged = json.loads(json.dumps(prose))
            segments = damaged["v4"]["tools"][part]
            k = next(i for i, s in enumerate(segments) if "special" in s) if any("special" in s for s in segments) else 0
            segments.insert(k, {"special": "<｜no such token｜>"})
            run_with_prose(damaged, rf"chat_prose\.json: v4\.tools\.{part}\[{k}\] is the special token <｜no such "
                                    rf"token｜>, which .*tokenizer\.json does not have", f"special token in tools.{part}")
        for key, value, message in (("v4", "text", r"'v4' is missing or not an object"),
                                    ("v4.effort", [1, 2], r"v4\.effort is missing or not an object"),
                                    ("v4.tools", 5, r"v4\.tools is missing or not an object")):
            damaged = json.loads(json.dumps(prose))
            holder = damaged
            *path, last = key.split(".")
            for p in path:
                holder = holder[p]
            holder[last] = value
            run_with_prose(damaged, rf"chat_prose\.json: {message}", f"{key} damaged")

        expect_error([args.deepinfer, "generate", "--model", args.small_model, "--tokenizer", args.tokenizer,
                      "--input", args.input, "--output", out],
                     r"tokenizer\.json: \d+ tokens, more than the \d+ of the model's vocabulary .*: it is not this "
                     r"model's tokenizer", "a tokenizer larger than the vocabulary")

        no_max = os.path.join(tmp, "no_max.jsonl")
        open(no_max, "w").write(json.dumps({"id": "x", "messages": [{"role": "user", "content": "Hi"}]}) + "\n")
        done = subprocess.run([args.deepinfer, "generate", "--model", args.model, "--load-format", "dummy",
                               "--tokenizer", args.tokenizer, "--chat-prose", args.chat_prose, "--input", no_max,
                               "--output", out], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and "no_max.jsonl:1: 'max_tokens' must be an integer >= 1 (a chat request's name for max_new_tokens" in done.stderr + \
            done.stdout, (done.returncode, (done.stdout + done.stderr)[-2000:])
        print("a chat request without max_tokens is told about 'max_tokens'")


if __name__ == "__main__":
    main()

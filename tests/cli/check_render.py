#!/usr/bin/env python3
"""check_render.py --deepinfer BIN --model M --tokenizer T --chat-prose P --chat CHAT_JSONL --ids-model IDS
                   [--launch L --deploy D]

What was sent to the model, visible:
 - `render` (no weights loaded) writes each request's prompt: ids, text with the special tokens spelled out, the
   counts; for chat requests, OpenAI batch lines (chat and completions) and plain ids; a bad line becomes an error
   record naming it and the exit code is 2 once every line is written;
 - `generate --echo-prompt` gives each result the same prompt_token_ids (and prompt_text), in the durable output
   (1 rank, and the deployment when given), under --ordered-output, and inside an OpenAI line's response body;
 - a continued conversation echoes its whole prompt: the parent's prompt and output, then its own tokens.
"""
import argparse
import json
import os
import shlex
import subprocess
import tempfile


def run(cmd, expect=0):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == expect, (cmd, done.returncode, (done.stdout + done.stderr)[-3000:])
    return done.stdout + done.stderr


def key(line):
    return line.get("custom_id") or json.dumps(line["id"])


def main():
    ap = argparse.ArgumentParser()
    for name in ("deepinfer", "model", "tokenizer", "chat-prose", "chat", "ids-model"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--launch", default="")
    ap.add_argument("--deploy", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        requests = [json.loads(line) for line in open(args.chat) if line.strip()]
        requests.append({"custom_id": "oa-chat", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"messages": [{"role": "user", "content": "Say 1 2 3"}], "max_tokens": 3}})
        requests.append({"custom_id": "oa-text", "method": "POST", "url": "/v1/completions",
                         "body": {"prompt": "Once upon", "max_tokens": 3}})
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in requests)
        files = ["--model", args.model, "--tokenizer", args.tokenizer, "--chat-prose", args.chat_prose]

        rendered_path = os.path.join(tmp, "rendered.jsonl")
        run([args.deepinfer, "render", *files, "--input", inp, "--output", rendered_path])
        rendered = [json.loads(line) for line in open(rendered_path)]
        assert [key(r) for r in rendered] == [key(r) for r in requests], rendered
        for r in rendered:
            assert r["prompt_tokens"] == len(r["prompt_token_ids"]) > 0 and r["max_new_tokens"] > 0, r
            assert isinstance(r["prompt_text"], str) and r["prompt_text"], r
        chat_ones = [r for r in rendered if r.get("id") == "think" or r.get("custom_id") == "oa-chat"]
        assert all("<｜User｜>" in r["prompt_text"] and "<｜Assistant｜>" in r["prompt_text"] for r in chat_ones), \
            chat_ones
        print(f"render: {len(rendered)} prompts in input order, the chat ones spelling their template's tokens")

        bad = os.path.join(tmp, "bad.jsonl")
        open(bad, "w").write(json.dumps(requests[0]) + "\n" + '{"id": "broken", "messages": [' + "\n" +
                             json.dumps({"id": "no-max", "messages": [{"role": "user", "content": "x"}]}) + "\n")
        bad_out = os.path.join(tmp, "bad.out.jsonl")
        text = run([args.deepinfer, "render", *files, "--input", bad, "--output", bad_out], expect=2)
        lines = [json.loads(line) for line in open(bad_out)]
        assert len(lines) == 3 and "prompt_token_ids" in lines[0], lines
        assert "bad.jsonl:2:" in lines[1]["error"]["message"] and "bad.jsonl:3:" in lines[2]["error"]["message"], lines
        assert "2 of 3 request lines are bad" in text, text[-2000:]
        print("render of a file with bad lines: an error record naming each, exit 2")

        by_key = {key(r): r for r in rendered}

        def check_echo(out, what):
            results = [json.loads(line) for line in open(out)]
            assert len(results) == len(requests), (what, results)
            for r in results:
                body = r["response"]["body"] if "response" in r else r
                want = by_key[key(r)]
                assert body["prompt_token_ids"] == want["prompt_token_ids"], (what, key(r))
                assert body["prompt_text"] == want["prompt_text"], (what, key(r))
            print(f"generate --echo-prompt ({what}): every result's prompt = render's")

        launches = [("1 rank", [], [])]
        if args.deploy:
            launches.append(("deployment", shlex.split(args.launch), ["--deploy", args.deploy]))
        for what, launch, deploy in launches:
            out = os.path.join(tmp, "out.jsonl")
            run(launch + [args.deepinfer, "generate", *files, "--load-format", "dummy", "--input", inp, "--output",
                          out, "--echo-prompt", *deploy])
            check_echo(out, what)
        ordered = os.path.join(tmp, "ordered.jsonl")
        run([args.deepinfer, "generate", *files, "--load-format", "dummy", "--input", inp, "--output", ordered,
             "--echo-prompt", "--ordered-output"])
        check_echo(ordered, "--ordered-output")

        conv = os.path.join(tmp, "conv.jsonl")
        open(conv, "w").write(json.dumps({"id": "a", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 3}) + "\n" +
                              json.dumps({"id": "b", "continues": "a", "prompt_token_ids": [8, 9],
                                          "max_new_tokens": 2}) + "\n")
        conv_out = os.path.join(tmp, "conv.out.jsonl")
        run([args.deepinfer, "generate", "--model", args.ids_model, "--input", conv, "--output", conv_out,
             "--echo-prompt", "--ordered-output"])
        a, b = [json.loads(line) for line in open(conv_out)]
        assert a["prompt_token_ids"] == [5, 6, 7], a
        assert b["prompt_token_ids"] == [5, 6, 7] + a["output_token_ids"] + [8, 9], (a, b)
        print("a continuation echoes its whole conversation")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""check_openai_batch.py --deepinfer BIN --text-model M --tokenizer T --chat-prose P --ids-model M2 [--launch L --deploy D]

The OpenAI batch format in and out, against today's request lines:
 - /v1/chat/completions (with the tokenizer): each result is {"id", "custom_id", "response": {"status_code": 200,
   "request_id", "body": chat.completion}, "error": null}, its message's content and reasoning_content and its usage
   those of the same chat request written as today's line;
 - /v1/completions with "prompt" text (tokenizer) or token ids: text_completion bodies, text equal to today's;
 - /v1/completions with token ids and no tokenizer: each choice carries the generated "token_ids" (text null), equal
   to today's output_token_ids;
 - today's lines mixed with OpenAI lines in one file each come back in their own form, under --ordered-output too.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

MESSAGES = [
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello 深度求索"}],
    [{"role": "user", "content": "What is two and two?"}],
    [{"role": "user", "content": "Name a colour."}],
]


def run(base, inp, out):
    done = subprocess.run(base + ["--input", inp, "--output", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600)
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-3000:])
        raise SystemExit(f"exit {done.returncode}")
    return [json.loads(line) for line in open(out)]


def write(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")


def check_envelope(r):
    assert set(r) == {"id", "custom_id", "response", "error"}, r.keys()
    assert r["error"] is None and r["response"]["status_code"] == 200, r
    assert r["id"].startswith("batch_req_") and r["response"]["request_id"].startswith("req_"), r
    body = r["response"]["body"]
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    assert len(body["choices"]) == 1 and body["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--text-model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--chat-prose", required=True)
    ap.add_argument("--ids-model", required=True)
    ap.add_argument("--launch", default="")
    ap.add_argument("--deploy", default="")
    args = ap.parse_args()
    launch = shlex.split(args.launch) + [args.deepinfer, "generate"]
    deploy = ["--deploy", args.deploy] if args.deploy else []
    with tempfile.TemporaryDirectory() as tmp:
        path = lambda name: os.path.join(tmp, name)
        # Requests name the model "deepseek-test": the job serves it under that name (a request naming another model
        # is refused, as the DeepSeek API does).
        text_base = launch + ["--model", args.text_model, "--load-format", "dummy", "--tokenizer", args.tokenizer,
                              "--chat-prose", args.chat_prose, "--served-model-name", "deepseek-test"] + deploy

        # Chat completions and text completions with the tokenizer; a line of today's form among them.
        openai, today = [], []
        for i, messages in enumerate(MESSAGES):
            body = {"model": "deepseek-test", "messages": messages, "max_tokens": 6 + i}
            if i == 1:
                body.update({"temperature": 0.7, "seed": 11, "max_completion_tokens": 7, "n": 1, "stream": False})
                del body["max_tokens"]
            openai.append({"custom_id": f"chat-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
            today.append({"id": f"chat-{i}", "messages": messages, "max_tokens": 6 + i,
                          **({"temperature": 0.7, "seed": 11, "max_tokens": 7} if i == 1 else {})})
        for i, prompt in enumerate(["Hello, world!", "深度求索 says"]):
            openai.append({"custom_id": f"text-{i}", "method": "POST", "url": "/v1/completions",
                           "body": {"model": "deepseek-test", "prompt": prompt, "max_tokens": 5, "echo": False}})
            today.append({"id": f"text-{i}", "prompt": prompt, "max_new_tokens": 5})
        openai.append({"id": "plain", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 3})
        today.append({"id": "plain", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 3})
        write(path("openai.jsonl"), openai)
        write(path("today.jsonl"), today)
        got = {r.get("custom_id", r["id"]): r for r in run(text_base, path("openai.jsonl"), path("openai.out"))}
        want = {r["id"]: r for r in run(text_base, path("today.jsonl"), path("today.out"))}
        assert set(got) == set(want), (sorted(got), sorted(want))
        for key, r in got.items():
            w = want[key]
            if key == "plain":
                assert "custom_id" not in r and r["output_token_ids"] == w["output_token_ids"], (r, w)
                continue
            body = check_envelope(r)
            choice = body["choices"][0]
            assert body["usage"]["completion_tokens"] == w["output_tokens"], (body["usage"], w)
            assert body["usage"]["prompt_tokens"] == w["prompt_tokens"]
            assert choice["finish_reason"] == w["finish_reason"], (choice, w)
            assert "token_ids" not in choice  # (a tokenizer reads the output)
            if key.startswith("chat"):
                assert body["object"] == "chat.completion" and body["model"] == "deepseek-test"
                message = choice["message"]
                assert message["role"] == "assistant" and message["content"] == w["content"], (message, w)
                assert message["reasoning_content"] == w["reasoning_content"]
            else:
                assert body["object"] == "text_completion" and choice["text"] == w["text"], (choice, w)
        print(f"OpenAI chat and text completions: {len(got) - 1} results equal today's lines; a today's line "
              "among them keeps its form")
        # --ordered-output writes the same lines (in input order), the Batch API's form included.
        ordered = run(text_base + ["--ordered-output"], path("openai.jsonl"), path("ordered.out"))
        assert [r.get("custom_id", r.get("id")) for r in ordered] == [r.get("custom_id", r.get("id")) for r in openai]
        for r in ordered:
            g = dict(got[r.get("custom_id", r.get("id"))])
            if "response" in r:
                r["response"]["body"].pop("created")
                g["response"] = dict(g["response"], body={k: v for k, v in g["response"]["body"].items()
                                                          if k != "created"})
            assert r == g, (r, g)
        print("--ordered-output: the same lines in input order, the Batch API's form kept")

        # Stop sequences end the generation, not only the content: a stop taken from each conversation's own greedy
        # content (two letters or digits past its middle) ends the run at the token that completes it, so the output's
        # tokens are a prefix of the run without it and the usage counts only those (OpenAI lines and today's alike).
        # (Thinking off: stops meet the content, never the reasoning, where the random model would stay.)
        free = [{"id": f"free-{i}", "messages": m, "max_tokens": 48, "thinking": {"type": "disabled"}}
                for i, m in enumerate(MESSAGES)]
        write(path("free.jsonl"), free)
        plain = {r["id"]: r for r in run(text_base, path("free.jsonl"), path("free.out"))}
        stopped_lines, cut = [], {}
        for line in free:
            content = plain[line["id"]]["content"] or ""
            # An added token's text (<|...|>) is never searched for stops: masked, keeping the places.
            searched = re.sub(r"<\|[^|]*\|>", lambda m: "\0" * len(m.group(0)), content)
            stop = next((searched[c:c + 2] for c in range(len(searched) // 2, len(searched) - 1)
                         if searched[c:c + 2].isascii() and searched[c:c + 2].isalnum()), None)
            if stop is None:
                continue
            cut[line["id"]] = content[:searched.index(stop)]
            stopped_lines.append(dict(line, stop=[stop]))
            stopped_lines.append({"custom_id": "openai-" + line["id"], "method": "POST", "url": "/v1/chat/completions",
                                  "body": {"model": "deepseek-test", "messages": line["messages"], "max_tokens": 48,
                                           "thinking": {"type": "disabled"}, "stop": stop}})
        assert cut, "no conversation's greedy content had two letters or digits past its middle"
        write(path("stopped.jsonl"), stopped_lines)
        stopped = {r.get("custom_id", r.get("id")): r for r in run(text_base, path("stopped.jsonl"), path("stopped.out"))}
        for key, want_content in cut.items():
            r, p, o = stopped[key], plain[key], stopped["openai-" + key]
            assert r["finish_reason"] == "stop" and r["content"] == want_content, (r, want_content)
            n = len(r["output_token_ids"])
            assert n < len(p["output_token_ids"]) and r["output_token_ids"] == p["output_token_ids"][:n], (r, p)
            assert r["output_tokens"] == n, r
            body = check_envelope(o)
            assert body["choices"][0]["finish_reason"] == "stop" and body["choices"][0]["message"]["content"] == want_content
            assert body["usage"]["completion_tokens"] == n, (body["usage"], n)
        print(f"stop sequences: {len(cut)} conversations end at the token that completes their stop "
              f"({', '.join(str(len(stopped[k]['output_token_ids'])) for k in cut)} of 48 tokens), usage counting those")

        # Completions of token ids without a tokenizer: the choices carry the token ids.
        ids_base = launch + ["--model", args.ids_model] + deploy
        prompts = [[3, 17, 29, 4], [100, 101], [7] * 12]
        write(path("ids.jsonl"), [{"custom_id": f"ids-{i}", "method": "POST", "url": "/v1/completions",
                                   "body": {"prompt": p, "max_tokens": 4 + i}} for i, p in enumerate(prompts)])
        write(path("ids-today.jsonl"), [{"id": f"ids-{i}", "prompt_token_ids": p, "max_new_tokens": 4 + i}
                                        for i, p in enumerate(prompts)])
        got = {r["custom_id"]: r for r in run(ids_base, path("ids.jsonl"), path("ids.out"))}
        want = {r["id"]: r for r in run(ids_base, path("ids-today.jsonl"), path("ids-today.out"))}
        assert set(got) == set(want)
        for key, r in got.items():
            choice = check_envelope(r)["choices"][0]
            assert choice["text"] is None and choice["token_ids"] == want[key]["output_token_ids"], (choice, want[key])
            assert r["response"]["body"]["model"] == os.path.basename(args.ids_model.rstrip("/"))
        print(f"OpenAI completions of token ids without a tokenizer: {len(got)} results carry today's token ids")


if __name__ == "__main__":
    main()

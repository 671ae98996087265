#!/usr/bin/env python3
"""The chat corpus (tests/fixtures/make_chat_corpus.py: deepseek-recipe 0.2.0's renderings, refusals and stream
events) through the binary, as a user's batch file goes (issue #53):

  requests  every body as an OpenAI batch line, through `render` (the V4 and the V4.1 chat format) and through
            `generate --echo-prompt --bad-requests record` (V4): recipe's refusals are error records, its renderings
            the prompt's ids; image parts, which recipe renders for a vision encoder, are refused by design.
  streams   every stream's tokens forced as the request's output (forced_output_token_ids; finish "stop": the
            model's EOS after them, "length": max_tokens cuts them), through `generate --stream`: each result's
            content, reasoning_content, tool_calls and finish_reason, and the stream's deltas joined, are what recipe's
            events say.

    check_chat_corpus.py --deepinfer BIN --v4-model CONFIG --v41-model CONFIG --tokenizer TOKENIZER_JSON
                         --chat-prose FILE --corpus DIR [--every N]

--every N sends every Nth request and stream through generate (render takes them all): the whole corpus through
generate takes ~20 minutes on 2 cores (the CPU model's 129,280-id head), a tenth of it fits the test suite.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

IMAGE_REFUSAL = 'content parts of type "image_url" are not supported'
# generate enforces a response format (structured output): a schema the grammar engine cannot enforce whole is refused
# (recipe renders it: the prompt alone says the schema).
CONSTRAINT_REFUSALS = ("json_schema keyword", "invalid json_schema constraint", "invalid regex constraint")


def run(cmd, expect=(0,)):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500)
    assert done.returncode in expect, f"exit {done.returncode}: {' '.join(cmd)}\n{done.stdout[-3000:]}"
    return done.stdout


def big_config(path, out, vocab=None):
    """The model's config with room for the corpus's longest prompts (and a vocabulary of `vocab`)."""
    config = json.load(open(path))
    text = config.get("text_config", config)
    text["max_position_embeddings"] = 1 << 20
    if vocab:
        text["vocab_size"] = vocab
    json.dump(config, open(out, "w"))
    return out


def v41_tokenizer(path, system_id, out):
    spec = json.load(open(path, encoding="utf-8"))
    spec["added_tokens"].append({"id": system_id, "content": "<｜System｜>", "single_word": False, "lstrip": False,
                                 "rstrip": False, "normalized": False, "special": True})
    json.dump(spec, open(out, "w", encoding="utf-8"), ensure_ascii=False)
    return out


def batch_line(i, body_text, recipe_rendered):
    body = json.loads(body_text)
    if recipe_rendered and isinstance(body, dict):  # one token is enough: the prompt is what is compared
        body.pop("max_completion_tokens", None)
        body["max_tokens"] = 1
        body_text = json.dumps(body)
    return '{"custom_id": "r%d", "method": "POST", "url": "/v1/chat/completions", "body": %s}\n' % (i, body_text)


def check_requests(records, corpus, fmt, what, every=1):
    """records: custom_id -> (prompt ids or None, error message or None); corpus: every `every`th request."""
    differ, images, constraints, compared = [], 0, 0, 0
    for n, want in enumerate(corpus):
        i = n * every
        ids, error = records[f"r{i}"]
        compared += 1
        if "error" in want:
            if error is None:
                differ.append((i, want["class"], "accepted; recipe refused: " + want["error"][:120]))
        elif error is not None:
            if IMAGE_REFUSAL in error:
                images += 1
            elif any(c in error for c in CONSTRAINT_REFUSALS):
                constraints += 1
            else:
                differ.append((i, want["class"], "refused (" + error[:160] + "); recipe rendered"))
        elif ids != want[fmt]["ids"]:
            differ.append((i, want["class"], "prompt ids differ from recipe's"))
    for d in differ[:10]:
        print(f"  {what}: line {d[0]} ({d[1]}): {d[2]}")
    by_design = f"{images} with image parts" + (f", {constraints} with a schema structured output cannot enforce"
                                                if constraints else "")
    print(f"ok: {what}: {compared} requests, 0 differ from recipe ({by_design}: refused by design)"
          if not differ else f"FAIL: {what}: {len(differ)} of {compared} requests differ from recipe")
    return not differ


def key(record, every=1):
    """A record's request: its custom_id, or (a line that is no JSON object: "id" null, "request" its place) its
    ordinal in an input of every `every`th request."""
    if "custom_id" in record:
        return record["custom_id"]
    return f"r{(record['request'] if record['id'] is None else record['id']) * every}"


def render_records(path):
    records = {}
    for line in open(path):
        r = json.loads(line)
        records[key(r)] = (r.get("prompt_token_ids"), r["error"]["message"] if r.get("error") else None)
    return records


def generate_records(path, every):
    records = {}
    for line in open(path):
        r = json.loads(line)
        if r.get("error"):
            records[key(r, every)] = (None, r["error"]["message"])
        else:
            records[key(r, every)] = (r["response"]["body"]["prompt_token_ids"], None)
    return records


def expected_result(line):
    """What recipe's events say a generate result holds."""
    content, reasoning, calls, finish = "", "", [], None
    for _, c, r, f, call in line["events"]:
        content += c or ""
        reasoning += r or ""
        finish = f or finish
        if call:
            index, name, args = call
            if name is not None:
                calls.append({"name": name, "arguments": ""})
            elif args is not None:
                calls[index]["arguments"] += args
    return content, reasoning, calls, finish


EOS = 1  # <｜end▁of▁sentence｜>


def reproducible(stream):
    """Whether an engine can give these tokens: some, and no EOS among them (the model's EOS ends a generation; recipe
    was fed it as text)."""
    return bool(stream["tokens"]) and EOS not in stream["tokens"]


def check_streams(args, tmp, streams):
    inp = os.path.join(tmp, "streams.jsonl")
    with open(inp, "w") as f:
        for i, s in enumerate(streams):
            body = dict(s["body"])
            body.pop("stream", None)
            tokens = s["tokens"]
            if not reproducible(s):
                continue
            body.update(id=f"s{i}", forced_output_token_ids=tokens,
                        max_tokens=len(tokens) + (1 if s["finish"] == "stop" else 0))
            f.write(json.dumps(body, ensure_ascii=False) + "\n")
    out, stream = os.path.join(tmp, "streams_out.jsonl"), os.path.join(tmp, "streams_stream.jsonl")
    run([args.deepinfer, "generate", "--model", args.v4_model, "--load-format", "dummy", "--tokenizer",
         args.tokenizer, "--chat-prose", args.chat_prose, "--input", inp, "--output", out, "--stream", stream,
         "--kv-cache-tokens", "262144", "--max-running", "64"])
    results = {}
    for line in open(out):
        r = json.loads(line)
        results[r["id"]] = r
    deltas = {}
    for line in open(stream):
        e = json.loads(line)
        if "id" not in e:
            continue
        d = deltas.setdefault(e["id"], {"content": "", "reasoning": "", "calls": [], "finish": None})
        delta = e.get("delta") or {}
        d["content"] += delta.get("content") or ""
        d["reasoning"] += delta.get("reasoning_content") or ""
        for call in delta.get("tool_calls") or []:
            if "id" in call:
                d["calls"].append({"name": call["function"]["name"], "arguments": ""})
            d["calls"][call["index"]]["arguments"] += call["function"]["arguments"]
        d["finish"] = e.get("finish_reason") or d["finish"]
    differ, compared = [], 0
    for i, s in enumerate(streams):
        if not reproducible(s):
            continue
        compared += 1
        content, reasoning, calls, finish = expected_result(s)
        r, d = results[f"s{i}"], deltas[f"s{i}"]
        got_calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                     for c in r.get("tool_calls") or []]
        got = (r["content"], r["reasoning_content"] or "", got_calls, r["finish_reason"])
        streamed = (d["content"], d["reasoning"], d["calls"], d["finish"])
        want = (content, reasoning, calls, finish)
        if got != want or streamed != want:
            differ.append((i, s["class"], got if got != want else streamed, want))
    for i, kind, got, want in differ[:8]:
        print(f"  stream {i} ({kind}):\n   got  {got}\n   want {want}")
    print(f"ok: generate: {compared} streams forced through it, results and --stream deltas equal recipe's events "
          f"({len(streams) - compared} not reproducible by an engine: no tokens, or the model's EOS inside)"
          if not differ else f"FAIL: generate: {len(differ)} of {compared} streams differ from recipe")
    return not differ


def main():
    ap = argparse.ArgumentParser()
    for key in ("--deepinfer", "--v4-model", "--v41-model", "--tokenizer", "--chat-prose", "--corpus"):
        ap.add_argument(key, required=True)
    ap.add_argument("--every", type=int, default=1, help="through generate: every Nth request and stream")
    args = ap.parse_args()
    lines = open(os.path.join(args.corpus, "corpus_requests.jsonl"), encoding="utf-8").read().splitlines()
    system_id = json.loads(lines[0])["v41_system_token_id"]
    corpus = [json.loads(line) for line in lines[1:]]
    streams = [json.loads(line) for line in open(os.path.join(args.corpus, "corpus_streams.jsonl"), encoding="utf-8")]
    streams = streams[::args.every]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        batch = os.path.join(tmp, "batch.jsonl")
        with open(batch, "w") as f:
            for i, want in enumerate(corpus):
                f.write(batch_line(i, want["body_text"], "error" not in want))
        v4_model = big_config(args.v4_model, os.path.join(tmp, "v4.json"))
        v41_model = big_config(args.v41_model, os.path.join(tmp, "v41.json"), vocab=system_id + 1)
        v41_tok = v41_tokenizer(args.tokenizer, system_id, os.path.join(tmp, "v41-tokenizer.json"))
        for fmt, model, tokenizer in (("v4", v4_model, args.tokenizer), ("v41", v41_model, v41_tok)):
            out = os.path.join(tmp, f"render-{fmt}.jsonl")
            run([args.deepinfer, "render", "--model", model, "--tokenizer", tokenizer, "--chat-prose", args.chat_prose,
                 "--input", batch, "--output", out, "--kv-cache-tokens", str(1 << 20)], expect=(0, 2))
            ok &= check_requests(render_records(out), corpus, fmt, f"render ({fmt})")
        some = os.path.join(tmp, "batch-some.jsonl")  # every Nth line, its custom_id kept
        with open(batch) as f, open(some, "w") as g:
            g.writelines(line for i, line in enumerate(f) if i % args.every == 0)
        out = os.path.join(tmp, "generate-v4.jsonl")
        run([args.deepinfer, "generate", "--model", v4_model, "--load-format", "dummy", "--tokenizer", args.tokenizer,
             "--chat-prose", args.chat_prose, "--input", some, "--output", out, "--echo-prompt", "--bad-requests",
             "record", "--kv-cache-tokens", str(1 << 20), "--chunk-tokens", "8192"])
        ok &= check_requests(generate_records(out, args.every), corpus[::args.every], "v4",
                             "generate --echo-prompt (v4)", every=args.every)
        args.v4_model = v4_model
        ok &= check_streams(args, tmp, streams)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

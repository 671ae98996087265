#!/usr/bin/env python3
"""check_deep_json.py --deepinfer BIN --fixtures DIR --tokenizer TOKENIZER_JSON --chat-prose CHAT_PROSE_JSON

JSON nested 100,000 deep anywhere in an input (issue #52): in a request line's id, prompt ids, 'continues', a
response_format schema, a chat tool's parameters or a tool call's arguments, a --draft-reference line, config.json,
tokenizer.json, chat_prose.json. Each must end with one clear message naming the file and line (exit 2), never a
crash; and the bound's edge holds: a line nested exactly 256 deep runs, 257 is refused."""
import argparse
import json
import os
import shutil
import subprocess
import tempfile

DEEP = 100_000


def nested(depth, inner="0"):
    return "[" * depth + inner + "]" * depth


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--chat-prose", required=True)
    args = ap.parse_args()
    fx = args.fixtures
    valid = '{"id": "ok", "prompt_token_ids": [5, 6, 7], "max_new_tokens": 2}'
    deep_object = '{"a":' * DEEP + "1" + "}" * DEEP
    chat = lambda extra: json.dumps({"id": "c", "max_tokens": 2, **extra})  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.jsonl")
        plain = [args.deepinfer, "generate", "--model", os.path.join(fx, "tiny-v2-fp32"), "--output", out]
        constrained = [args.deepinfer, "generate", "--model", os.path.join(fx, "tiny-v41"), "--tokenizer",
                       os.path.join(fx, "tokenizer-bytes", "tokenizer.json"), "--output", out]
        chat_cmd = [args.deepinfer, "generate", "--model", os.path.join(fx, "tiny-v4-vocab.json"), "--load-format",
                    "dummy", "--tokenizer", args.tokenizer, "--chat-prose", args.chat_prose, "--output", out]
        cases = [  # (name, command, lines of the input, the line named, what the message names after the line)
            ("id", plain, [valid, '{"id": ' + nested(DEEP) + ', "prompt_token_ids": [5], "max_new_tokens": 2}'], 2, ""),
            ("prompt ids", plain, ['{"id": "p", "prompt_token_ids": ' + nested(DEEP, "5") + ', "max_new_tokens": 2}'],
             1, ""),
            ("continues", plain, [valid, valid.replace('"ok"', '"two"'),
                                  '{"id": "k", "continues": ' + nested(DEEP, '"ok"') +
                                  ', "prompt_token_ids": [5], "max_new_tokens": 2}'], 3, ""),
            ("schema", constrained, ['{"id": "s", "prompt_token_ids": [5, 6], "max_new_tokens": 2, "response_format": '
                                     '{"type": "json_schema", "json_schema": {"name": "x", "schema": ' + deep_object +
                                     '}}}'], 1, ""),
            ("tool parameters", chat_cmd, [chat({"messages": [{"role": "user", "content": "hi"}], "tools": [
                {"type": "function", "function": {"name": "f", "parameters": json.loads(nested(300, "{}"))}}]})
                .replace(nested(300, "{}"), nested(DEEP, "{}"))], 1, ""),
            ("tool call arguments", chat_cmd, [chat({"messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "t", "type": "function",
                     "function": {"name": "f", "arguments": '{"a": ' + nested(DEEP) + "}"}}]},
                {"role": "tool", "tool_call_id": "t", "content": "done"}]})], 1,
             "messages[1].tool_calls[0].function.arguments"),
        ]
        failures = []

        def expect(name, cmd, where, pattern_tail=""):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            text = proc.stdout + proc.stderr
            named = f"{where}: " + (pattern_tail + ": " if pattern_tail else "")
            wanted = named + "JSON nested more than 256 levels deep"
            ok = proc.returncode == 2 and text.count(wanted) == 1 and not os.path.exists(out)
            seen = "seen once" if ok else text[-600:]
            print(f"{'ok' if ok else 'FAIL'}: {name}: exit {proc.returncode}, message {seen}")
            if not ok:
                failures.append(name)

        for name, cmd, lines, line, tail in cases:
            path = os.path.join(tmp, "in.jsonl")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            expect(name, cmd + ["--input", path], f"{path}:{line}", tail)
        # A --draft-reference line.
        inp, ref = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "ref.jsonl")
        with open(inp, "w") as f:
            f.write(valid + "\n")
        with open(ref, "w") as f:
            f.write('{"id": "ok", "output_token_ids": [5, 6]}\n')
            f.write('{"id": "x", "output_token_ids": ' + nested(DEEP, "5") + "}\n")
        expect("draft reference", [args.deepinfer, "generate", "--model", os.path.join(fx, "tiny-v3-bf16"), "--input",
                                   inp, "--nextn", "2", "--draft-reference", ref, "--output", out], f"{ref}:2")
        # Whole files: config.json (its line named), tokenizer.json, chat_prose.json.
        model = os.path.join(tmp, "model")
        shutil.copytree(os.path.join(fx, "tiny-v2-fp32"), model)
        config = open(os.path.join(model, "config.json")).read()
        with open(os.path.join(model, "config.json"), "w") as f:
            f.write(config.replace('"model_type"', '"deep": ' + nested(DEEP) + ',\n  "model_type"', 1))
        line = config[:config.index('"model_type"')].count("\n") + 1
        expect("config.json", [args.deepinfer, "generate", "--model", model, "--input", inp, "--output", out],
               f"{os.path.join(model, 'config.json')}:{line}")
        with open(inp, "w") as f:  # a chat request, so that the chat prose is read
            f.write(chat({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
        for name, option in (("tokenizer.json", "--tokenizer"), ("chat_prose.json", "--chat-prose")):
            damaged = os.path.join(tmp, name)
            with open(damaged, "w") as f:
                f.write('{"deep": ' + nested(DEEP) + "}")
            cmd = list(chat_cmd)
            cmd[cmd.index(option) + 1] = damaged
            expect(name, cmd + ["--input", inp], f"{damaged}:1")
        # The bound's edge: the line object plus an id of 255 nested lists is 256 deep and runs; one more is refused.
        for depth, runs in ((255, True), (256, False)):
            with open(inp, "w") as f:
                f.write('{"id": ' + nested(depth) + ', "prompt_token_ids": [5, 6], "max_new_tokens": 2}\n')
            if runs:
                proc = subprocess.run(plain + ["--input", inp], capture_output=True, text=True, timeout=120)
                ok = proc.returncode == 0 and json.loads(open(out).read())["id"] == json.loads(nested(depth))
                print(f"{'ok' if ok else 'FAIL'}: a line 256 deep runs (exit {proc.returncode})")
                if not ok:
                    print(proc.stdout[-400:], proc.stderr[-400:])
                    failures.append("256 deep")
                os.remove(out)
            else:
                expect("257 deep", plain + ["--input", inp], f"{inp}:1")
    assert not failures, failures
    print("every deep JSON input refused with one message naming its file and line")


if __name__ == "__main__":
    main()

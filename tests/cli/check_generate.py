#!/usr/bin/env python3
"""check_generate.py FIXTURE_DIR -- COMMAND...

Writes the fixture's prompts as a JSONL request file (ids of several JSON types), runs
`COMMAND --input <in> --output <out>` (a `deepinfer generate` command line), and checks that the output lines
come back in input order, echo the ids, and hold transformers' greedy continuations.
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    sep = sys.argv.index("--")
    fixture = sys.argv[1]
    command = sys.argv[sep + 1:]
    ref = json.load(open(os.path.join(fixture, "reference.json")))
    ids = ["a", 7, {"k": [1, 2]}, None, 3.5, "z"]
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for i, prompt in enumerate(ref["prompts"]):
                f.write(json.dumps({"id": ids[i % len(ids)], "prompt_token_ids": prompt,
                                    "max_new_tokens": ref["max_new_tokens"]}) + "\n")
                if i == 2:
                    f.write("\n")  # blank lines are skipped
        # (the ids repeat, and the order is checked: the whole, in-order output)
        subprocess.run(command + ["--ordered-output", "--input", inp, "--output", out], check=True, timeout=300)
        lines = [json.loads(line) for line in open(out)]
    assert len(lines) == len(ref["prompts"]), len(lines)
    for i, line in enumerate(lines):
        assert line["id"] == ids[i % len(ids)], (i, line["id"])
        assert line["output_token_ids"] == ref["greedy"][i], (i, line["output_token_ids"], ref["greedy"][i])
        assert line["prompt_tokens"] == len(ref["prompts"][i])
        assert line["output_tokens"] == len(line["output_token_ids"])
        assert line["finish_reason"] in ("stop", "length")
    print(f"{len(lines)} results equal transformers' greedy continuations")


if __name__ == "__main__":
    main()

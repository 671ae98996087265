#!/usr/bin/env python3
"""check_structured_output.py --deepinfer BIN --mpirun MPIRUN --model M --tokenizer T --deploy D --ranks N
                              [--args "..."] [--dspark] [--chat]

Structured output through `generate` (issue #30) on a model of random weights, where only the masks keep the output
in its language: requests with JSON Schemas (objects, nested arrays, enums, numbers, patterns), any JSON object,
regular expressions and EBNF grammars, greedy and sampled, run on one rank and across the deployment. Every output
the engine marks whole (constraint_satisfied) must be valid (jsonschema, json.loads, re.fullmatch, and the EBNF
grammars' languages written as regexes); an output marked not whole must have run out of tokens (finish_reason
length); most outputs must be whole. The deployment's outputs equal one rank's (on the CPU), and with speculative
decoding (the controlled drafter proposing the plain run's outputs; with --dspark also the model's DSpark drafter,
whose random drafts the grammar mostly refuses) the outputs equal the plain run's. --chat: the same requests as chat
requests (thinking off; the response in "content"), constraints by response_format only. --args: more generate
options for every run (e.g. "--device cuda", "--chat-prose FILE").
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from results_order import results_in_input_order

try:
    import jsonschema
except ImportError:  # machines without it (the GPU machine): the subset of JSON Schema the requests use
    jsonschema = None

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def validate_subset(value, schema, where="$"):
    kind = schema.get("type")
    if kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is no integer"
    elif kind == "number":
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: {value!r} is no number"
    elif kind is not None:
        assert isinstance(value, TYPES[kind]), f"{where}: {value!r} is no {kind}"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if "pattern" in schema:
        assert re.search(schema["pattern"], value), f"{where}: {value!r} !~ {schema['pattern']}"
    if "maxLength" in schema:
        assert len(value) <= schema["maxLength"], f"{where}: {value!r} too long"
    if "minimum" in schema:
        assert value >= schema["minimum"], f"{where}: {value} below {schema['minimum']}"
    if "maximum" in schema:
        assert value <= schema["maximum"], f"{where}: {value} above {schema['maximum']}"
    if isinstance(value, dict):
        for key in schema.get("required", []):
            assert key in value, f"{where}: '{key}' missing"
        for key, item in value.items():
            assert key in schema.get("properties", {}) or schema.get("additionalProperties", True), \
                f"{where}: '{key}' not allowed"
            if key in schema.get("properties", {}):
                validate_subset(item, schema["properties"][key], f"{where}.{key}")
    if isinstance(value, list):
        assert len(value) >= schema.get("minItems", 0), f"{where}: too few items"
        assert len(value) <= schema.get("maxItems", len(value)), f"{where}: too many items"
        for i, item in enumerate(value):
            validate_subset(item, schema.get("items", {}), f"{where}[{i}]")

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                           "member": {"type": "boolean"}},
          "required": ["name", "age", "member"], "additionalProperties": False}
ORDER = {"type": "object", "properties": {
    "id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
    "status": {"enum": ["open", "closed", "held"]},
    "items": {"type": "array", "minItems": 1, "maxItems": 3,
              "items": {"type": "object", "properties": {"sku": {"type": "integer"}, "price": {"type": "number"}},
                        "required": ["sku", "price"], "additionalProperties": False}}},
    "required": ["id", "status", "items"], "additionalProperties": False}
FLAGS = {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4}
REGEXES = [r"[0-9]{4}-[0-9]{2}-[0-9]{2}", r"(GET|POST) /[a-z]{1,8}( HTTP/1\.[01])?", r"[a-z]+@[a-z]+\.(com|org)"]
EBNF = [
    ('root ::= answer (", " answer)*\nanswer ::= "yes" | "no"', r"(yes|no)(, (yes|no))*"),
    ('root ::= "(" expr ")"\nexpr ::= num (("+" | "*") num)*\nnum ::= [0-9]+', r"\([0-9]+([+*][0-9]+)*\)"),
]


def requests(chat):
    reqs = []

    def add(constraint, prompt, max_new, sampled):
        if chat:  # a chat request carries its constraint in response_format
            r = {"id": f"r{len(reqs)}", "messages": [{"role": "user", "content": prompt}],
                 "thinking": {"type": "disabled"}, "max_tokens": max_new}
            if "response_format" in constraint:  # not "strict": the API's strict subset refuses some of these
                spec = json.loads(json.dumps(constraint))  # schemas (the engine enforces a schema whole either way)
                spec["response_format"].get("json_schema", {}).pop("strict", None)
                constraint = spec
            if "regex" in constraint:
                constraint = {"response_format": {"type": "regex", "regex": constraint["regex"]}}
            elif "ebnf" in constraint:
                return
        else:
            r = {"id": f"r{len(reqs)}", "prompt": prompt, "max_new_tokens": max_new}
        r.update(constraint)
        if sampled:
            r.update(temperature=0.9, top_p=0.95, seed=100 + len(reqs))
        reqs.append(r)

    for i, schema in enumerate((PERSON, ORDER, FLAGS)):
        for sampled in (False, True):
            add({"response_format": {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema,
                                                                            "strict": True}}},
                f"schema {i}:", 160, sampled)
    add({"response_format": {"type": "json_object"}}, "any json:", 120, True)
    for i, rx in enumerate(REGEXES):
        for sampled in (False, True):
            add({"regex": rx}, f"regex {i}:", 40, sampled)
    for i, (grammar, _) in enumerate(EBNF):
        for sampled in (False, True):
            add({"ebnf": grammar}, f"grammar {i}:", 40, sampled)
    return reqs


def check_valid(reqs, out, name):
    whole = 0
    for req, res in zip(reqs, out):
        assert res["id"] == req["id"], f"{name}: results out of order"
        text = res["content"] if "messages" in req else res["text"]
        if not res.get("constraint_satisfied"):
            assert "constraint_satisfied" in res, f"{name}: {req['id']} has no constraint_satisfied"
            assert res["finish_reason"] == "length", f"{name}: {req['id']} not whole but finished by {res['finish_reason']}"
            continue
        whole += 1
        spec = req.get("response_format", {})
        if spec.get("type") == "regex":
            assert re.fullmatch(spec["regex"], text), f"{name}: {req['id']}: {text!r} !~ {spec['regex']}"
        elif "response_format" in req:
            value = json.loads(text)
            if spec["type"] == "json_schema":
                schema = spec["json_schema"]["schema"]
                jsonschema.validate(value, schema) if jsonschema else validate_subset(value, schema)
            else:
                assert isinstance(value, (dict, list)), f"{name}: {req['id']}: {text!r} is no JSON object"
        elif "regex" in req:
            assert re.fullmatch(req["regex"], text), f"{name}: {req['id']}: {text!r} !~ {req['regex']}"
        else:
            language = dict(EBNF)[req["ebnf"]]
            assert re.fullmatch(language, text), f"{name}: {req['id']}: {text!r} outside its grammar"
    assert whole >= len(reqs) // 2, f"{name}: only {whole} of {len(reqs)} outputs whole"
    return whole


def run(cmd, out):
    done = subprocess.run(cmd + ["--output", out], timeout=600, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    sys.stdout.write(done.stdout[-1200:])
    assert done.returncode == 0, f"exit {done.returncode}: {' '.join(cmd)}"
    return results_in_input_order(out, cmd)


def main():
    ap = argparse.ArgumentParser()
    for key in ("--deepinfer", "--mpirun", "--model", "--tokenizer", "--deploy"):
        ap.add_argument(key, required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--dspark", action="store_true")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--args", default="")
    args = ap.parse_args()
    reqs = requests(args.chat)
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in reqs)
        base = [args.deepinfer, "generate", "--model", args.model, "--tokenizer", args.tokenizer, "--input", inp]
        base += shlex.split(args.args)
        plain_path = os.path.join(tmp, "plain.jsonl")
        plain = run(base, plain_path)
        whole = check_valid(reqs, plain, "1 rank")
        print(f"ok: 1 rank: {whole} of {len(reqs)} outputs whole and valid, the others cut by max_new_tokens")
        mpirun = shlex.split(args.mpirun) + ["-np", str(args.ranks)]
        runs = {
            f"{args.deploy}": mpirun + base + ["--deploy", args.deploy],
            "1 rank, --nextn 3 (controlled drafter)": base + ["--nextn", "3", "--draft-reference", plain_path,
                                                              "--draft-acceptance", "0.7"],
            f"{args.deploy}, --nextn 4 --spec-varlen": mpirun + base + ["--deploy", args.deploy, "--nextn", "4",
                                                                        "--spec-varlen", "--draft-reference", plain_path],
        }
        if args.dspark:
            runs["1 rank, --draft dspark"] = base + ["--nextn", "4", "--draft", "dspark"]
        for name, cmd in runs.items():
            out = run(cmd, os.path.join(tmp, "out.jsonl"))
            check_valid(reqs, out, name)
            if "cuda" not in args.args:  # on the CPU every run gives the plain one-rank outputs
                for a, b in zip(out, plain):
                    assert a["output_token_ids"] == b["output_token_ids"], f"{name}: {a['id']} differs:\n{a}\n{b}"
            print(f"ok: {name}: outputs valid{'' if 'cuda' in args.args else ' and equal to the plain run'}")


if __name__ == "__main__":
    main()

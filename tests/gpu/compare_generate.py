#!/usr/bin/env python3
"""compare_generate.py REFERENCE.jsonl OTHER.jsonl [LABEL] [--identical]

Compares two `deepinfer generate` outputs request by request: how many leading output tokens agree, and
the overall share. Greedy decoding in bf16 (CUDA) and fp32 (CPU) agree until two candidates are close
enough for bf16 rounding to swap them; after that the continuations differ. Exits 1 only if the files do not
describe the same requests, or, with --identical (two runs that must give the same bits), if any output differs.
"""
import json
import sys

must_match = "--identical" in sys.argv
args = [a for a in sys.argv[1:] if a != "--identical"]
ref = [json.loads(line) for line in open(args[0])]
other = [json.loads(line) for line in open(args[1])]
# generate's default output is in completion order: with unique ids, compare request by request.
key = lambda r: json.dumps(r["id"], sort_keys=True)
if len({key(r) for r in ref}) == len(ref) and len({key(r) for r in other}) == len(other):
    ref, other = sorted(ref, key=key), sorted(other, key=key)
label = args[2] if len(args) > 2 else args[1]
if [r["id"] for r in ref] != [r["id"] for r in other]:
    print(f"{label}: the outputs describe different requests")
    sys.exit(1)
total = agree = identical = 0
prefixes = []
for a, b in zip(ref, other):
    x, y = a["output_token_ids"], b["output_token_ids"]
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    prefixes.append(n)
    total += len(x)
    agree += n
    identical += x == y
print(f"{label}: {identical}/{len(ref)} requests identical; {agree}/{total} reference tokens before the first "
      f"divergence ({100.0 * agree / max(total, 1):.1f}%); common prefix per request: {prefixes}")
if must_match and identical != len(ref):
    print(f"{label}: expected every output identical")
    sys.exit(1)

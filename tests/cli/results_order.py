"""generate's results in the order of its input's requests.

A durable output (generate's default) holds its results in completion order; the checks compare them request by
request. Runs with --ordered-output, and inputs whose ids repeat, are taken in file order as they are written.
"""
import json


def results_in_input_order(out, cmd):
    lines = [json.loads(line) for line in open(out)]
    if "--ordered-output" in cmd:
        return lines
    inp = cmd[cmd.index("--input") + 1]
    requests = [json.loads(line) for line in open(inp) if line.strip()]
    keys = [json.dumps(r.get("id", k), sort_keys=True) for k, r in enumerate(requests)]
    assert len(set(keys)) == len(keys), "a durable run's input has unique ids"
    by_key = {json.dumps(r["id"], sort_keys=True): r for r in lines}
    assert len(by_key) == len(lines) == len(keys), f"{out}: {len(lines)} results for {len(keys)} requests"
    return [by_key[k] for k in keys]

#!/usr/bin/env python3
"""generate --stream against generate's own results: runs the command given after `--` with --output and
--stream added, then checks, for every request, that the stream's token_ids joined are its output ids, that its
deltas joined are its content / reasoning_content / tool_calls, that one finish line follows its tokens with its
finish reason, and that the file ends with {"done": true}.

    check_stream.py SCRATCH_DIR -- deepinfer generate --model ... --input ...   (mpirun ... may lead)
"""
import json
import os
import subprocess
import sys


def main():
    scratch, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    out, stream = os.path.join(scratch, "stream-results.jsonl"), os.path.join(scratch, "stream-events.jsonl")
    subprocess.run(cmd + ["--output", out, "--stream", stream], check=True, timeout=280)
    results = [json.loads(l) for l in open(out)]
    events = [json.loads(l) for l in open(stream)]
    assert events[-1] == {"done": True}, f"the stream does not end with done: {events[-1]}"
    seen = {}
    for e in events[:-1]:
        s = seen.setdefault(json.dumps(e["id"]), {"ids": [], "content": "", "reasoning": "", "calls": {},
                                                  "finish": None})
        assert s["finish"] is None, f"request {e['id']}: an event after its finish line"
        if "finish_reason" in e:
            s["finish"] = e["finish_reason"]
        else:
            s["ids"] += e["token_ids"]
        d = e.get("delta") or {}
        s["content"] += d.get("content", "")
        s["reasoning"] += d.get("reasoning_content", "")
        for call in d.get("tool_calls", []):
            c = s["calls"].setdefault(call["index"], {"name": None, "arguments": ""})
            c["name"] = call["function"].get("name", c["name"])
            c["arguments"] += call["function"]["arguments"]
    assert len(seen) == len(results), f"{len(seen)} requests streamed, {len(results)} results"
    for r in results:
        s = seen[json.dumps(r["id"])]
        assert s["ids"] == r["output_token_ids"], f"request {r['id']}: streamed ids differ"
        assert s["finish"] == r["finish_reason"], f"request {r['id']}: finish {s['finish']} vs {r['finish_reason']}"
        if "content" in r:
            assert s["content"] == r["content"], f"request {r['id']}: content {s['content']!r} vs {r['content']!r}"
            assert s["reasoning"] == (r["reasoning_content"] or ""), f"request {r['id']}: reasoning differs"
            calls = [{"name": c["name"], "arguments": c["arguments"]} for _, c in sorted(s["calls"].items())]
            want = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                    for c in r.get("tool_calls", [])]
            assert calls == want, f"request {r['id']}: tool calls {calls} vs {want}"
    print(f"ok: {len(results)} requests, {len(events) - 1} stream lines equal to the results")


if __name__ == "__main__":
    main()

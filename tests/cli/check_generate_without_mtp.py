#!/usr/bin/env python3
"""check_generate_without_mtp.py FIXTURE_DIR DEEPINFER [ARGS...]

A DeepSeek-V3 checkpoint as transformers saves it: config.json keeps num_nextn_predict_layers = 1 but the MTP
layer's tensors (model.layers.<num_hidden_layers>.*) are gone. Writes such a copy of FIXTURE_DIR (shards and
index rewritten), then checks that `DEEPINFER generate` loads it, says that speculative decoding is unavailable,
and still produces the fixture's greedy continuations (check_generate.py).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def strip_shard(src, dst, drop):
    with open(src, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        data = f.read()
    kept, blobs, offset = {}, [], 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0] if kv[0] != "__metadata__" else -1):
        if name == "__metadata__":
            kept[name] = info
            continue
        if drop(name):
            continue
        begin, end = info["data_offsets"]
        blobs.append(data[begin:end])
        kept[name] = dict(info, data_offsets=[offset, offset + end - begin])
        offset += end - begin
    text = json.dumps(kept).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return [n for n in kept if n != "__metadata__"]


def main():
    fixture, command = sys.argv[1], sys.argv[2:]
    config = json.load(open(os.path.join(fixture, "config.json")))
    assert config["num_nextn_predict_layers"] >= 1, "the fixture must declare an MTP layer"
    prefix = "model.layers.%d." % config["num_hidden_layers"]
    with tempfile.TemporaryDirectory() as tmp:
        stripped = os.path.join(tmp, "no-mtp")
        os.mkdir(stripped)
        for name in ("config.json", "reference.json"):
            with open(os.path.join(fixture, name)) as f, open(os.path.join(stripped, name), "w") as g:
                g.write(f.read())
        index_path = os.path.join(fixture, "model.safetensors.index.json")
        shards = sorted({v for v in json.load(open(index_path))["weight_map"].values()}) \
            if os.path.exists(index_path) else ["model.safetensors"]
        weight_map = {}
        for shard in shards:
            for name in strip_shard(os.path.join(fixture, shard), os.path.join(stripped, shard),
                                    lambda n: n.startswith(prefix)):
                weight_map[name] = shard
        assert not any(n.startswith(prefix) for n in weight_map)
        if os.path.exists(index_path):
            json.dump({"metadata": {}, "weight_map": weight_map},
                      open(os.path.join(stripped, "model.safetensors.index.json"), "w"))
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_generate.py")
        run = subprocess.run([sys.executable, check, stripped, "--"] + command + ["--model", stripped],
                             capture_output=True, text=True, timeout=300)
        sys.stdout.write(run.stdout)
        sys.stderr.write(run.stderr)
        if run.returncode != 0:
            sys.exit("FAIL: generate on the checkpoint without MTP tensors")
        if "no tensors of the MTP layers" not in run.stdout + run.stderr:
            sys.exit("FAIL: the missing MTP layers were not reported")
        print("ok: %d tensors without %s*, generation matches the fixture" % (len(weight_map), prefix))


if __name__ == "__main__":
    main()

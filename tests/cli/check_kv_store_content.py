#!/usr/bin/env python3
"""check_kv_store_content.py --deepinfer BIN --model DIR [--mpirun MPIRUN --deploy D --ranks N]

The --kv-store key names the model's content, not its path (issue #52). On a copy of the model: a run writes the
store and a second run reads it (hits, same outputs); then the copy's config.json is edited, and then a tensor of a
shard rewritten in place (same size, modification time restored): after each change the run with the store gives
exactly the cache-off run's outputs of the changed model (no stale block served) and the change did alter outputs."""
import argparse
import json
import os
import random
import re
import shlex
import shutil
import struct
import subprocess
import tempfile
from results_order import results_in_input_order


def run(cmd, out):
    proc = subprocess.run(cmd + ["--output", out], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    text = proc.stdout + proc.stderr
    from_store = sum(int(n) for n in re.findall(r"prefix cache hits \d+ prompt tokens \((\d+) from --kv-store", text))
    return results_in_input_order(out, cmd), from_store


def negate_tensor(shard, name):
    """Flips the sign of every value of `name` in place; the file keeps its size and modification time."""
    st = os.stat(shard)
    with open(shard, "r+b") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        entry = json.loads(f.read(length))[name]
        width = {"BF16": 2, "F16": 2, "F32": 4}[entry["dtype"]]
        begin, end = entry["data_offsets"]
        f.seek(8 + length + begin)
        data = bytearray(f.read(end - begin))
        for i in range(width - 1, len(data), width):  # the sign bit is in each value's last (little-endian) byte
            data[i] ^= 0x80
        f.seek(8 + length + begin)
        f.write(data)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deepinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--mpirun", default="")
    ap.add_argument("--deploy", default="")
    ap.add_argument("--ranks", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model")
        shutil.copytree(args.model, model)  # copy2: modification times kept
        config_path = os.path.join(model, "config.json")
        config = json.load(open(config_path))
        vocab = config["vocab_size"]
        rng = random.Random(11)
        doc = [rng.randrange(3, vocab) for _ in range(96)]
        reqs = [{"id": f"q{i}", "prompt_token_ids": doc + [rng.randrange(3, vocab) for _ in range(n)],
                 "max_new_tokens": 8} for i, n in enumerate((3, 17, 40))]
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in reqs)
        launch = [args.deepinfer, "generate", "--model", model, "--input", inp]
        if args.deploy:
            launch = shlex.split(args.mpirun) + ["-np", str(args.ranks)] + launch + ["--deploy", args.deploy]
        store = ["--kv-store", os.path.join(tmp, "store")]
        out = lambda name: os.path.join(tmp, name + ".jsonl")  # noqa: E731

        plain, _ = run(launch, out("plain"))
        written, _ = run(launch + store, out("written"))
        reread, from_store = run(launch + store, out("reread"))
        assert written == plain and reread == plain, "--kv-store changed an output of the unchanged model"
        assert from_store > 0, "the unchanged model's second run read nothing from the store"

        edited = dict(config, routed_scaling_factor=0.25)
        changes = [("config.json edited (routed_scaling_factor)",
                    lambda: json.dump(edited, open(config_path, "w"), indent=1))]
        index = json.load(open(os.path.join(model, "model.safetensors.index.json")))["weight_map"]
        tensor = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"
        changes.append((f"{tensor} rewritten in place (size and modification time kept)",
                        lambda: negate_tensor(os.path.join(model, index[tensor]), tensor)))
        before = plain
        for what, change in changes:
            change()
            changed_plain, _ = run(launch, out("changed-plain"))
            assert changed_plain != before, f"{what}: the outputs did not change, so the test shows nothing"
            stored, from_store = run(launch + store, out("changed-store"))
            assert stored == changed_plain, f"{what}: --kv-store served blocks of the model before the change"
            assert from_store == 0, f"{what}: {from_store} prompt tokens read from blocks of the model before it"
            again, from_store = run(launch + store, out("changed-again"))
            assert again == changed_plain and from_store > 0, f"{what}: the changed model's own blocks are not hit"
            print(f"{what}: the store's old blocks missed, outputs == the cache-off run; its new blocks hit")
            before = changed_plain


if __name__ == "__main__":
    main()

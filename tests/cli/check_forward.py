#!/usr/bin/env python3
"""check_forward.py FIXTURE_DIR PROMPT_INDEX|all [--tolerance T | --bf16-yardstick FACTOR] -- COMMAND...

Runs `COMMAND --tokens <prompt> --output <tmp>.h5` (a `deepinfer forward` command line) for one fixture prompt
or all of them, reads each HDF5 file with h5py, and checks dataset 'logits' against transformers' fp32 logits.
  --tolerance T (default 1e-4, the CPU backend's bound): every prompt's relative L2 error < T.
  --bf16-yardstick F: for bf16 backends. The mean error over the prompts must stay below F times the mean
    error of transformers' own bf16 inference on the same prompts (tests/fixtures/bf16_yardstick.json) plus
    5e-3. A mean, because in bf16 an expert choice near a tie flips for single tokens, in transformers as in
    this engine but not on the same prompts.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np


def read_safetensors(path, name):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        info = header[name]
        begin, end = info["data_offsets"]
        f.seek(8 + n + begin)
        assert info["dtype"] == "F32"
        return np.frombuffer(f.read(end - begin), dtype="<f4").reshape(info["shape"])


def error_of(fixture, index, command, tmp):
    prompt = json.load(open(os.path.join(fixture, "reference.json")))["prompts"][index]
    out = os.path.join(tmp, f"logits{index}.h5")
    subprocess.run(command + ["--tokens", ",".join(map(str, prompt)), "--output", out], check=True, timeout=300)
    with h5py.File(out) as f:
        logits = f["logits"][()]
    want = read_safetensors(os.path.join(fixture, "reference.safetensors"), f"logits_{index}")
    assert logits.shape == want.shape, (logits.shape, want.shape)
    assert logits.dtype == np.float32
    return float(np.linalg.norm(logits.astype(np.float64) - want) / np.linalg.norm(want))


def main():
    sep = sys.argv.index("--")
    options, command = sys.argv[1:sep], sys.argv[sep + 1:]
    fixture = options[0].rstrip("/")
    name = os.path.basename(fixture)
    count = len(json.load(open(os.path.join(fixture, "reference.json")))["prompts"])
    indices = list(range(count)) if options[1] == "all" else [int(options[1])]
    with tempfile.TemporaryDirectory() as tmp:
        errors = [error_of(fixture, i, command, tmp) for i in indices]
    if "--bf16-yardstick" in options:
        factor = float(options[options.index("--bf16-yardstick") + 1])
        yard = json.load(open(os.path.join(os.path.dirname(fixture), "bf16_yardstick.json")))["errors"][name]
        mean, yard_mean = float(np.mean(errors)), float(np.mean([yard[i] for i in indices]))
        bound = factor * yard_mean + 5e-3
        print(f"{name}: relative errors {', '.join(f'{e:.3e}' for e in errors)}; mean {mean:.3e} vs transformers bf16 "
              f"mean {yard_mean:.3e} (bound {bound:.3e})")
        sys.exit(0 if mean < bound else 1)
    tolerance = float(options[options.index("--tolerance") + 1]) if "--tolerance" in options else 1e-4
    for i, e in zip(indices, errors):
        print(f"{name} prompt {i}: relative error {e:.3e} (bound {tolerance:g})")
    sys.exit(0 if max(errors) < tolerance else 1)


if __name__ == "__main__":
    main()

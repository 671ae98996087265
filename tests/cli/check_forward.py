#!/usr/bin/env python3
"""check_forward.py FIXTURE_DIR PROMPT_INDEX [--tolerance T | --bf16-yardstick FACTOR] -- COMMAND...

Runs `COMMAND --tokens <prompt> --output <tmp>.h5` (a `deepinfer forward` command line), reads the HDF5 file
with h5py, and checks dataset 'logits' against transformers' logits for that prompt (relative error < T,
default 1e-4: the CPU backend's bound). With --bf16-yardstick F the bound is F times the error of transformers'
own bf16 inference on that prompt (tests/fixtures/bf16_yardstick.json), plus 5e-3: the bound for bf16 backends.
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


def main():
    sep = sys.argv.index("--")
    fixture, index = sys.argv[1], int(sys.argv[2])
    tolerance = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv[:sep] else 1e-4
    if "--bf16-yardstick" in sys.argv[:sep]:
        factor = float(sys.argv[sys.argv.index("--bf16-yardstick") + 1])
        yardstick = json.load(open(os.path.join(os.path.dirname(fixture.rstrip("/")), "bf16_yardstick.json")))
        tolerance = factor * yardstick["errors"][os.path.basename(fixture.rstrip("/"))][index] + 5e-3
    command = sys.argv[sep + 1:]
    prompt = json.load(open(os.path.join(fixture, "reference.json")))["prompts"][index]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.h5")
        subprocess.run(command + ["--tokens", ",".join(map(str, prompt)), "--output", out], check=True, timeout=300)
        with h5py.File(out) as f:
            logits = f["logits"][()]
    want = read_safetensors(os.path.join(fixture, "reference.safetensors"), f"logits_{index}")
    assert logits.shape == want.shape, (logits.shape, want.shape)
    assert logits.dtype == np.float32
    err = np.linalg.norm(logits.astype(np.float64) - want) / np.linalg.norm(want)
    print(f"{os.path.basename(fixture)} prompt {index}: logits {logits.shape} relative error {err:.3e} (bound {tolerance:g})")
    sys.exit(0 if err < tolerance else 1)


if __name__ == "__main__":
    main()

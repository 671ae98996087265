#!/usr/bin/env python3
"""check_sweep.py PHASE ROWS COMPLETE -- COMMAND...

Runs `COMMAND --output <tmp>.h5` (a `deepinfer sweep` command line; with COMPLETE 0 it is expected to fail part
way), then reads the file with h5py: PHASE/points must hold ROWS rows with the published columns, PHASE/ranks
one row per rank and point, and the root attribute `complete` must equal COMPLETE.
"""
import os
import subprocess
import sys
import tempfile

import h5py

phase, rows, complete = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
command = sys.argv[sys.argv.index("--") + 1:]
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "sweep.h5")
    rc = subprocess.run(command + ["--output", out], timeout=240).returncode  # below ctest's 300 s: a hang names itself
    assert (rc == 0) == (complete == 1), f"exit code {rc} with complete={complete} expected"
    with h5py.File(out) as f:
        points = f[f"{phase}/points"][()]
        ranks = f[f"{phase}/ranks"][()]
        attrs = dict(f.attrs)
names = set(points.dtype.names)
need = {"step_time_ms", "step_time_p90_ms", "tokens_per_s_per_gpu", "expert_load_imbalance"}
if phase == "decode":
    need |= {"tokens_per_s_per_user", "tokens_per_s_per_gpu_converted", "tokens_per_s_per_user_converted"}
assert need <= names, f"missing columns {need - names}"
assert len(points) == rows, f"{len(points)} rows, expected {rows}"
assert attrs["complete"] == complete, attrs["complete"]
for key in ("git_commit", "deployment", "versions", "hosts", "date", "configuration", "slurm_job_id"):
    assert key in attrs, f"missing attribute {key}"
assert (points["step_time_ms"] > 0).all() and (points["tokens_per_s_per_gpu"] > 0).all()
assert len(ranks) == rows * points["num_ranks"][0], (len(ranks), rows)
if "tokens_per_step_measured" in names:  # sweep decode --spec-measured: the speculative run beside the conversion
    measured, converted = points["tokens_per_step_measured"], points["tokens_per_step"]
    assert (points["spec_step_time_ms"] > 0).all() and (measured > 1).all(), measured
    # The controlled drafter's drafts are each right with mean probability `acceptance`, independently: a step
    # yields 1 + sum_k acceptance^k tokens on average, fewer than the conversion's 1 + nextn x acceptance.
    assert (measured < converted).all(), (measured, converted)
    print(f"measured tokens a step {list(measured.round(2))} beside the converted {converted[0]:.2f}")
print(f"{phase}: {len(points)} rows, columns {sorted(names)}, complete={attrs['complete']}, "
      f"deployment {attrs['deployment'].decode()}, {len(ranks)} per-rank rows")

#!/usr/bin/env python3
"""check_rank_slice.py PHASE POINT NP DEPLOY ROUTING -- MPIRUN... DEEPINFER MODEL-ARGS...

A rank slice (`bench --rank-slice`) does the MoE work of the rank it stands for. Runs the real deployment's sweep
(`MPIRUN -np NP DEEPINFER sweep PHASE MODEL-ARGS --deploy DEPLOY --points POINT --routing ROUTING`), then, for
every world rank of the swept role, `DEEPINFER bench PHASE --rank-slice DEPLOY --slice-rank R` at the same point
and routing, alone; each slice must report exactly the (token, expert) pairs the real rank's slots served, per
MoE layer and expert, and the token rows it received (the first also written as HDF5: its `rank_slice`
attribute and exchange columns). Decode points are requests a rank (--context 16), prefill
points tokens a step (one prompt of POINT tokens). Every slice is floored from what its experts served.
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py

phase, point, np_, deploy, routing = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
rest = sys.argv[sys.argv.index("--") + 1:]
di_at = next(i for i, a in enumerate(rest) if os.path.basename(a) == "deepinfer")
mpirun, di, model = rest[:di_at], rest[di_at], rest[di_at + 1:]
common = ["--routing", routing, "--routing-seed", "17"]
shape = ["--context", "16"] if phase == "decode" else ["--prompt-len", point]
with tempfile.TemporaryDirectory() as tmp:
    real = os.path.join(tmp, "real.h5")
    subprocess.run(mpirun + ["-np", np_, di, "sweep", phase] + model + common + shape +
                   ["--deploy", deploy, "--points", point, "--output", real], check=True, timeout=600)
    with h5py.File(real) as f:
        served = f[f"{phase}/served"][()]
        ranks = f[f"{phase}/ranks"][()]
    assert len(ranks) > 0, "the sweep has no per-rank rows"
    checked = 0
    for row in ranks:
        r = int(row["world_rank"])
        out = os.path.join(tmp, f"slice-{r}.jsonl")
        size = ["--batch", point] if phase == "decode" else ["--chunk", point]
        subprocess.run([di, "bench", phase] + model + common + shape + size +
                       ["--rank-slice", deploy, "--slice-rank", str(r), "--output", out], check=True, timeout=300)
        line = json.loads(open(out).readline())
        got = line["rank_slice"]
        # Floored from what its experts served, V2/V3 as V4.1 (bench/deepseek_floor.h, bench/v41_floor.h).
        assert line["floor_bytes_ms"] > 0 and line["floor_flops_ms"] > 0 and line["floor_ms"] == max(
            line["floor_bytes_ms"], line["floor_flops_ms"]), line
        experts = got["num_experts"]
        mine = {(i // experts, i % experts): n for i, n in enumerate(got["served_pairs"]) if n}
        want = {(int(s["moe_layer"]), int(s["expert"])): int(s["pairs"]) for s in served if s["world_rank"] == r}
        assert want, f"rank {r} served nothing: the check would be empty"
        assert mine == want, f"rank {r}: the slice served {sum(mine.values())} pairs over {len(mine)} (layer, expert), " \
                             f"the real rank {sum(want.values())} over {len(want)}; first differences " \
                             f"{[k for k in sorted(set(mine) | set(want)) if mine.get(k) != want.get(k)][:5]}"
        assert got["tokens_received"] == int(row["routed_tokens_received"]), \
            (r, got["tokens_received"], int(row["routed_tokens_received"]))
        if checked == 0:  # the HDF5 form of the same slice: its attribute and the exchange columns
            h5 = os.path.join(tmp, f"slice-{r}.h5")
            subprocess.run([di, "bench", phase] + model + common + shape + size +
                           ["--rank-slice", deploy, "--slice-rank", str(r), "--output", h5], check=True, timeout=300)
            with h5py.File(h5) as f:
                about = json.loads(f.attrs["rank_slice"])
                rows = f[f"{phase}/points"][()]
            assert about["world_rank"] == r and about["routing"] == routing, about
            assert int(rows["slice_rows_received"][0]) == got["tokens_received"], rows
            assert int(rows["slice_dispatch_bytes"][0]) == got["dispatch_bytes"], rows
        checked += 1
        print(f"rank {r} ({got['role']} {got['rank_in_ep_group']} of EP {got['ep_size']}): {sum(mine.values())} pairs "
              f"over {len(mine)} (layer, expert), {got['tokens_received']} rows received, as the real run")
print(f"{deploy} {phase} point {point}, routing {routing}: {checked} rank slices equal to the real ranks")

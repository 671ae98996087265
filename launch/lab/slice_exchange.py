"""The exchange a rank slice's real rank would make, charged from DeepEP's published rates (a slice counts it; one GPU
cannot measure it), and the helpers the curve scripts share (v41_curves.py, v3_curves.py).

The communication model (bandwidth only, no fixed latency, so a lower bound on the exchange's time):
  decode:  DeepEP's low-latency kernels, H800 + ConnectX-7 400 Gb/s, 128 tokens x top-8 x hidden 7168, FP8
           dispatch / bf16 combine (github.com/deepseek-ai/DeepEP docs/legacy.md): the rate each latency implies;
  prefill: DeepEP's normal kernels: 153 / 158 GB/s within a node (EP <= 8, NVLink), 51 / 50 GB/s across (RDMA).
Bytes charged per exchange: each token record sent to another rank as DeepEP sends it (hidden FP8 codes + an fp32
scale per 128), each partial sum returned as bf16, from the slice's counts (`tokens_sent`, `combine_bytes`).
"""
import json
import math
import os

import h5py
import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# DeepEP low-latency: EP -> (dispatch us, combine us) at 128 tokens x 8 x 7168 (docs/legacy.md).
LL_LATENCY_US = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369), 256: (194, 360)}
LL_REFERENCE_BYTES = 128 * 8 * (7168 + 7168 // 128 * 4)  # FP8 records with their scales
NORMAL_INTRANODE_GBS = (153, 158)
NORMAL_INTERNODE_GBS = (51, 50)


def comm_rates(phase, ep):
    """(dispatch, combine) GB/s of the model for an EP group of `ep` ranks."""
    if phase == "prefill":
        return NORMAL_INTRANODE_GBS if ep <= 8 else NORMAL_INTERNODE_GBS
    key = min(LL_LATENCY_US, key=lambda e: abs(math.log(e) - math.log(max(ep, 1))))
    d_us, c_us = LL_LATENCY_US[key]
    return LL_REFERENCE_BYTES / d_us / 1e3, 2 * 128 * 8 * 7168 / c_us / 1e3


def comm_model_description():
    return {"decode": "DeepEP low-latency on H800 + CX7 400 Gb/s (docs/legacy.md): rate = 128 x 8 x 7168 FP8 bytes / "
                      "dispatch latency, 2x that / combine latency, the nearest EP of the table",
            "prefill": "DeepEP normal: 153/158 GB/s intranode (EP <= 8), 51/50 GB/s internode",
            "bytes": "dispatch: records to other ranks x (hidden + hidden/128 x 4); combine: rows returned x 2 hidden",
            "latency": "none (bandwidth only: a lower bound)", "table_us": LL_LATENCY_US}


def load(paths):
    rows = []
    for path in paths:
        for line in open(path):
            if line.strip():
                row = json.loads(line)
                row["source"] = os.path.basename(path)
                rows.append(row)
    return rows


def with_comm(row, hidden, moe_layers):
    """A slice's point with its modelled exchange: serial (compute + comm) and overlapped (DeepSeek overlaps the
    exchange with a second micro-batch's compute: max of the two) step times. `moe_layers`: of the run, where the
    slice does not record them (older files)."""
    s = row["rank_slice"]
    steps = s["exchanges"] / s.get("moe_layers", moe_layers)  # warm-up and timed steps of the point
    sent = s["tokens_sent"] / steps
    returned = s["combine_bytes"] / (hidden * 4) / steps  # the host counts returned rows in fp32
    d_gbs, c_gbs = comm_rates(row["phase"], s["ep_size"])
    dispatch_bytes = sent * (hidden + hidden // 128 * 4)
    combine_bytes = returned * 2 * hidden
    comm_ms = (dispatch_bytes / (d_gbs * 1e9) + combine_bytes / (c_gbs * 1e9)) * 1e3
    compute = row["median_ms"]
    tokens = row["tokens_per_step"]
    return dict(phase=row["phase"], batch=row["batch"], context=row["context"], tokens_per_step=tokens, compute_ms=compute,
                comm_ms=comm_ms, step_serial_ms=compute + comm_ms, step_overlap_ms=max(compute, comm_ms),
                floor_ms=row["floor_ms"], floor_bytes_ms=row.get("floor_bytes_ms", -1),
                floor_flops_ms=row.get("floor_flops_ms", -1), dispatch_bytes_per_step=dispatch_bytes,
                combine_bytes_per_step=combine_bytes, ep_size=s["ep_size"], deploy=s["deploy"],
                world_rank=s["world_rank"], routing=s["routing"], source=row["source"])


def write_table(group, points, attrs):
    for key in points[0]:
        values = [p[key] for p in points]
        group.create_dataset(key, data=np.array(values, dtype=h5py.string_dtype() if isinstance(values[0], str) else None))
    for key, value in attrs.items():
        group.attrs[key] = value if isinstance(value, (int, float, str)) else json.dumps(value)


def finish_plot(fig, ax, xlabel, ylabel, title, out):
    """Log-log axes, labels, legend and grid; written to `out`."""
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel(xlabel), ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7), ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout(), fig.savefig(out, dpi=120), plt.close(fig)

#!/usr/bin/env python3
"""v41_curves.py --out DIR --decode F.jsonl [...] --prefill F.jsonl [...] [--scaling NAME=F.jsonl ...]

DeepSeek-V4.1-Flash's per-rank curves from rank slices (`deepinfer bench decode|prefill --rank-slice ... --output
F.jsonl`: one H200 running what one rank of a deployment runs), with the communication the real rank would make
charged from a published table (the slice counts it; one GPU cannot measure it), beside DeepSeek's official SM100
points (results/official.json) and those points scaled to the H200:
  DIR/v41-curves.h5     /decode and /prefill: one dataset a column, the slices' and the model's attributes;
  DIR/v41-decode.png    tokens/s/GPU against tokens/s/user;
  DIR/v41-prefill.png   tokens/s/GPU against step time;
  DIR/v41-scaling.png   and DIR/v41-scaling.h5: the per-GPU and whole-deployment throughput of 1P1D, 4P16D, 4P64D
                        and 64P64D, each from the slices of its decode and prefill EP sizes (--scaling
                        "4p16d:decode=F.jsonl", ...); a deployment whose rank does not fit one H200 is listed as such.
Columns: compute_ms (the slice's measured median step), comm_ms (the model below), step_serial_ms = compute + comm,
step_overlap_ms = max(compute, comm) (DeepSeek overlaps the exchange with a second micro-batch's compute).

The communication model (bandwidth only, no fixed latency, so a lower bound on the exchange's time):
  decode:  DeepEP's low-latency kernels, H800 + ConnectX-7 400 Gb/s, 128 tokens x top-8 x hidden 7168, FP8
           dispatch / bf16 combine (github.com/deepseek-ai/DeepEP docs/legacy.md): the rate each latency implies;
  prefill: DeepEP's normal kernels: 153 / 158 GB/s within a node (EP <= 8, NVLink), 51 / 50 GB/s across (RDMA).
Bytes charged per exchange: each token record sent to another rank as DeepEP sends it (hidden FP8 codes + an fp32
scale per 128), each partial sum returned as bf16, from the slice's counts (`tokens_sent`, `combine_bytes`).
Needs h5py, numpy and matplotlib (Debian: python3-h5py, python3-matplotlib).
"""
import argparse
import json
import math
import os

import h5py
import numpy as np
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HIDDEN, MOE_LAYERS = 5120, 40  # V4.1-Flash: every layer is an MoE layer

# DeepEP low-latency: EP -> (dispatch us, combine us) at 128 tokens x 8 x 7168 (docs/legacy.md).
LL_LATENCY_US = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314), 128: (192, 369), 256: (194, 360)}
LL_REFERENCE_BYTES = 128 * 8 * (7168 + 7168 // 128 * 4)  # FP8 records with their scales
NORMAL_INTRANODE_GBS = (153, 158)
NORMAL_INTERNODE_GBS = (51, 50)

# Scaling the official SM100 points to the H200 (spec-sheet figures, stated on the plots): decode by HBM bandwidth,
# prefill by the dense FP8 tensor rate.
H200_HBM_TBS, SM100_HBM_TBS = 4.8, 8.0
H200_FP8_TFLOPS, SM100_FP8_TFLOPS = 1979, 4500
MTP_TOKENS_PER_STEP = 3.25  # the official curves' 1 + 3 x 0.75


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


def with_comm(row):
    s = row["rank_slice"]
    steps = s["exchanges"] / MOE_LAYERS  # warm-up and timed steps of the point
    sent = s["tokens_sent"] / steps
    returned = s["combine_bytes"] / (HIDDEN * 4) / steps  # the host counts returned rows in fp32
    d_gbs, c_gbs = comm_rates(row["phase"], s["ep_size"])
    dispatch_bytes = sent * (HIDDEN + HIDDEN // 128 * 4)
    combine_bytes = returned * 2 * HIDDEN
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


def decode_plot(points, official, out):
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for context in sorted({p["context"] for p in points}):
        pts = sorted((p for p in points if p["context"] == context), key=lambda p: p["batch"])
        user = [1e3 / p["step_overlap_ms"] for p in pts]
        gpu = [p["batch"] * 1e3 / p["step_overlap_ms"] for p in pts]
        ax.plot(user, gpu, "o-", label=f"H200 rank slice, context {context}: 1 token a step (measured + comm model)")
        for p, u, g in zip(pts, user, gpu):
            ax.annotate(str(p["batch"]), (u, g), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.plot([u * MTP_TOKENS_PER_STEP for u in user], [g * MTP_TOKENS_PER_STEP for g in gpu], "o:", alpha=0.5,
                label=f"same, x {MTP_TOKENS_PER_STEP} tokens a step if a 4-row verify step cost a 1-row step (upper bound)")
    ou = [p["tokens_per_s_per_user"] for p in official["decode"]]
    og = [p["tokens_per_s_per_gpu"] for p in official["decode"]]
    ax.plot(ou, og, "ks--", label="official SM100 (3.25 tokens a step)")
    ratio = H200_HBM_TBS / SM100_HBM_TBS
    ax.plot([u * ratio for u in ou], [g * ratio for g in og], "k^:",
            label=f"official scaled to the H200 by HBM bandwidth ({H200_HBM_TBS} / {SM100_HBM_TBS} TB/s = {ratio:.2f})")
    finish_plot(fig, ax, "tokens/s per user", "output tokens/s per GPU",
                "V4.1-Flash decode: a 4P+64D decode rank (EP 64) on one H200\n(point labels: requests per rank)", out)


def prefill_plot(points, official, out):
    fig, ax = plt.subplots(figsize=(8, 5.5))
    pts = sorted(points, key=lambda p: p["tokens_per_step"])
    ax.plot([p["step_overlap_ms"] for p in pts], [p["tokens_per_step"] * 1e3 / p["step_overlap_ms"] for p in pts], "o-",
            label="H200 rank slice (measured + comm model)")
    ax.plot([p["floor_ms"] for p in pts], [p["tokens_per_step"] * 1e3 / p["floor_ms"] for p in pts], "x:", alpha=0.6,
            label="its floor (bench/v41_floor.h)")
    for p in pts:
        ax.annotate(str(p["tokens_per_step"]), (p["step_overlap_ms"], p["tokens_per_step"] * 1e3 / p["step_overlap_ms"]),
                    fontsize=7, xytext=(3, 3), textcoords="offset points")
    ot = [p["step_time_ms"] for p in official["prefill"]]
    og = [p["tokens_per_s_per_gpu"] for p in official["prefill"]]
    ax.plot(ot, og, "ks--", label="official SM100")
    ratio = H200_FP8_TFLOPS / SM100_FP8_TFLOPS
    ax.plot([t / ratio for t in ot], [g * ratio for g in og], "k^:",
            label=f"official scaled to the H200 by dense FP8 rate ({H200_FP8_TFLOPS} / {SM100_FP8_TFLOPS} TFLOP/s = {ratio:.2f})")
    finish_plot(fig, ax, "step time (ms)", "input tokens/s per GPU",
                "V4.1-Flash prefill: a 4P+64D prefill rank (EP 4) on one H200\n(point labels: chunk tokens, prompts of "
                "4,096)", out)


# The scaling study's deployments: (prefill ranks, prefill EP, decode ranks, decode EP).
DEPLOYMENTS = {"1p1d": (1, 1, 1, 1), "4p16d": (4, 4, 16, 16), "4p64d": (4, 4, 64, 64), "64p64d": (64, 64, 64, 64)}
STYLES = {"1p1d": "x-", "4p16d": "o-", "4p64d": "s--", "64p64d": "^:"}  # distinct: roles of one EP size coincide


def scaling(slices, out_dir):
    """slices: {(phase, ep): [points]}. Writes v41-scaling.h5 and .png."""
    fig, (ax_d, ax_p) = plt.subplots(1, 2, figsize=(13, 5))
    with h5py.File(os.path.join(out_dir, "v41-scaling.h5"), "w") as f:
        f.attrs["communication_model"] = json.dumps(comm_model_description())
        f.attrs["what"] = ("per-GPU throughput of each role from one H200 rank slice of its EP size plus the modelled "
                           "exchange (overlapped with compute); whole-deployment = ranks x per-GPU")
        for name, (p_ranks, p_ep, d_ranks, d_ep) in DEPLOYMENTS.items():
            g = f.create_group(name)
            g.attrs["prefill_ranks"], g.attrs["prefill_ep"] = p_ranks, p_ep
            g.attrs["decode_ranks"], g.attrs["decode_ep"] = d_ranks, d_ep
            for phase, ranks, ep, ax in (("decode", d_ranks, d_ep, ax_d), ("prefill", p_ranks, p_ep, ax_p)):
                pts = slices.get((phase, ep))
                if not pts:
                    g.attrs[f"{phase}_missing"] = (f"no slice of EP {ep}: its rank holds {384 // ep} experts a layer "
                                                   f"({384 // ep * 40 * 18.87e6 / 2**30:.0f} GiB at FP4), more than one H200")
                    continue
                pts = sorted(pts, key=lambda p: (p["context"], p["tokens_per_step"]))
                per_gpu = [p["tokens_per_step"] * 1e3 / p["step_overlap_ms"] for p in pts]
                table = [dict(p, tokens_per_s_per_gpu=v, tokens_per_s_deployment=v * ranks) for p, v in zip(pts, per_gpu)]
                write_table(g.create_group(phase), table, {"ranks": ranks, "ep_size": ep})
                first_ctx = [p for p in table if p["context"] == table[0]["context"]]
                ax.plot([p["tokens_per_step"] for p in first_ctx], [p["tokens_per_s_deployment"] for p in first_ctx],
                        STYLES[name], label=f"{name}: {ranks} ranks of EP {ep} (context {first_ctx[0]['context']}; "
                                            f"one slice per EP size)")
        missing = [n for n, (pr, pe, dr, de) in DEPLOYMENTS.items()
                   if ("decode", de) not in slices or ("prefill", pe) not in slices]
    for ax, what in ((ax_d, "decode: output tokens/s of all decode ranks vs requests per rank"),
                     (ax_p, "prefill: input tokens/s of all prefill ranks vs chunk tokens per rank")):
        ax.set_xscale("log"), ax.set_yscale("log"), ax.grid(True, which="both", alpha=0.3)
        ax.set_title(what, fontsize=9), ax.legend(fontsize=7)
    ax_d.set_xlabel("requests per rank"), ax_p.set_xlabel("chunk tokens per rank"), ax_d.set_ylabel("tokens/s")
    fig.suptitle("DeepSeek-V4.1-Flash scaling, projected from H200 rank slices + DeepEP's published exchange rates"
                 + (f"; not on one H200: {', '.join(missing)} (a rank's experts exceed its memory)" if missing else ""),
                 fontsize=9)
    fig.tight_layout(), fig.savefig(os.path.join(out_dir, "v41-scaling.png"), dpi=120), plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--decode", nargs="+", required=True)
    ap.add_argument("--prefill", nargs="+", required=True)
    ap.add_argument("--scaling", nargs="*", default=[], help="more slices of other EP sizes: F.jsonl ...")
    ap.add_argument("--official", default=os.path.join(ROOT, "results", "official.json"))
    args = ap.parse_args()
    official = json.load(open(args.official))
    decode = [with_comm(r) for r in load(args.decode)]
    prefill = [with_comm(r) for r in load(args.prefill)]
    os.makedirs(args.out, exist_ok=True)
    with h5py.File(os.path.join(args.out, "v41-curves.h5"), "w") as f:
        f.attrs["communication_model"] = json.dumps(comm_model_description())
        f.attrs["official"] = json.dumps(official)
        f.attrs["h200_scaling"] = json.dumps({"decode_hbm_ratio": H200_HBM_TBS / SM100_HBM_TBS,
                                              "prefill_fp8_ratio": H200_FP8_TFLOPS / SM100_FP8_TFLOPS})
        for name, pts in (("decode", decode), ("prefill", prefill)):
            write_table(f.create_group(name), pts, {"slice": json.dumps({k: pts[0][k] for k in ("deploy", "world_rank", "ep_size", "routing")}),
                                                    "sources": json.dumps(sorted({p["source"] for p in pts}))})
    decode_plot(decode, official, os.path.join(args.out, "v41-decode.png"))
    prefill_plot(prefill, official, os.path.join(args.out, "v41-prefill.png"))
    slices = {}
    for p in decode + prefill + [with_comm(r) for r in load(args.scaling)]:
        slices.setdefault((p["phase"], p["ep_size"]), []).append(p)
    scaling(slices, args.out)
    for p in decode + prefill:
        print(f"{p['source']:>28} ep {p['ep_size']:>3} batch {p['batch']:>4} x {p['context']:>5}: compute {p['compute_ms']:8.2f} ms, "
              f"comm {p['comm_ms']:6.2f} ms, overlapped {p['tokens_per_step'] * 1e3 / p['step_overlap_ms']:9.1f} tok/s/GPU, "
              f"floor {p['floor_ms']:7.2f} ms ({p['floor_ms'] / p['compute_ms']:.3f} of compute)")


if __name__ == "__main__":
    main()

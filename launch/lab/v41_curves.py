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
Columns: compute_ms (the slice's measured median step), comm_ms (slice_exchange.py's model of the exchange),
step_serial_ms = compute + comm, step_overlap_ms = max(compute, comm) (DeepSeek overlaps the exchange with a second
micro-batch's compute).
Needs h5py, numpy and matplotlib (Debian: python3-h5py, python3-matplotlib).
"""
import argparse
import json
import os

import h5py

from slice_exchange import ROOT, comm_model_description, finish_plot, load, with_comm as slice_with_comm, write_table
import matplotlib.pyplot as plt  # noqa: E402 (after slice_exchange, which picks the Agg backend)

HIDDEN, MOE_LAYERS = 5120, 40  # V4.1-Flash: every layer is an MoE layer

# Scaling the official SM100 points to the H200 (spec-sheet figures, stated on the plots): decode by HBM bandwidth,
# prefill by the dense FP8 tensor rate.
H200_HBM_TBS, SM100_HBM_TBS = 4.8, 8.0
H200_FP8_TFLOPS, SM100_FP8_TFLOPS = 1979, 4500
MTP_TOKENS_PER_STEP = 3.25  # the official curves' 1 + 3 x 0.75


def with_comm(row):
    return slice_with_comm(row, HIDDEN, MOE_LAYERS)


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

#!/usr/bin/env python3
"""v3_curves.py --out DIR --decode F.jsonl [...] --prefill F.jsonl [...]

DeepSeek-V3/R1's per-GPU curves from rank slices (`deepinfer bench decode|prefill --model configs/models/deepseek-v3.json
--load-format dummy --device cuda --rank-slice DEPLOY --slice-rank R --routing uniform --output F.jsonl`: one GPU
running what one rank of a deployment runs), with the exchange the real rank would make charged from DeepEP's
published rates (slice_exchange.py), beside the published per-GPU figures of V3/R1 serving (and of Kimi-K2, the same
architecture with 384 experts), each with its hardware and source:
  DIR/v3-curves.h5    /decode and /prefill: one dataset a column; attributes: the published points, the comm model;
  DIR/v3-decode.png   output tokens/s per GPU against tokens/s per user, a curve per slice file, and its floor;
  DIR/v3-prefill.png  input tokens/s per GPU against step time.
Each point's step is the overlapped one, max(compute, exchange) (DeepSeek overlaps the exchange with a second
micro-batch). The targets of the V3 work are drawn too: decode >= 3,000 output tok/s/GPU at >= 20 tok/s per user,
prefill >= 9,000 input tok/s/GPU. The published figures are whole services (their own hardware, caches, MTP):
context for the curves, not like-for-like points.
Needs h5py, numpy and matplotlib (Debian: python3-h5py, python3-matplotlib).
"""
import argparse
import json
import os

import h5py

from slice_exchange import ROOT, comm_model_description, finish_plot, load, with_comm, write_table
import matplotlib.pyplot as plt  # noqa: E402 (after slice_exchange, which picks the Agg backend)

# Per GPU; tokens_per_s_per_user None where the source gives none.
PUBLISHED = [
    {"what": "DeepSeek's V3/R1 service (MTP on)", "hardware": "H800", "phase": "decode", "tokens_per_s_per_gpu": 14800 / 8,
     "tokens_per_s_per_user": 21, "figure": "14.8k output tok/s a node of 8 at 20-22 tok/s per user",
     "source": "github.com/deepseek-ai/open-infra-index, Day 6 (Mar 2025)"},
    {"what": "DeepSeek's V3/R1 service", "hardware": "H800", "phase": "prefill", "tokens_per_s_per_gpu": 73700 / 8,
     "tokens_per_s_per_user": None, "figure": "73.7k input tok/s a node of 8, cache hits included",
     "source": "github.com/deepseek-ai/open-infra-index, Day 6 (Mar 2025)"},
    {"what": "SGLang, V3, 96 GPUs, PD + EP", "hardware": "H100", "phase": "decode", "tokens_per_s_per_gpu": 22300 / 8,
     "tokens_per_s_per_user": None, "figure": "22.3k output tok/s a node of 8, 2,000-token inputs",
     "source": "lmsys.org/blog/2025-05-05-large-scale-ep"},
    {"what": "SGLang, V3, 96 GPUs, PD + EP", "hardware": "H100", "phase": "prefill", "tokens_per_s_per_gpu": 52300 / 8,
     "tokens_per_s_per_user": None, "figure": "52.3k input tok/s a node of 8", "source": "lmsys.org/blog/2025-05-05-large-scale-ep"},
    {"what": "SGLang, Kimi-K2 (384 experts), 128 GPUs, PD + EP", "hardware": "H200", "phase": "decode",
     "tokens_per_s_per_gpu": 3000, "tokens_per_s_per_user": None, "figure": "about 3.0k output tok/s per GPU",
     "source": "lmsys.org/blog/2025-07-20-k2-large-scale-ep"},
    {"what": "SGLang, Kimi-K2 (384 experts), 128 GPUs, PD + EP", "hardware": "H200", "phase": "prefill",
     "tokens_per_s_per_gpu": 7000, "tokens_per_s_per_user": None, "figure": "about 7.0k input tok/s per GPU",
     "source": "lmsys.org/blog/2025-07-20-k2-large-scale-ep"},
]
TARGETS = {"decode": {"tokens_per_s_per_gpu": 3000, "tokens_per_s_per_user": 20},
           "prefill": {"tokens_per_s_per_gpu": 9000, "chunk_tokens": 4096}}


def model_shape(row):
    """hidden size and MoE layers of the slice's model (its config, as bench recorded the path)."""
    path = row["model"]
    for candidate in (path, os.path.join(ROOT, path)):
        if os.path.exists(candidate):
            config = json.load(open(os.path.join(candidate, "config.json") if os.path.isdir(candidate) else candidate))
            return config["hidden_size"], config["num_hidden_layers"] - config.get("first_k_dense_replace", 0)
    raise SystemExit(f"{row['source']}: the model's config {path} is not here (run from the repository root)")


def points(paths):
    out = []
    for row in load(paths):
        p = with_comm(row, *model_shape(row))
        per_row = p["tokens_per_step"] / p["batch"] if p["phase"] == "decode" else 1
        p["tokens_per_s_per_gpu"] = p["tokens_per_step"] * 1e3 / p["step_overlap_ms"]
        p["tokens_per_s_per_user"] = per_row * 1e3 / p["step_overlap_ms"] if p["phase"] == "decode" else 0.0
        out.append(p)
    return out


def published_marks(ax, phase, x_of_point):
    styles = iter(["k--", "k-.", "k:"])
    for pub in (p for p in PUBLISHED if p["phase"] == phase):
        label = f"{pub['what']}, {pub['hardware']}: {pub['figure']} ({pub['source']})"
        if pub["tokens_per_s_per_user"] is not None and x_of_point:
            ax.plot([pub["tokens_per_s_per_user"]], [pub["tokens_per_s_per_gpu"]], "ks", label=label)
        else:
            ax.axhline(pub["tokens_per_s_per_gpu"], linestyle=next(styles)[1:], color="k", alpha=0.6, label=label)


def decode_plot(pts, out):
    fig, ax = plt.subplots(figsize=(9, 6))
    for source in sorted({p["source"] for p in pts}):
        curve = sorted((p for p in pts if p["source"] == source), key=lambda p: p["batch"])
        first = curve[0]
        ax.plot([p["tokens_per_s_per_user"] for p in curve], [p["tokens_per_s_per_gpu"] for p in curve], "o-",
                label=f"rank slice {first['deploy']} (EP {first['ep_size']}), context {first['context']}, "
                      f"{source}: measured + modelled exchange")
        for p in curve:
            ax.annotate(str(p["batch"]), (p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        ax.plot([1e3 / p["floor_ms"] * p["tokens_per_step"] / p["batch"] for p in curve],
                [p["tokens_per_step"] * 1e3 / p["floor_ms"] for p in curve], "x:", alpha=0.5,
                label="its floor (bench/deepseek_floor.h: weights as stored)")
    published_marks(ax, "decode", True)
    t = TARGETS["decode"]
    ax.plot([t["tokens_per_s_per_user"]], [t["tokens_per_s_per_gpu"]], "r*", markersize=12,
            label=f"target: >= {t['tokens_per_s_per_gpu']:,} output tok/s/GPU at >= {t['tokens_per_s_per_user']} tok/s "
                  "per user (up and right of the star)")
    finish_plot(fig, ax, "tokens/s per user", "output tokens/s per GPU",
                "DeepSeek-V3 decode: one rank of a deployment on one GPU (point labels: requests per rank)", out)


def prefill_plot(pts, out):
    fig, ax = plt.subplots(figsize=(9, 6))
    for source in sorted({p["source"] for p in pts}):
        curve = sorted((p for p in pts if p["source"] == source), key=lambda p: p["tokens_per_step"])
        first = curve[0]
        ax.plot([p["step_overlap_ms"] for p in curve], [p["tokens_per_s_per_gpu"] for p in curve], "o-",
                label=f"rank slice {first['deploy']} (EP {first['ep_size']}), prompts of {first['context']}, {source}")
        for p in curve:
            ax.annotate(str(p["tokens_per_step"]), (p["step_overlap_ms"], p["tokens_per_s_per_gpu"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        ax.plot([p["floor_ms"] for p in curve], [p["tokens_per_step"] * 1e3 / p["floor_ms"] for p in curve], "x:",
                alpha=0.5, label="its floor (bench/deepseek_floor.h)")
    published_marks(ax, "prefill", False)
    t = TARGETS["prefill"]
    ax.axhline(t["tokens_per_s_per_gpu"], color="r", alpha=0.6,
               label=f"target: >= {t['tokens_per_s_per_gpu']:,} input tok/s/GPU at {t['chunk_tokens']:,}-token chunks")
    finish_plot(fig, ax, "step time (ms)", "input tokens/s per GPU",
                "DeepSeek-V3 prefill: one rank of a deployment on one GPU (point labels: chunk tokens)", out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--decode", nargs="+", required=True)
    ap.add_argument("--prefill", nargs="+", required=True)
    args = ap.parse_args()
    decode, prefill = points(args.decode), points(args.prefill)
    os.makedirs(args.out, exist_ok=True)
    with h5py.File(os.path.join(args.out, "v3-curves.h5"), "w") as f:
        f.attrs["communication_model"] = json.dumps(comm_model_description())
        f.attrs["published"] = json.dumps(PUBLISHED)
        f.attrs["targets"] = json.dumps(TARGETS)
        for name, pts in (("decode", decode), ("prefill", prefill)):
            write_table(f.create_group(name), pts, {"sources": json.dumps(sorted({p["source"] for p in pts}))})
    decode_plot(decode, os.path.join(args.out, "v3-decode.png"))
    prefill_plot(prefill, os.path.join(args.out, "v3-prefill.png"))
    for p in decode + prefill:
        print(f"{p['source']:>28} {p['phase']:>7} ep {p['ep_size']:>3} batch {p['batch']:>4} x {p['context']:>5}: compute "
              f"{p['compute_ms']:8.2f} ms, comm {p['comm_ms']:6.2f} ms, {p['tokens_per_s_per_gpu']:9.1f} tok/s/GPU"
              + (f" at {p['tokens_per_s_per_user']:6.1f} tok/s/user" if p["phase"] == "decode" else "")
              + f", floor {p['floor_ms']:7.2f} ms ({p['floor_ms'] / p['compute_ms']:.3f} of compute)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""plot_sweeps.py --out DIR FILE.h5 [FILE.h5 ...]

Draws the two Pareto plots from any number of `deepinfer sweep` files, with the official points of
results/official.json overlaid:
  DIR/prefill.png  tokens/s/GPU against step time (ms), one curve per prefill file;
  DIR/decode.png   tokens/s/GPU against tokens/s/user (converted with each file's nextn/acceptance), one curve
                   per decode file.
Each curve is labelled with its file's deployment, hosts and GPU/versions. Needs h5py and matplotlib (Debian:
python3-h5py, python3-matplotlib).
"""
import argparse
import json
import os

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def label(path, attrs):
    config = json.loads(text(attrs["configuration"]))
    hardware = text(attrs["accelerator"]) if "accelerator" in attrs else config.get("device", "?")
    return (f"{os.path.basename(path)}: {text(attrs['deployment'])} on {hardware} ({text(attrs['hosts'])}), "
            f"{os.path.basename(config.get('model', '?'))}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--official", default=os.path.join(ROOT, "results", "official.json"))
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    official = json.load(open(args.official))
    os.makedirs(args.out, exist_ok=True)
    figures = {}
    for phase, xlabel, ylabel in (("prefill", "step time (ms)", "tokens/s per GPU"),
                                  ("decode", "tokens/s per user", "tokens/s per GPU")):
        fig, ax = plt.subplots(figsize=(8, 5.5))
        figures[phase] = (fig, ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{phase}: Pareto points" + (" (converted: 1 + nextn x acceptance tokens per step)"
                                                 if phase == "decode" else ""))
        ax.grid(True, alpha=0.3)
        ref = official[phase]
        if phase == "prefill":
            xs, ys = [p["step_time_ms"] for p in ref], [p["tokens_per_s_per_gpu"] for p in ref]
            notes = [f"{p['chunk_tokens']}" for p in ref]
        else:
            xs, ys = [p["tokens_per_s_per_user"] for p in ref], [p["tokens_per_s_per_gpu"] for p in ref]
            notes = [f"{p['requests_per_rank']}/rank" for p in ref]
        ax.plot(xs, ys, "k*", markersize=12, label="official (DeepInfer, V4.1-Flash, SM100)")
        for x, y, n in zip(xs, ys, notes):
            ax.annotate(n, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    for path in args.files:
        with h5py.File(path) as f:
            attrs = dict(f.attrs)
            for phase in ("prefill", "decode"):
                if f"{phase}/points" not in f:
                    continue
                pts = f[f"{phase}/points"][()]
                fig, ax = figures[phase]
                if phase == "prefill":
                    x, y, notes = pts["step_time_ms"], pts["tokens_per_s_per_gpu"], pts["chunk_tokens"]
                else:
                    x, y = pts["tokens_per_s_per_user_converted"], pts["tokens_per_s_per_gpu_converted"]
                    notes = pts["requests_per_rank"]
                ax.plot(x, y, "o-", label=label(path, attrs))
                for xi, yi, n in zip(x, y, notes):
                    ax.annotate(str(n), (xi, yi), textcoords="offset points", xytext=(4, -10), fontsize=7)
    for phase, (fig, ax) in figures.items():
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, f"{phase}.png"), dpi=120)
        print(f"wrote {os.path.join(args.out, phase + '.png')}")


if __name__ == "__main__":
    main()

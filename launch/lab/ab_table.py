#!/usr/bin/env python3
"""The table of an A/B device call (launch/lab/ab_call.sh): per point, each side's step medians over the rounds and
B/A of their medians, from the JSON lines under DIR/<a|b>-<round>/NN-<decode|prefill>.jsonl (NN: the step's place in
the call, which tells apart points of the same shape run with other arguments, e.g. another model).

    launch/lab/ab_table.py DIR [--labels NAME_A NAME_B] [--steps 'NN=label' ...]
"""
import argparse
import collections
import json
import pathlib
import re
import statistics


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--labels", nargs=2, default=["A", "B"])
    parser.add_argument("--steps", nargs="*", default=[], help="NN=label: what step NN ran (e.g. 02='V2-Lite')")
    args = parser.parse_args()
    step_labels = dict(s.split("=", 1) for s in args.steps)
    runs = collections.defaultdict(lambda: {"a": [], "b": []})
    idle = collections.defaultdict(lambda: {"a": [], "b": []})
    for path in sorted(args.dir.glob("[ab]-*/*.jsonl")):
        side = path.parent.name.split("-")[0]
        step = re.match(r"(\d+)-", path.name).group(1)
        for line in path.read_text().splitlines():
            r = json.loads(line)
            shape = f"{r['batch']} x {r['context']}" if r["phase"] == "decode" else f"{r['batch'] * r['context']} tokens"
            key = (step, r["phase"], r["batch"], r["context"], shape)
            runs[key][side].append(r["median_ms"])
            if r.get("device_idle_ms", -1) >= 0:
                idle[key][side].append(r["device_idle_ms"])
    a_name, b_name = args.labels
    print(f"| point | {a_name} (ms a step, each round) | {b_name} (each round) | {b_name}/{a_name} (medians) "
          f"| device idle {a_name} / {b_name} (ms) |")
    print("| --- | --- | --- | --- | --- |")
    worst = 1.0
    for key in sorted(runs):
        step, phase, _, _, shape = key
        a, b = runs[key]["a"], runs[key]["b"]
        if not a or not b:
            continue
        ratio = statistics.median(b) / statistics.median(a)
        worst = max(worst, ratio, 1 / ratio)
        ia, ib = idle[key]["a"], idle[key]["b"]
        idle_cell = f"{statistics.median(ia):.3f} / {statistics.median(ib):.3f}" if ia and ib else "-"
        label = step_labels.get(step, f"step {step}")
        print(f"| {label} {phase} {shape} | {' / '.join(f'{x:.3f}' for x in a)} | {' / '.join(f'{x:.3f}' for x in b)} "
              f"| {ratio:.3f} | {idle_cell} |")
    print(f"\nlargest difference either way: {100 * (worst - 1):.1f}%")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Per-kernel time of one decode step from an Nsight Compute CSV, e.g.

  DEEPINFER_PROFILE=1 ncu --csv --metrics gpu__time_duration.sum --print-units base \
      -k 'regex:^(?!fill_kernel)' --log-file step.csv deepinfer bench decode ... --warmup 0 --steps 1
  launch/lab/ncu_step_breakdown.py step.csv [N]

(the filter skips the dummy-weight fill kernels, over 1,700 of them, which would take ncu minutes). Prints the
last step's kernels summed by kernel name, largest first, then its first N (default 40) kernels in launch order,
which tells apart the roles one kernel plays (linear_gemv for q, o_proj and the router, say). ncu runs kernels
one at a time at a locked clock (1.33 GHz on the H200 against ~1.98 in a normal run), so the durations are
longer than in a graph replay and carry no launch gaps or overlap: use them to rank, not as step times.
"""
import csv
import re
import sys
from collections import defaultdict


def short_name(kernel):
    name = re.sub(r"^(void )?(deepinfer::cuda::)?(\(anonymous namespace\)::)?", "", kernel)
    return re.sub(r"\(.*", "", name)  # without the argument list


def main(path, sequence):
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own lines, not the program's output
    rows = [r for r in csv.DictReader(lines) if r.get("Metric Name") == "gpu__time_duration.sum"]
    # A step opens with the token embedding and gathers the rows for the lm head with the same kernel (one
    # launch of each a step), so the last step starts at the second-to-last embedding_kernel launch.
    starts = [i for i, r in enumerate(rows) if "embedding_kernel" in r["Kernel Name"]]
    if len(starts) < 2:
        sys.exit(f"{path}: fewer than two embedding_kernel launches, so no whole decode step to find")
    step = rows[starts[-2]:]
    by_name = defaultdict(lambda: [0, 0.0])
    for r in step:
        name = short_name(r["Kernel Name"])
        by_name[name][0] += 1
        by_name[name][1] += float(r["Metric Value"].replace(",", "")) / 1e3  # ns -> us
    total = sum(us for _, us in by_name.values())
    print(f"{len(step)} kernels, {total / 1e3:.3f} ms of kernel time in the last step")
    for name, (count, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{us / 1e3:8.3f} ms {100 * us / total:5.1f}%  {count:4d} x {us / count:7.1f} us  {name[:90]}")
    print(f"the first {sequence} kernels of the step, in order:")
    for r in step[:sequence]:
        us = float(r["Metric Value"].replace(",", "")) / 1e3
        print(f"{us:8.1f} us  grid {r['Grid Size']:>14}  {short_name(r['Kernel Name'])[:90]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)

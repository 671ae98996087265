#!/usr/bin/env python3
"""Per-kernel time of one decode step from an Nsight Compute CSV (ncu --csv --metrics gpu__time_duration.sum
--print-units base --log-file F deepinfer bench decode ... --warmup 1 --steps 1): the kernels from the last
embedding launch on (the last step), summed by kernel name, largest first. ncu runs kernels one at a time, so
the total is the step's kernel time without launch gaps or overlap; set beside the graph step time it shows what
the gaps cost."""
import csv
import re
import sys
from collections import defaultdict


def main(path):
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own lines, not the program's output
    rows = [r for r in csv.DictReader(lines) if r.get("Metric Name") == "gpu__time_duration.sum"]
    starts = [i for i, r in enumerate(rows) if "embedding_kernel" in r["Kernel Name"]]
    if not starts:
        sys.exit(f"{path}: no embedding_kernel launch, so no decode step to find")
    step = rows[starts[-1]:]
    by_name = defaultdict(lambda: [0, 0.0])
    for r in step:
        name = re.sub(r"\(.*", "", r["Kernel Name"])  # without the argument list
        name = re.sub(r"^(void )?deepinfer::cuda::(\(anonymous namespace\)::)?", "", name)
        by_name[name][0] += 1
        by_name[name][1] += float(r["Metric Value"].replace(",", "")) / 1e3  # ns -> us
    total = sum(us for _, us in by_name.values())
    print(f"{len(step)} kernels, {total / 1e3:.3f} ms of kernel time in the last step")
    for name, (count, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{us / 1e3:8.3f} ms {100 * us / total:5.1f}%  {count:4d} x {us / count:7.1f} us  {name[:90]}")


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""check_eplb_plan.py -- COMMAND...: runs `COMMAND --output <tmp>` (a `deepinfer eplb plan` on DeepSeek's
published example) and checks the plan file against the published phy2log."""
import json
import os
import subprocess
import sys
import tempfile

with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "plan.json")
    subprocess.run(sys.argv[sys.argv.index("--") + 1:] + ["--output", out], check=True, timeout=60)
    plan = json.load(open(out))
assert plan["phy2log"] == [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                           [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]], plan["phy2log"]
assert all(len(row) == 12 for row in plan["log2phy"]) and len(plan["logcnt"]) == 2
print("plan matches DeepSeek's published example")

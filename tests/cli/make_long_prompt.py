#!/usr/bin/env python3
"""make_long_prompt.py PATH BYTES — one request line whose 'prompt' text is BYTES bytes long."""
import json
import sys

with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"id": "long", "prompt": "a" * int(sys.argv[2]), "max_new_tokens": 2}) + "\n")

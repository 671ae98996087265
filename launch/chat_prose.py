#!/usr/bin/env python3
"""Writes chat_prose.json: the instruction text DeepSeek's chat encodings put before a conversation in thinking
mode (the reasoning-effort paragraph of V4, the effort line of V4.1), read from deepseek-recipe's renderings.
The engine's chat templates (src/text/chat_template.h) need it and do not carry DeepSeek's prose themselves.

    pip install deepseek-recipe==0.2.0
    python3 launch/chat_prose.py OUT.json      (e.g. beside the model's tokenizer.json)
"""
import json
import os
import sys

import deepseek_recipe as dr

EFFORTS = ["low", "high", "xhigh", "max"]


def effort_text(encoding, lead, effort):
    """What stands between the prompt's lead (BOS, and V4.1's System token) and the first user turn."""
    prompt = encoding.render_conversation(
        dr.Conversation([dr.UserMessage("Q")], thinking_mode=True, reasoning_effort=effort)).prompt
    user = dr.SpecialToken.User.default_str()
    head = prompt[: prompt.index(user)]
    assert head.startswith(lead), (head, lead)
    return head[len(lead):]


def prose():
    bos, system = dr.SpecialToken.Bos.default_str(), dr.SpecialToken.System.default_str()
    out = {"source": f"deepseek-recipe {dr.__version__}"}
    for name, encoding, lead in (("v4", dr.DeepseekV4Encoding(), bos), ("v41", dr.DeepseekV41Encoding(), bos + system)):
        texts = {effort: effort_text(encoding, lead, effort) for effort in EFFORTS}
        texts["default"] = effort_text(encoding, lead, None)
        out[name] = {"effort": texts}
    return out


def write(path):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(prose(), f, ensure_ascii=False, indent=1)
    os.replace(tmp, path)  # whole or not at all


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write(sys.argv[1])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes chat_prose.json: the instruction text DeepSeek's chat encodings put before a conversation — in thinking
mode the reasoning-effort paragraph of V4 or the effort line of V4.1, with tools the tool-use instructions
around the tools' schemas (as segments: text, and the special tokens it names), and the response-format
instructions (before a JSON schema; for a JSON object) — read from deepseek-recipe's renderings.
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


PROBE_TOOL = dr.ToolDefinition("probe_tool", "probe", {"type": "object"})
PROBE_SCHEMA = json.dumps({"name": "probe_tool", "description": "probe", "parameters": {"type": "object"}})


def segments(prompt, ranges, start, end):
    """prompt[start:end] as [{"text"} | {"special"}], the special tokens where `ranges` has them."""
    out, at = [], start
    for a, b in ranges:
        if b <= start or a >= end:
            continue
        if a > at:
            out.append({"text": prompt[at:a]})
        out.append({"special": prompt[a:b]})
        at = b
    if end > at:
        out.append({"text": prompt[at:end]})
    return out


def tools_text(encoding, lead):
    """The tool-use instructions before and after the tools' schemas (one JSON line each)."""
    rendered = encoding.render_conversation(
        dr.Conversation([dr.UserMessage("Q")], thinking_mode=False, tools=[PROBE_TOOL]))
    prompt, user = rendered.prompt, dr.SpecialToken.User.default_str()
    schema = prompt.index(PROBE_SCHEMA)
    return {"before": segments(prompt, rendered.special_ranges, len(lead), schema),
            "after": segments(prompt, rendered.special_ranges, schema + len(PROBE_SCHEMA), prompt.index(user))}


PROBE_RESPONSE_SCHEMA = {"type": "object"}


def response_text(encoding, lead):
    """The response-format instructions: before a JSON schema, and the whole of them for a JSON object."""
    user = dr.SpecialToken.User.default_str()
    schema = encoding.render_conversation(dr.Conversation(
        [dr.UserMessage("Q")], thinking_mode=False, response_schema=PROBE_RESPONSE_SCHEMA)).prompt
    json_object = encoding.render_conversation(dr.Conversation(
        [dr.UserMessage("Q json")], thinking_mode=False, response_format="json_object")).prompt
    return {"schema_before": schema[len(lead): schema.index(json.dumps(PROBE_RESPONSE_SCHEMA))],
            "json_object": json_object[len(lead): json_object.index(user)]}


def prose():
    bos, system = dr.SpecialToken.Bos.default_str(), dr.SpecialToken.System.default_str()
    out = {"source": f"deepseek-recipe {dr.__version__}"}
    for name, encoding, lead in (("v4", dr.DeepseekV4Encoding(), bos), ("v41", dr.DeepseekV41Encoding(), bos + system)):
        texts = {effort: effort_text(encoding, lead, effort) for effort in EFFORTS}
        texts["default"] = effort_text(encoding, lead, None)
        out[name] = {"effort": texts, "tools": tools_text(encoding, lead), "response": response_text(encoding, lead)}
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

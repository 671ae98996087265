#!/usr/bin/env python3
"""Writes a DeepSeek-V4.1 model directory's engram hash tables: MODEL/engram_hash.json.

    python3 launch/engram_hash.py MODEL [--tokenizer MODEL/tokenizer.json]

The engram layers hash n-grams of *compressed* token ids: every id of the tokenizer is decoded alone, normalised
(NFKC, NFD, accents stripped, lower case, whitespace runs as one space, a lone space kept, then stripped) and ids
whose normalised text is equal share a compressed id, numbered in order of first appearance; pieces that decode
to U+FFFD (partial UTF-8) are keyed by their raw token string. The hash multipliers come from numpy's PCG64
generator seeded per layer (10007 * layer id), odd and bounded so that id * multiplier cannot overflow int64.
Both need libraries the engine does not link (a tokenizer with Unicode normalisation, numpy's generator), so this
tool computes them once per model and the engine reads the file (it recomputes the primes and checks them).
These are the semantics of transformers' deepseek_v41 hash state, written here in our own code.

Needs: pip install tokenizers numpy sympy.
"""
import argparse
import json
import os

import numpy as np
from sympy import nextprime
from tokenizers import Regex, Tokenizer, normalizers


def normaliser():
    keep_space = "\ue000"  # a private-use character: a token that is exactly one space survives the strip
    return normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), keep_space),
        normalizers.Strip(), normalizers.Replace(keep_space, " ")])


def compressed_ids(tokenizer, vocab_size):
    norm, first_id, ids = normaliser(), {}, []
    for token in range(vocab_size):
        text = tokenizer.decode([token], skip_special_tokens=False)
        key = tokenizer.id_to_token(token) if "\ufffd" in text else (norm.normalize_str(text) or text)
        ids.append(first_id.setdefault(key, len(first_id)))
    return ids, len(first_id)


def primes(config):
    """Per layer, n-gram order and head, the next prime above engram_vocab_size - 1 not used before."""
    used, out = set(), []
    for _ in config["engram_layer_ids"]:
        layer = []
        for _ in range(config["engram_max_ngram_size"] - 1):
            heads, p = [], config["engram_vocab_size"] - 1
            for _ in range(config["engram_n_heads"]):
                p = nextprime(p)
                while p in used:
                    p = nextprime(p)
                used.add(p)
                heads.append(int(p))
            layer.append(heads)
        out.append(layer)
    return out


def multipliers(layer_ids, max_ngram, compressed_vocab):
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    return [[int(v) * 2 + 1 for v in
             np.random.default_rng(10007 * layer).integers(0, bound, size=(max_ngram,), dtype=np.int64)]
            for layer in layer_ids]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokenizer")
    args = ap.parse_args()
    root = json.load(open(os.path.join(args.model, "config.json")))
    config = root.get("text_config", root)
    if not config.get("engram_layer_ids"):
        raise SystemExit(f"{args.model}/config.json has no engram layers")
    tokenizer = Tokenizer.from_file(args.tokenizer or os.path.join(args.model, "tokenizer.json"))
    ids, compressed = compressed_ids(tokenizer, config["vocab_size"])
    want = config.get("engram_compressed_vocab_size", 99092)
    if compressed != want:
        raise SystemExit(f"the tokenizer gives {compressed} compressed ids, the config says "
                         f"engram_compressed_vocab_size = {want}: the hashes would address other rows")
    out = {"format": "deepinfer engram hash tables 1", "compressed_vocab_size": compressed,
           "compressed_ids": ids,
           "multipliers": multipliers(config["engram_layer_ids"], config["engram_max_ngram_size"], compressed),
           "primes": primes(config)}
    path = os.path.join(args.model, "engram_hash.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)  # never a half-written file under the final name
    print(f"{path}: {len(ids)} token ids -> {compressed} compressed ids, {len(out['multipliers'])} layers")


if __name__ == "__main__":
    main()

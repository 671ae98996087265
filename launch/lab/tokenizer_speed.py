#!/usr/bin/env python3
"""Hugging Face tokenizers' encode speed on the documents benchmarks/tokenizer_bench.cpp times (the corpus lines of
at least --min-bytes bytes): each document once to warm up, then --repeats times, the median per document summed.
Prints one JSON line. Needs: pip install tokenizers.

    python3 launch/lab/tokenizer_speed.py TOKENIZER_JSON CORPUS_JSONL [--min-bytes 20000] [--repeats 5]
"""
import argparse
import json
import statistics
import time

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("corpus")
    ap.add_argument("--min-bytes", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    docs = [r["text"] for r in map(json.loads, open(args.corpus, encoding="utf-8"))
            if "ids" in r and len(r["text"].encode()) >= args.min_bytes]
    total, size, tokens = 0.0, 0, 0
    for doc in docs:
        size += len(doc.encode())
        tokens += len(tok.encode(doc).ids)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            tok.encode(doc)
            times.append(time.perf_counter() - start)
        total += statistics.median(times)
    print(json.dumps({"documents": len(docs), "bytes": size, "tokens": tokens, "tokenizers_s": round(total, 6),
                      "tokenizers_MB_s": round(size / total / 1e6, 2), "tokenizers_tokens_s": round(tokens / total)}))


if __name__ == "__main__":
    main()

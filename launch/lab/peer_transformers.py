#!/usr/bin/env python3
"""The PyTorch peer: the same model shape in Hugging Face transformers (DeepseekV2ForCausalLM, random bf16
weights, on the GPU), decode and prefill timed the same way as `deepinfer bench` (median step after warm-up,
CUDA-synchronised wall clock), for a side-by-side figure on one card.

    python3 launch/lab/peer_transformers.py --config configs/models/deepseek-v2-lite.json \
        --batch 1,64,256 --context 512 --prefill-prompts 256 --prompt-len 512 --output peer.jsonl
"""
import argparse
import json
import statistics
import time

import torch
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - start) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", default="1,64,256")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prefill-prompts", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--output", default=None)
    args = ap.parse_args()
    raw = json.load(open(args.config))
    raw = {k: v for k, v in raw.items() if k not in ("architectures", "model_type")}
    cfg = DeepseekV2Config(**raw)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = DeepseekV2ForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    print(f"transformers peer: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, "
          f"attention '{model.config._attn_implementation}'", flush=True)
    results = []
    with torch.no_grad():
        for batch in [int(b) for b in args.batch.split(",")]:
            ids = torch.randint(2, cfg.vocab_size, (batch, args.context), device="cuda")
            out = model(ids, use_cache=True)
            past = out.past_key_values
            ms = []
            for step in range(args.warmup + args.steps):
                nxt = torch.randint(2, cfg.vocab_size, (batch, 1), device="cuda")
                out, t = timed(lambda: model(nxt, past_key_values=past, use_cache=True))
                past = out.past_key_values
                if step >= args.warmup:
                    ms.append(t)
            med = statistics.median(ms)
            results.append({"phase": "decode", "batch": batch, "context": args.context, "median_ms": med,
                            "tokens_per_s": batch / med * 1e3, "impl": "transformers"})
            print(f"peer decode batch {batch} x {args.context}: {med:.2f} ms/step, {batch / med * 1e3:.1f} tok/s", flush=True)
            del past, out
            torch.cuda.empty_cache()
        ids = torch.randint(2, cfg.vocab_size, (args.prefill_prompts, args.prompt_len), device="cuda")
        ms = []
        for step in range(1 + 3):
            _, t = timed(lambda: model(ids, use_cache=False, logits_to_keep=1))
            if step >= 1:
                ms.append(t)
        med = statistics.median(ms)
        tokens = args.prefill_prompts * args.prompt_len
        results.append({"phase": "prefill", "batch": args.prefill_prompts, "context": args.prompt_len, "median_ms": med,
                        "tokens_per_s": tokens / med * 1e3, "impl": "transformers"})
        print(f"peer prefill {args.prefill_prompts} x {args.prompt_len}: {med:.1f} ms/step, {tokens / med * 1e3:.0f} tok/s", flush=True)
    if args.output:
        with open(args.output, "a") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Peer figure for the CUDA backend's MoE models: greedy decode steps of HF transformers' own
MoE classes (MixtralForCausalLM, Qwen2MoeForCausalLM, OlmoeForCausalLM), bf16, eager, with its
DynamicCache, on random weights in the same shapes as `specula-cli generate --synthetic NAME`
(engine/backend/cuda_backend.cpp synthetic_config). Synthetic: for timing only. Prints one JSON
object: decode step median, tokens/s, and the weight bytes a token reads (attention, router,
top-k experts, shared expert, embeddings row, lm_head) over the step time.

  python3 bench/peers/hf_moe_decode.py --shape olmoe-1b-7b [--prompt 16] [--steps 64]
"""
import argparse
import json
import time

import torch
import transformers

SHAPES = {
    # name: (config class name, model class name, config kwargs)
    "mixtral-8x7b": ("MixtralConfig", "MixtralForCausalLM", dict(
        num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        intermediate_size=14336, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
        max_position_embeddings=32768, rope_theta=1e6, sliding_window=None)),
    "qwen1.5-moe-a2.7b": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        num_hidden_layers=24, hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
        intermediate_size=5632, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
        num_experts=60, num_experts_per_tok=4, norm_topk_prob=False, vocab_size=151936,
        max_position_embeddings=8192, rope_theta=1e6, decoder_sparse_step=1, mlp_only_layers=[],
        use_sliding_window=False)),
    "olmoe-1b-7b": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        num_hidden_layers=16, hidden_size=2048, num_attention_heads=16, num_key_value_heads=16,
        intermediate_size=1024, num_experts=64, num_experts_per_tok=8, norm_topk_prob=False, vocab_size=50304,
        max_position_embeddings=4096, rope_theta=1e4, clip_qkv=None)),
}

p = argparse.ArgumentParser()
p.add_argument("--shape", required=True, choices=sorted(SHAPES))
p.add_argument("--prompt", type=int, default=16)
p.add_argument("--steps", type=int, default=64)
a = p.parse_args()

config_cls, model_cls, kwargs = SHAPES[a.shape]
cfg = getattr(transformers, config_cls)(**kwargs)
torch.manual_seed(0)
# Built in bf16 on the GPU directly: an f32 Mixtral-8x7B (187 GB) does not fit before a cast.
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = getattr(transformers, model_cls)(cfg).eval()
torch.set_default_dtype(torch.float32)
D, L = cfg.hidden_size, cfg.num_hidden_layers
k = cfg.num_experts_per_tok
if a.shape == "mixtral-8x7b":
    expert = 3 * cfg.intermediate_size * D
    shared = 0
else:
    expert = 3 * cfg.moe_intermediate_size * D if a.shape != "olmoe-1b-7b" else 3 * cfg.intermediate_size * D
    shared = 3 * getattr(cfg, "shared_expert_intermediate_size", 0) * D + (D if a.shape.startswith("qwen") else 0)
n_exp = getattr(cfg, "num_local_experts", None) or cfg.num_experts
hd = getattr(cfg, "head_dim", None) or D // cfg.num_attention_heads
attn = (cfg.num_attention_heads * hd * 2 + cfg.num_key_value_heads * hd * 2) * D
per_token = 2 * (L * (attn + n_exp * D + k * expert + shared) + cfg.vocab_size * D + D)

prompt = torch.randint(0, cfg.vocab_size, (1, a.prompt), device="cuda")


@torch.inference_mode()
def run(steps):
    cache = transformers.DynamicCache(config=cfg)
    out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        tok.cpu()  # the host sees the token, as a generation loop does
        times.append(time.perf_counter() - t0)
    return sorted(times)


run(4)  # warm-up
times = run(a.steps)
med = times[len(times) // 2]
print(json.dumps({"peer": f"HF transformers {transformers.__version__} {model_cls}, bf16, eager, DynamicCache",
                  "synthetic": True, "shape": a.shape, "torch": torch.__version__,
                  "device": torch.cuda.get_device_name(), "prompt_tokens": a.prompt, "decode_steps": a.steps,
                  "decode_step_median_ms": med * 1e3, "decode_tokens_per_s": 1 / med,
                  "weight_bytes_per_token": per_token, "decode_weight_read_gb_per_s": per_token / med / 1e9}))

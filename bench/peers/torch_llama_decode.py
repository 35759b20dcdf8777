#!/usr/bin/env python3
"""Peer figure for the CUDA backend: one llama-3.1-8b-shaped decode step (and a prefill) in
plain PyTorch bf16 (torch.matmul + F.scaled_dot_product_attention, eager, no CUDA graphs),
random weights. Prints one JSON object. Same shapes as `specula-cli generate --synthetic
llama-3.1-8b`: 32 layers, 4096 hidden, 32 heads, 8 KV heads, head dim 128, FFN 14336,
vocab 128256, fused QKV and gate/up like Specula's layout."""
import argparse, json, time
import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--prompt", type=int, default=16)
p.add_argument("--steps", type=int, default=64)
a = p.parse_args()
L, D, H, KVH, HD, FF, V = 32, 4096, 32, 8, 128, 14336, 128256
dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)
def w(n, k): return (torch.rand(n, k, device=dev, dtype=dt) * 2 - 1) / k ** 0.5
layers = [dict(qkv=w((H + 2 * KVH) * HD, D), o=w(D, H * HD), gu=w(2 * FF, D), down=w(D, FF),
               n1=torch.ones(D, device=dev, dtype=dt), n2=torch.ones(D, device=dev, dtype=dt)) for _ in range(L)]
emb = torch.rand(V, D, device=dev, dtype=dt) * 2 - 1
out_w = w(V, D)
out_n = torch.ones(D, device=dev, dtype=dt)
cap = a.prompt + a.steps + 1
kc = torch.zeros(L, 1, KVH, cap, HD, device=dev, dtype=dt)
vc = torch.zeros_like(kc)
inv = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float32) / HD))

def rms(x, g): return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * g
def rope(x, pos):  # x (1, h, T, hd), half-split
    ang = pos[:, None].float() * inv[None]
    c, s = ang.cos().to(dt), ang.sin().to(dt)
    x1, x2 = x[..., :HD // 2], x[..., HD // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

@torch.inference_mode()
def forward(tokens, start):
    T = tokens.numel()
    pos = torch.arange(start, start + T, device=dev)
    x = emb[tokens][None]
    for l, lw in enumerate(layers):
        qkv = torch.matmul(rms(x, lw["n1"]), lw["qkv"].t())
        q, k, v = qkv.split([H * HD, KVH * HD, KVH * HD], -1)
        q = rope(q.view(1, T, H, HD).transpose(1, 2), pos)
        k = rope(k.view(1, T, KVH, HD).transpose(1, 2), pos)
        kc[l, :, :, start:start + T] = k
        vc[l, :, :, start:start + T] = v.view(1, T, KVH, HD).transpose(1, 2)
        K = kc[l, :, :, :start + T].repeat_interleave(H // KVH, 1)
        Vv = vc[l, :, :, :start + T].repeat_interleave(H // KVH, 1)
        mask = torch.ones(T, start + T, device=dev, dtype=torch.bool).tril(start)
        o = F.scaled_dot_product_attention(q, K, Vv, attn_mask=mask)
        x = x + torch.matmul(o.transpose(1, 2).reshape(1, T, H * HD), lw["o"].t())
        gu = torch.matmul(rms(x, lw["n2"]), lw["gu"].t())
        g, u = gu.split([FF, FF], -1)
        x = x + torch.matmul(F.silu(g) * u, lw["down"].t())
    return torch.matmul(rms(x[:, -1], out_n), out_w.t()).float()

prompt = torch.randint(0, 49152, (a.prompt,), device=dev)
forward(prompt, 0); torch.cuda.synchronize()  # warm-up
t0 = time.perf_counter(); logits = forward(prompt, 0); logits.cpu(); prefill = time.perf_counter() - t0
tok = logits.argmax(-1)
forward(tok, a.prompt); torch.cuda.synchronize()
times = []
for i in range(a.steps):
    t0 = time.perf_counter()
    logits = forward(tok, a.prompt + i)
    tok = logits.argmax(-1); tok.cpu()  # host sees the token, as a generation loop does
    times.append(time.perf_counter() - t0)
times.sort()
med = times[len(times) // 2]
wbytes = sum(sum(t.numel() * 2 for t in lw.values()) for lw in layers) + out_w.numel() * 2 + D * 2
print(json.dumps({"peer": "pytorch eager bf16 (torch.matmul + F.scaled_dot_product_attention), random weights",
                  "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                  "prompt_tokens": a.prompt, "prefill_tokens_per_s": a.prompt / prefill,
                  "decode_steps": a.steps, "decode_step_median_ms": med * 1e3, "decode_tokens_per_s": 1 / med,
                  "weight_bytes_per_token": wbytes, "decode_weight_read_gb_per_s": wbytes / med / 1e9}))

#!/usr/bin/env python3
"""Tiny random MoE checkpoints (Qwen2-MoE, Qwen3-MoE, Mixtral, OLMoE) as Hugging Face directories
and as GGUF files, with reference logits and routing from transformers.

Writes tests/data/moe/:
  <arch>/            config.json, model.safetensors (F16), tokenizer.json, tokenizer_config.json
  <arch>.gguf        the same weights in llama.cpp's layout (F16 matrices, F32 norms and routers)
  <arch>.reference.json / <arch>.reference.f32
                     per sequence: the tokens, and per MoE layer and token the router's top-k expert
                     ids (descending weight) with their routing weights; the .f32 file holds the
                     logits of every position of every sequence, (sum of lengths, vocab) float32.
  qwen3moe-q8_0.gguf + .reference.*
                     a Qwen3-MoE with Q8_0 matrices (experts sliced from quantized 3D tensors);
                     its reference runs transformers on the dequantized weights.
The reference is transformers' float32 forward over the stored (F16 or dequantized) values.

GGUF layout follows llama.cpp's converter (read, not imported): experts stacked into 3D tensors
blk.N.ffn_{gate,up,down}_exps ((E, ffn, dim) and (E, dim, ffn) in numpy order), the router as
blk.N.ffn_gate_inp, Qwen2-MoE's shared expert as ffn_{gate,up,down}_shexp with its sigmoid gate
ffn_gate_inp_shexp, q/k norms as attn_q_norm/attn_k_norm; Mixtral is arch "llama" with its Q/K rows
permuted for ggml's adjacent-pair RoPE; the others keep HF's half-split order (NEOX).

Sizes are tiny (hidden 16, 2 layers, vocab 128) so the whole set stays around 300 KB. Router
weights are drawn wide enough that every token's k-th and (k+1)-th expert probabilities differ by
more than 1e-3 relative (checked), so float summation order cannot flip a routing decision.

Run from the repository root:
    /work/refenv/bin/python tools/reference/make_moe_fixtures.py
(/work/refenv: python3 -m venv /work/refenv && /work/refenv/bin/pip install gguf numpy torch transformers)
Made with transformers 5.23.0, torch 2.15, gguf-py from PyPI.
"""
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import gguf
from safetensors import safe_open
from gguf import GGMLQuantizationType as QT
from transformers import (MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM,
                          Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "moe"
VOCAB = 128
BOS, EOS = 0, 1
MIN_ROUTING_GAP = 1e-3


# ---- tokenizer: byte-level BPE over printable ASCII, newline and space ---------------------

def byte_symbols():
    """GPT-2's bytes_to_unicode for the bytes we keep (printable ASCII, space, newline)."""
    printable = list(range(ord("!"), ord("~") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable or ord("¡") <= b <= ord("¬") or ord("®") <= b <= ord("ÿ"):
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    keep = [0x0A, 0x20] + printable
    return [table[b] for b in keep], table


def make_tokenizer():
    symbols, table = byte_symbols()
    vocab = {"<s>": BOS, "</s>": EOS}
    for s in symbols:
        vocab[s] = len(vocab)
    # Greedy BPE merges learned from a fixed text until the vocabulary has VOCAB entries.
    text = ("the quick brown fox jumps over the lazy dog. the cat sat on the mat, and then "
            "the dog ran in the rain. speculative decoding verifies the draft tokens in one pass.")
    words = [[table[b] for b in (" " + w if i else w).encode()] for i, w in enumerate(text.split(" "))]
    merges = []
    while len(vocab) < VOCAB:
        counts = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        (a, b), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        vocab[a + b] = len(vocab)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    return tokens, merges


def tokenizer_json(tokens, merges):
    special = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i in (BOS, EOS)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [[a, b] for a, b in merges]},
    }


# ---- models ---------------------------------------------------------------------------------

COMMON = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=256, initializer_range=0.2,
              tie_word_embeddings=False, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=None)

ARCHS = {
    # name: (config class, model class, config kwargs, gguf arch)
    "qwen2moe": (Qwen2MoeConfig, Qwen2MoeForCausalLM, dict(
        hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1,
        moe_intermediate_size=16, shared_expert_intermediate_size=24, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=False, qkv_bias=True, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "qwen2moe"),
    "qwen3moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM, dict(
        hidden_size=16, intermediate_size=24, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        moe_intermediate_size=16, num_experts=8, num_experts_per_tok=4, norm_topk_prob=True,
        attention_bias=False, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "qwen3moe"),
    "mixtral": (MixtralConfig, MixtralForCausalLM, dict(
        hidden_size=16, intermediate_size=16, num_attention_heads=2, num_key_value_heads=1,
        num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "llama"),
    "olmoe": (OlmoeConfig, OlmoeForCausalLM, dict(
        hidden_size=16, intermediate_size=16, num_attention_heads=2, num_key_value_heads=1,
        num_experts=8, num_experts_per_tok=4, norm_topk_prob=False, clip_qkv=1.5, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "olmoe"),
}
# A Qwen3-MoE whose matrices can be Q8_0 (row lengths multiples of 32).
Q8_ARCH = (Qwen3MoeConfig, Qwen3MoeForCausalLM, dict(
    hidden_size=32, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, attention_bias=False,
    rms_norm_eps=1e-6, num_hidden_layers=1, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "qwen3moe")

SEQUENCES = [[BOS, 57, 3, 88, 120, 14, 99, 42, 7], [BOS, 100, 101, 102, 5], [64]]


def random_model(config_cls, model_cls, kwargs, seed):
    torch.manual_seed(seed)
    config = config_cls(**{**COMMON, **kwargs})
    model = model_cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):  # ones would hide a norm applied with the wrong weight
                param.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):      # zeros would hide a missing bias
                param.uniform_(-0.5, 0.5)
            elif name.endswith("mlp.gate.weight"):
                param.normal_(0.0, 0.6)       # routers: well separated expert probabilities
    return model.eval()


def reference(model, name):
    """Logits of every position and the routing of every MoE layer, for each sequence."""
    k = model.config.num_experts_per_tok
    normalize = bool(getattr(model.config, "norm_topk_prob", True))  # Mixtral always renormalizes
    cases, logits_out, min_gap = [], [], 1.0
    with torch.no_grad():
        for tokens in SEQUENCES:
            out = model(torch.tensor([tokens]), output_router_logits=True)
            logits_out.append(out.logits[0].float().numpy())
            layers = []
            for router_logits in out.router_logits:
                probs = torch.softmax(router_logits.float(), dim=-1)
                top = torch.topk(probs, k + 1 if k < probs.shape[-1] else k, dim=-1)
                if k < probs.shape[-1]:
                    gap = ((top.values[:, k - 1] - top.values[:, k]) / top.values[:, k - 1]).min().item()
                    min_gap = min(min_gap, gap)
                values, ids = top.values[:, :k], top.indices[:, :k]
                if normalize:
                    values = values / values.sum(-1, keepdim=True)
                layers.append({"experts": ids.tolist(), "weights": values.tolist()})
            cases.append({"tokens": tokens, "routing": layers})
    if min_gap < MIN_ROUTING_GAP:
        raise SystemExit(f"{name}: routing gap {min_gap:.2e} below {MIN_ROUTING_GAP}: pick another seed")
    return cases, np.concatenate(logits_out, axis=0).astype(np.float32), min_gap


def write_reference(stem, model, cases, logits, note):
    doc = {"note": note, "vocab": model.config.vocab_size, "experts_per_token": model.config.num_experts_per_tok,
           "n_experts": model.config.num_experts if hasattr(model.config, "num_experts") else model.config.num_local_experts,
           "cases": cases}
    (OUT / f"{stem}.reference.json").write_text(json.dumps(doc) + "\n")
    logits.tofile(OUT / f"{stem}.reference.f32")


# ---- GGUF -----------------------------------------------------------------------------------

def adjacent_pair_rows(w, n_heads):
    """HF half-split rows of Q/K -> ggml adjacent pairs: within each head, row i of the first half
    and row i of the second half become rows 2i and 2i+1."""
    rows, cols = w.shape
    head_dim = rows // n_heads
    return w.reshape(n_heads, 2, head_dim // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def saved_tensors(directory):
    """The checkpoint as save_pretrained writes it: per-expert tensors (in memory, transformers 5
    fuses each layer's experts into 3D gate_up_proj / down_proj parameters)."""
    out = {}
    for f in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(f, "pt") as st:
            for key in st.keys():
                out[key] = st.get_tensor(key).float().numpy()
    return out


def write_gguf(path, model, sd, arch, tokens, merges, matrix_type):
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    n_experts = getattr(c, "num_experts", None) or c.num_local_experts
    w.add_expert_count(n_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    if arch in ("qwen2moe", "qwen3moe"):
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    if arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    if arch == "olmoe" and c.clip_qkv is not None:
        w.add_clamp_kqv(c.clip_qkv)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in (BOS, EOS) else 1 for i in range(len(tokens))])
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)

    def matrix(name, value):
        value = np.ascontiguousarray(value, dtype=np.float32)
        if matrix_type == QT.Q8_0:
            w.add_tensor(name, gguf.quants.quantize(value, QT.Q8_0), raw_dtype=QT.Q8_0)
        else:
            w.add_tensor(name, value.astype(np.float16))

    def vector(name, value):
        w.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))

    matrix("token_embd.weight", sd["model.embed_tokens.weight"])
    vector("output_norm.weight", sd["model.norm.weight"])
    matrix("output.weight", sd["lm_head.weight"])
    for i in range(c.num_hidden_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = adjacent_pair_rows(q, c.num_attention_heads), adjacent_pair_rows(k, c.num_key_value_heads)
        vector(b + "attn_norm.weight", sd[p + "input_layernorm.weight"])
        matrix(b + "attn_q.weight", q)
        matrix(b + "attn_k.weight", k)
        matrix(b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        matrix(b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        for hf, gg in [("q_proj.bias", "attn_q.bias"), ("k_proj.bias", "attn_k.bias"), ("v_proj.bias", "attn_v.bias"),
                       ("q_norm.weight", "attn_q_norm.weight"), ("k_norm.weight", "attn_k_norm.weight")]:
            if p + "self_attn." + hf in sd:
                vector(b + gg, sd[p + "self_attn." + hf])
        vector(b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        if arch == "llama":
            moe, names = p + "block_sparse_moe.", {"gate": "w1", "up": "w3", "down": "w2"}
        else:
            moe, names = p + "mlp.", {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
        vector(b + "ffn_gate_inp.weight", sd[moe + "gate.weight"])
        for part, hf in names.items():
            stacked = np.stack([sd[f"{moe}experts.{e}.{hf}.weight"] for e in range(n_experts)])
            matrix(b + f"ffn_{part}_exps.weight", stacked)
        if moe + "shared_expert_gate.weight" in sd:
            vector(b + "ffn_gate_inp_shexp.weight", sd[moe + "shared_expert_gate.weight"])
            for part, hf in names.items():
                matrix(b + f"ffn_{part}_shexp.weight", sd[f"{moe}shared_expert.{hf}.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequantized_like_q8(model):
    """The model with every matrix write_gguf quantizes replaced by its Q8_0 round trip."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2 and not name.endswith("mlp.gate.weight"):
                value = param.detach().float().numpy()
                q = gguf.quants.quantize(value, QT.Q8_0)
                param.copy_(torch.from_numpy(gguf.quants.dequantize(q, QT.Q8_0).reshape(value.shape)))
    return model


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    tokens, merges = make_tokenizer()
    tok_json = tokenizer_json(tokens, merges)
    for seed, (name, (config_cls, model_cls, kwargs, arch)) in enumerate(ARCHS.items()):
        target = OUT / name
        model = random_model(config_cls, model_cls, kwargs, seed).to(torch.float16)
        model.save_pretrained(target, safe_serialization=True)
        for extra in ["generation_config.json"]:
            if (target / extra).exists():
                (target / extra).unlink()
        (target / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False) + "\n")
        (target / "tokenizer_config.json").write_text(json.dumps(
            {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False,
             "tokenizer_class": "PreTrainedTokenizerFast"}) + "\n")
        for f in target.glob("*.safetensors"):
            f.chmod(0o644)
        ref_model = model_cls.from_pretrained(target, dtype=torch.float32).eval()
        cases, logits, gap = reference(ref_model, name)
        write_reference(name, ref_model, cases, logits,
                        "transformers float32 forward over the stored F16 weights; logits (positions, vocab) "
                        "per case, concatenated in the .f32 file; routing per MoE layer and token: top-k "
                        "expert ids by descending probability and their routing weights")
        write_gguf(OUT / f"{name}.gguf", ref_model, saved_tensors(target), arch, tokens, merges, QT.F16)
        print(f"{name}: routing gap {gap:.3g}")

    config_cls, model_cls, kwargs, arch = Q8_ARCH
    model = dequantized_like_q8(random_model(config_cls, model_cls, kwargs, 11))
    cases, logits, gap = reference(model, "qwen3moe-q8_0")
    write_reference("qwen3moe-q8_0", model, cases, logits,
                    "transformers float32 forward over the Q8_0 round trip of every matrix (routers and "
                    "norms stay float32)")
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        write_gguf(OUT / "qwen3moe-q8_0.gguf", model, saved_tensors(tmp), arch, tokens, merges, QT.Q8_0)
    print(f"qwen3moe-q8_0: routing gap {gap:.3g}")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"fixtures: {total / 1e3:.0f} KB")


if __name__ == "__main__":
    main()

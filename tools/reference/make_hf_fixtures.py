#!/usr/bin/env python3
"""Tiny random Llama checkpoints in Hugging Face layout for the HF-directory loader tests.

Writes tests/data/hf/tiny-llama-{f32-sharded,f16,bf16}/ with config.json, safetensors weights
(F32 forced into 2 shards + model.safetensors.index.json; F16 untied; BF16 tied), the SmolLM2
tokenizer files, and reference_logits.json: last-position logits computed by transformers in
float32 (weights upcast from the stored dtype) for a few fixed token sequences. The vocabulary
(49152) is SmolLM2's so the real tokenizer fits; everything else is tiny (hidden 8, 2 heads, 1 KV head)
to keep the fixtures under 8 MB, which is why reference_logits.json holds the top-32 logits and every 64th logit rather
than all 49152.

Setup (once):
    python3 -m venv /work/refenv && /work/refenv/bin/pip install gguf numpy torch transformers
The tokenizer files come from a transformers export of the SmolLM2 tokenizer (default
/tmp/smol_tok, override with --tokenizer-dir). Run:
    /work/refenv/bin/python tools/reference/make_hf_fixtures.py
"""
import argparse
import json
import os
import shutil
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "hf"
SEQUENCES = [[1, 504, 3458, 28, 905], [2], [4, 100, 200, 300, 400, 500, 600, 49151]]
TOP_K = 32
STRIDE = 64


def make_config(tied):
    return LlamaConfig(
        vocab_size=49152, hidden_size=8, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=4, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        initializer_range=0.2, tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2,
        architectures=["LlamaForCausalLM"])


def random_model(tied, seed):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(make_config(tied))
    with torch.no_grad():
        # Norm weights default to ones, which would hide a norm applied with the wrong weight.
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    return model.eval()


def reference_logits(model_dir):
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    cases = []
    with torch.no_grad():
        for tokens in SEQUENCES:
            logits = model(torch.tensor([tokens])).logits[0, -1].float()
            top = torch.topk(logits, TOP_K)
            cases.append({
                "tokens": tokens,
                "argmax": int(top.indices[0]),
                "top_k": [[int(i), float(v)] for i, v in zip(top.indices, top.values)],
                "strided_logits": [float(v) for v in logits[::STRIDE]],
            })
    return {
        "note": "last-position logits from transformers, float32 compute over the stored "
                f"weights; strided_logits[i] is the logit of token id {STRIDE}*i",
        "stride": STRIDE,
        "cases": cases,
    }


def copy_tokenizer(tokenizer_dir, target, first_dir):
    for name in ["tokenizer_config.json", "chat_template.jinja"]:
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, target / name)
    # tokenizer.json is 3.5 MB: keep one copy and link the others to it.
    if first_dir is None:
        shutil.copy(tokenizer_dir / "tokenizer.json", target / "tokenizer.json")
    else:
        link = target / "tokenizer.json"
        if link.exists() or link.is_symlink():
            link.unlink()
        os.symlink(Path("..") / first_dir.name / "tokenizer.json", link)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer-dir", type=Path, default=Path("/tmp/smol_tok"))
    args = parser.parse_args()

    variants = [  # name, dtype, tied, max_shard_size
        ("tiny-llama-f32-sharded", torch.float32, True, "1MB"),
        ("tiny-llama-f16", torch.float16, False, None),
        ("tiny-llama-bf16", torch.bfloat16, True, None),
    ]
    first_dir = None
    for seed, (name, dtype, tied, shard) in enumerate(variants):
        target = OUT / name
        if target.exists():
            shutil.rmtree(target)
        model = random_model(tied, seed).to(dtype)
        kwargs = {"safe_serialization": True}
        if shard:
            kwargs["max_shard_size"] = shard
        model.save_pretrained(target, **kwargs)
        if (target / "generation_config.json").exists():
            (target / "generation_config.json").unlink()
        copy_tokenizer(args.tokenizer_dir, target, first_dir)
        first_dir = first_dir or target
        refs = reference_logits(target)
        (target / "reference_logits.json").write_text(json.dumps(refs) + "\n")
        for weights in target.glob("*.safetensors"):
            weights.chmod(0o644)  # save_pretrained writes 0600
        files = sorted(p.name for p in target.iterdir())
        print(name, files)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"fixtures: {total / 1e6:.2f} MB (tokenizer.json stored once)")


if __name__ == "__main__":
    main()

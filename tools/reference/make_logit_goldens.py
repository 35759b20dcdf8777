#!/usr/bin/env python3
"""Reference logits and greedy continuations for SmolLM2-135M-Instruct.Q4_1.gguf from Hugging Face
transformers, for tests/engine/model/cpu_transformer_test.cpp (and the *_slow_test for long prompts).

Environment (a CPU-only venv; the one used lives at /work/refenv):

    python3 -m venv /work/refenv
    /work/refenv/bin/pip install torch
    /work/refenv/bin/pip install transformers accelerate gguf numpy

Run from the repository root (needs models/SmolLM2-135M-Instruct.Q4_1.gguf, scripts/fetch-model):

    /work/refenv/bin/python tools/reference/make_logit_goldens.py

transformers dequantizes the GGUF (Q4_1 layers, Q8_0 tied embeddings) to float32 and runs its float32
forward. Writes:
  tests/data/reference/smollm2_logits.json  prompts (token ids, so tests need no tokenizer), the last
                                            position's argmax/top-5, and 64-token greedy continuations
  tests/data/reference/smollm2_logits.f32   last-position logits, one (vocab,) little-endian float32
                                            vector per prompt, in the JSON's order
"""
import json
import pathlib

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "models"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_DIR = ROOT / "tests/data/reference"
CONTINUATION = 64


def chat(tok, text):
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


def main():
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=GGUF, dtype=torch.float32)
    model.eval()
    # Continuations run the full 64 tokens (no stop at <|im_end|>), so tests compare all of them
    # whatever a tokenizer counts as end-of-generation.
    model.generation_config.eos_token_id = None

    gpl3 = pathlib.Path("/usr/share/common-licenses/GPL-3").read_text()
    apache = pathlib.Path("/usr/share/common-licenses/Apache-2.0").read_text()
    prompts = [
        ("chat_capital", tok.encode(chat(tok, "What is the capital of France?"), add_special_tokens=False)),
        ("chat_poem", tok.encode(chat(tok, "Write a haiku about the sea."), add_special_tokens=False)),
        ("chat_math", tok.encode(chat(tok, "What is 17 times 23? Explain step by step."), add_special_tokens=False)),
        ("plain_story", tok.encode("Once upon a time, in a small village by the river,", add_special_tokens=False)),
        ("plain_code", tok.encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
                                  add_special_tokens=False)),
        ("single_token", tok.encode("Hello", add_special_tokens=False)),
        ("apache_1k", tok.encode(apache, add_special_tokens=False)[:1024]),
        ("gpl3_4k", tok.encode(gpl3, add_special_tokens=False)[:4096]),
    ]

    cases, vectors = [], []
    for name, ids in prompts:
        input_ids = torch.tensor([ids])
        with torch.no_grad():
            logits = model(input_ids).logits[0, -1].float().numpy()
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=CONTINUATION,
                                 do_sample=False, pad_token_id=0)
        continuation = out[0, len(ids):].tolist()
        top5 = np.argsort(-logits)[:5].tolist()
        cases.append({
            "name": name,
            "long": len(ids) >= 512,
            "tokens": ids,
            "argmax": int(np.argmax(logits)),
            "top5": [[int(i), float(logits[i])] for i in top5],
            "greedy": continuation,
            "greedy_text": tok.decode(continuation),
        })
        vectors.append(logits.astype("<f4"))
        print(f"{name}: {len(ids)} tokens, argmax {cases[-1]['argmax']}, continuation {cases[-1]['greedy_text']!r}")

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    doc = {
        "note": "last-position logits of transformers' float32 forward over the dequantized GGUF; "
                "vectors in smollm2_logits.f32 (vocab floats per case, in order); greedy = 64 tokens of "
                "generate(do_sample=False) with no end-of-generation stop",
        "model": GGUF,
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "vocab": int(vectors[0].shape[0]),
        "cases": cases,
    }
    (OUT_DIR / "smollm2_logits.json").write_text(json.dumps(doc) + "\n")
    np.concatenate(vectors).tofile(OUT_DIR / "smollm2_logits.f32")


if __name__ == "__main__":
    main()

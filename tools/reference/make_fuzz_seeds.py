#!/usr/bin/env python3
"""Seed corpora for tests/fuzz/{gguf,safetensors}_fuzz: a few small valid files and typical
malformed ones (each < 64 KB). Plain Python, no packages needed:
    python3 tools/reference/make_fuzz_seeds.py
"""
import json
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_SHARD = ROOT / "tests/data/hf/tiny-llama-f32-sharded/model-00002-of-00002.safetensors"


def gstr(text):
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv(key, type_id, payload):
    return gstr(key) + struct.pack("<I", type_id) + payload


def gguf(version=3, kvs=(), tensors=(), alignment=32, magic=b"GGUF", counts=None):
    """tensors: (name, dims, ggml_type, data bytes); data laid out aligned in order."""
    n_tensors, n_kvs = counts or (len(tensors), len(kvs))
    out = magic + struct.pack("<IQQ", version, n_tensors, n_kvs) + b"".join(kvs)
    offset, data = 0, b""
    for name, dims, ggml_type, blob in tensors:
        out += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        data += blob + b"\0" * (-len(blob) % alignment)
        offset = len(data)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def gguf_seeds():
    every_type = [
        kv("general.architecture", 8, gstr("llama")),
        kv("u8", 0, struct.pack("<B", 7)), kv("i8", 1, struct.pack("<b", -7)),
        kv("u16", 2, struct.pack("<H", 700)), kv("i16", 3, struct.pack("<h", -700)),
        kv("u32", 4, struct.pack("<I", 70000)), kv("i32", 5, struct.pack("<i", -70000)),
        kv("f32", 6, struct.pack("<f", 0.5)), kv("bool", 7, b"\x01"),
        kv("u64", 10, struct.pack("<Q", 1 << 40)), kv("i64", 11, struct.pack("<q", -(1 << 40))),
        kv("f64", 12, struct.pack("<d", 2.5)),
        kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + gstr("a") + gstr("b") + gstr("<s>")),
        kv("nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 1)
           + struct.pack("<IQ", 8, 1) + gstr("x")),
    ]
    tensors = [("token_embd.weight", [4, 2], 0, f32(range(8))),
               ("blk.0.attn_q.weight", [32], 8, b"\x00\x3c" + bytes(range(32))),
               ("blk.0.ffn_up.weight", [256], 12, bytes(144))]
    valid = gguf(3, every_type, tensors)
    seeds = {
        "valid_v3_every_type.gguf": valid,
        "valid_v2.gguf": gguf(2, every_type[:3], tensors[:1]),
        "valid_alignment_64.gguf": gguf(3, [kv("general.alignment", 4, struct.pack("<I", 64))],
                                        tensors, alignment=64),
        "truncated.gguf": valid[: len(valid) // 2],
        "bad_magic.gguf": gguf(3, every_type[:1], magic=b"GGUG"),
        "version_1.gguf": gguf(1, every_type[:1]),
        "absurd_counts.gguf": gguf(3, every_type[:1], counts=(1 << 60, 1)),
        "unknown_tensor_type.gguf": gguf(3, [], [("t", [4], 99, f32(range(4)))]),
    }
    if DEFAULT_MODEL.exists():  # real metadata, cut inside the token list
        seeds["smollm2_head.gguf"] = DEFAULT_MODEL.read_bytes()[:60000]
    return seeds


def safetensors(header, data):
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def safetensors_seeds():
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
              "b": {"dtype": "F16", "shape": [4], "data_offsets": [16, 24]},
              "c": {"dtype": "BF16", "shape": [1, 4], "data_offsets": [24, 32]}}
    valid = safetensors(header, bytes(range(32)))
    bad_dtype = dict(header, a={"dtype": "I64", "shape": [2], "data_offsets": [0, 16]})
    overlap = dict(header, b={"dtype": "F16", "shape": [4], "data_offsets": [8, 16]})
    seeds = {
        "valid.safetensors": valid,
        "empty_header.safetensors": safetensors({}, b""),
        "truncated.safetensors": valid[:40],
        "bad_dtype.safetensors": safetensors(bad_dtype, bytes(32)),
        "overlap.safetensors": safetensors(overlap, bytes(32)),
        "not_json.safetensors": struct.pack("<Q", 6) + b"{\"a\": ",
        "huge_header_length.safetensors": struct.pack("<Q", 1 << 62) + b"{}",
    }
    if TINY_SHARD.exists():  # a real transformers-written shard (the layers of the tiny model)
        seeds["tiny_llama_layers.safetensors"] = TINY_SHARD.read_bytes()
    return seeds


def main():
    for target, seeds in [("gguf_fuzz", gguf_seeds()), ("safetensors_fuzz", safetensors_seeds())]:
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, blob in seeds.items():
            assert len(blob) < 64 * 1024, name
            (folder / name).write_bytes(blob)
        print(target, len(seeds), "seeds")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference vectors for kernels/cpu/dequant from an independent implementation (gguf-py).

For each tensor type this writes tests/data/dequant/<TYPE>.bin (raw blocks, random but valid)
and tests/data/dequant/<TYPE>.f32 (the little-endian float32 values gguf.quants.dequantize
produces for them). tests/kernels/cpu/dequant_test.cpp compares Specula's kernels against them.

Setup (once):
    python3 -m venv /work/refenv && /work/refenv/bin/pip install gguf numpy
Run from anywhere:
    /work/refenv/bin/python tools/reference/make_dequant_vectors.py
"""
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "dequant"
SEED = 20240611

# type -> byte offsets of the f16 scale fields inside one block (ggml-common.h layouts).
F16_SCALE_OFFSETS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def sane_f16(rng, count):
    """Finite scales of both signs spanning a few decades, as real checkpoints have."""
    magnitude = 10.0 ** rng.uniform(-5, 0, count)
    sign = rng.choice([-1.0, 1.0], count)
    return (sign * magnitude).astype(np.float16)


def make_blocks(rng, qtype, n_blocks):
    elems, block_bytes = GGML_QUANT_SIZES[qtype]
    if qtype == T.F32:
        return rng.standard_normal(n_blocks * elems).astype(np.float32).view(np.uint8)
    if qtype in (T.F16, T.BF16):
        bits = rng.integers(0, 1 << 16, n_blocks * elems, dtype=np.uint32).astype(np.uint16)
        # Keep values finite: clear exponents that are all ones (inf/nan) for either format.
        exp_mask = 0x7C00 if qtype == T.F16 else 0x7F80
        bits[(bits & exp_mask) == exp_mask] &= np.uint16(~0x4000 & 0xFFFF)
        if qtype == T.F16:
            bits[:4] = [0x0001, 0x83FF, 0x0000, 0x8000]  # subnormals and signed zeros
        return bits.view(np.uint8)
    blocks = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint16).astype(np.uint8)
    for offset in F16_SCALE_OFFSETS[qtype]:
        blocks[:, offset:offset + 2] = sane_f16(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(-1)


def main():
    rng = np.random.default_rng(SEED)
    OUT.mkdir(parents=True, exist_ok=True)
    total = 0
    for qtype in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
                  T.Q4_K, T.Q5_K, T.Q6_K]:
        elems, _ = GGML_QUANT_SIZES[qtype]
        n_blocks = 8 if elems == 256 else (64 if elems == 32 else 512)
        raw = make_blocks(rng, qtype, n_blocks)
        expected = quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        assert expected.size == n_blocks * elems and np.all(np.isfinite(expected))
        (OUT / f"{qtype.name}.bin").write_bytes(raw.tobytes())
        (OUT / f"{qtype.name}.f32").write_bytes(expected.astype("<f4").tobytes())
        total += raw.nbytes + expected.nbytes
        print(f"{qtype.name}: {expected.size} elements")
    print(f"wrote {total} bytes to {OUT}")


if __name__ == "__main__":
    main()

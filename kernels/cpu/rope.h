#pragma once
// Rotary position embeddings. A position's rotation is a table of head_dim/2 (cos, sin)
// pairs; frequency i is theta^(-2i/head_dim), computed in float as Hugging Face does.
#include <cstdint>

namespace specula {

enum class RopePairing {
  Adjacent,   // dims (2i, 2i+1) rotate together (ggml "normal"; GGUF llama Q/K rows are permuted for it)
  HalfSplit,  // dims (i, i + head_dim/2) rotate together (HF rotate_half, "NeoX")
};

// cos_sin: (head_dim/2, 2) for `position`.
void rope_table(int64_t position, int64_t head_dim, float theta, float* cos_sin);
// Rotates n_heads vectors of head_dim, stored back to back in x, by one position's table.
void rope_apply(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, RopePairing pairing);

}  // namespace specula

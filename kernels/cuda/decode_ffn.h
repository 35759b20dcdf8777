#pragma once
// The FFN input of a decode step whose attention launch folded Wo in (decode_attention.h,
// DecodeWoFold): the residual after attention is x + parts[0] + ... + parts[n_parts − 1] (each
// head's share of Wo · att, added in head order), and this launch forms it, writes it to x_out
// (the residual the down projection then adds to) and computes xn = SwiGLU of rmsnorm(it) ·
// gate_upᵀ as skinny_gemm_norm_swiglu does. One launch instead of the Wo GEMM and the gate_up one.
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

using bf16_bits = uint16_t;

inline constexpr int kDecodeFfnMaxParts = 32;

// W: (2·ffn, K) bf16, gate rows [0, ffn), up rows [ffn, 2·ffn); x: K f32; parts: (n_parts, K)
// f32; gamma: K f32; xn: ffn f32 out; x_out: K f32 out (not x, which other blocks still read).
// Needs K % 8 == 0, 16-byte aligned W, x, parts, gamma and x_out, 1 ≤ n_parts ≤
// kDecodeFfnMaxParts and (1 + n_parts)·K·4 bytes of shared memory ≤ 96 KB; returns false
// (launching nothing) otherwise.
bool decode_residual_norm_swiglu(const bf16_bits* W, int64_t ffn, int64_t K, const float* x, const float* parts,
                                 int n_parts, const float* gamma, float eps, float* xn, float* x_out,
                                 cudaStream_t stream);

}  // namespace specula::cuda

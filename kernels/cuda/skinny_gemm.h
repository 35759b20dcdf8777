#pragma once
// Y(T, N) (+)= X(T, K) · W(N, K)ᵀ for the few rows of a decode or verify step: bf16 weights,
// f32 activations, f32 accumulation. Why our own: cuBLAS takes both operands in one type, so a
// bf16 GEMM would round every activation to bf16 (8 bits of mantissa) before each projection;
// over 30 layers that alone moved SmolLM2's logits by up to 2.6e-2 (relative L2) in a CPU
// simulation. With T ≤ kSkinnyMaxRows the step streams the weights once per 32 rows and is
// bound by that stream; whether it keeps up with cuBLAS is measured by bench_skinny_gemm.
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

using bf16_bits = uint16_t;

inline constexpr int64_t kSkinnyMaxRows = 64;

// W: (N, K) row-major bf16; X: (T, K) f32, row stride ld_x; Y: (T, N) f32, row stride ldy.
// Needs K % 8 == 0, ld_x % 4 == 0, 16-byte aligned W and X, and 1 ≤ T ≤ kSkinnyMaxRows; returns
// false (launching nothing) otherwise, so the caller can take another path.
bool skinny_gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y,
                 int64_t ldy, bool accumulate, cudaStream_t stream);

// out[i] = bf16(in[i]) (round to nearest even) for n values.
void f32_to_bf16(const float* in, int64_t n, bf16_bits* out, cudaStream_t stream);

}  // namespace specula::cuda

#pragma once
// Y(T, N) (+)= X(T, K) · W(N, K)ᵀ for the few rows of a decode step: bf16 weights, f32
// activations, f32 accumulation. Why our own: a cuBLAS GEMM costs 11-15 us on the H100 whatever
// the size of SmolLM2's small projections, our kernel 3-6 us at 1-4 rows, and at one row it also
// streams Llama-8B's weights a little faster (bench/results/skinny_gemm_h100_2026-11-22.json). It
// reads X once per weight element and row from L1, so above a few rows cuBLAS's tiled GEMM wins:
// skinny_gemm_pays() says where. Keeping X in f32 was also meant to close the CUDA backend's
// logits gap against the CPU; it did not (docs/correctness.md).
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

using bf16_bits = uint16_t;

inline constexpr int64_t kSkinnyMaxRows = 64;

// Where the skinny kernel beat cuBLAS's bf16 GEMM in that file: one row always, and up to 4
// rows for matrices of at most 4M weights (there both take a few microseconds).
inline bool skinny_gemm_pays(int64_t N, int64_t K, int64_t T) { return T == 1 || (T <= 4 && N * K <= (int64_t{4} << 20)); }

// W: (N, K) row-major bf16; X: (T, K) f32, row stride ld_x; Y: (T, N) f32, row stride ldy.
// Needs K % 8 == 0, ld_x % 4 == 0, 16-byte aligned W and X, and 1 ≤ T ≤ kSkinnyMaxRows; returns
// false (launching nothing) otherwise, so the caller can take another path.
bool skinny_gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y,
                 int64_t ldy, bool accumulate, cudaStream_t stream);

// out[i] = bf16(in[i]) (round to nearest even) for n values.
void f32_to_bf16(const float* in, int64_t n, bf16_bits* out, cudaStream_t stream);

}  // namespace specula::cuda

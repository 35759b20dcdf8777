#pragma once
// Y(T, N) (+)= X(T, K) · W(N, K)ᵀ for the few rows of a decode step: bf16 weights, f32
// activations, f32 accumulation. Why our own: a cuBLAS GEMM costs 11-15 us on the H100 whatever
// the size of SmolLM2's small projections, our kernel 3-6 us at 1-4 rows, and at one row it also
// streams Llama-8B's weights a little faster (bench/results/skinny_gemm_h100_2026-11-22.json). It
// reads X once per weight element and row from L1, so above a few rows cuBLAS's tiled GEMM wins:
// skinny_gemm_pays() says where. X stays f32, as the CPU's: rounding a projection's input to
// bf16 cost up to 3e-2 relative L2 in SmolLM2's logits (docs/correctness.md).
// 2026-11-24 (session 10), verify rows: the f32 kernels' arithmetic is pinned (round-to-nearest
// intrinsics in the old order), so a verify row equals the one-row decode kernel bit for bit by
// construction — left to the compiler, the one-row RMSNorm kernel's PTX summed x² in two orders
// in two steps. Past 4 rows the register kernel splits the rows into groups of 4 or 8, one block
// each, in one launch on SmolLM2's small grids, and the lm_head takes a kernel with X staged in
// shared memory and 4 outputs a warp. SmolLM2 greedy verify of 5 / 8 / 11 / 16 rows went
// 0.89 / 1.20 / 1.87 / 2.07 → 0.82 / 0.90 / 1.14 / 1.35 ms (decode step 0.41 ms, unchanged;
// bench/results/cuda_verify_rows_s10_h100_2026-11-24.json). Staging X for the layers' small
// matrices lost at every row count (their time is the latency chain of X loads, not L1 traffic).
// 2026-11-25 (session 11): the staged kernel runs as one wave of blocks looping over column tiles
// (X staged once a block), and the backend's lm_head takes RMSNorm as its own kernel: decode
// 2440-2467 -> 2514-2525 tokens/s, a 13-row verify 1.36 -> 1.28 ms
// (bench/results/cuda_verify_rows_s11_h100_2026-11-25.json).
// 2026-12-02 (session 17, H200): the one-row RMSNorm-fused products stage x ⊙ gamma once a block
// (OLMoE's QKV 13.6 -> 6.6 us), and rows longer than 2048 take the staged kernel from 3 rows,
// X in chunks past the stage from 5: Llama-8B's exact 5-row verify 11.07 -> 7.65 ms
// (bench/results/skinny_norm_row_s17_*, cuda_verify_rows_8b_s17_*, skinny_staged_chunks_s17_*).
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

using bf16_bits = uint16_t;

inline constexpr int64_t kSkinnyMaxRows = 64;

// Where the skinny kernel beats cuBLAS's bf16 GEMM and our tensor-core kernel: one row always,
// and up to 8 rows for matrices of at most 4M weights (there all take a few microseconds).
// (bench/results/skinny_gemm_h100_2026-11-24.json: on SmolLM2's projections our kernel at 8
// rows still matches the tensor-core one, which wins from 12 rows on the narrow ones.)
inline bool skinny_gemm_pays(int64_t N, int64_t K, int64_t T) {
  return T == 1 || (T <= 8 && N * K <= (int64_t{4} << 20));
}

// W: (N, K) row-major bf16; X: (T, K) f32, row stride ld_x; Y: (T, N) f32, row stride ldy.
// Needs K % 8 == 0, ld_x % 4 == 0, 16-byte aligned W and X, and 1 ≤ T ≤ kSkinnyMaxRows; returns
// false (launching nothing) otherwise, so the caller can take another path.
bool skinny_gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y,
                 int64_t ldy, bool accumulate, cudaStream_t stream);

// Output columns per warp of the multi-row kernel (2..16 rows; 1, 2 or 4, at most 2 for the
// SwiGLU fusion): 0 (the default) chooses by shape, -1 keeps every row count on the register
// kernel (X through L1). For tests and benchmarks; not thread-safe.
void set_skinny_outputs_per_warp(int outputs);
// Rows per block of the register kernel (4 or 8; -1 all rows in one block; 0, the default, by
// row count). For tests and benchmarks; not thread-safe.
void set_skinny_row_group(int rows);
// One-row RMSNorm-fused products (skinny_gemm_norm, skinny_gemm_norm_swiglu at T = 1) with the
// row's x ⊙ gamma staged once a block (true, the default) or each warp's own (false; the same
// bits). For tests and benchmarks; not thread-safe.
void set_skinny_norm_row_staged(bool on);

// The decode step's fusions (same constraints, plus a 16-byte aligned gamma (K) f32):
// Y(T, N) = rmsnorm(X) · Wᵀ, rmsnorm(x)[k] = x[k] · gamma[k] / sqrt(mean_k(x²) + eps).
// Replaces an RMSNorm kernel and the GEMM after it.
bool skinny_gemm_norm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T,
                      const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream);
// W: (2·ffn, K), gate rows [0, ffn), up rows [ffn, 2·ffn) (the fused gate_up matrix).
// Y(T, ffn) = silu(rmsnorm(X) · W_gateᵀ) ⊙ (rmsnorm(X) · W_upᵀ): RMSNorm, gate_up GEMM and SwiGLU
// in one kernel. At most 16 rows per pass over the weights.
bool skinny_gemm_norm_swiglu(const bf16_bits* W, int64_t ffn, int64_t K, const float* X, int64_t ld_x, int64_t T,
                             const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream);

// The same product on tensor cores for 1..16 rows: X split into bf16 hi + lo halves (see
// f32_to_bf16_split), so the products match f32 X to ~1e-5; W is read once whatever T is. Needs N and K multiples of
// 16, a 32-byte aligned W, 16-byte aligned X rows; returns false (launching nothing) otherwise.
inline constexpr int64_t kSkinnyTcMaxRows = 16;
bool skinny_gemm_tc(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y,
                    int64_t ldy, bool accumulate, cudaStream_t stream);
// The tensor-core path with skinny_gemm_norm's and skinny_gemm_norm_swiglu's fusions (a tree
// verify's RMSNorm + QKV and RMSNorm + gate_up + SwiGLU in one kernel each).
bool skinny_gemm_tc_norm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T,
                         const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream);
bool skinny_gemm_tc_norm_swiglu(const bf16_bits* W, int64_t ffn, int64_t K, const float* X, int64_t ld_x, int64_t T,
                                const float* gamma, float eps, float* Y, int64_t ldy, cudaStream_t stream);

// hi[i] = bf16(in[i]), lo[i] = bf16(in[i] − hi[i]): hi + lo carries ~16 significant bits of
// in[i]. Two bf16 GEMMs, over hi and then lo, give products within ~1e-5 of f32 X.
void f32_to_bf16_split(const float* in, int64_t n, bf16_bits* hi, bf16_bits* lo, cudaStream_t stream);

// Y(T, N) (+)= y2[0:T] + y2[T:2T], y2 row-major (2T, N): the products of the hi and lo halves
// when both went through one GEMM as 2T columns (one pass over the weights).
void add_split_halves(const float* y2, int64_t T, int64_t N, float* Y, int64_t ldy, bool accumulate,
                      cudaStream_t stream);

// out[i] = bf16(in[i]) (round to nearest even) for n values.
void f32_to_bf16(const float* in, int64_t n, bf16_bits* out, cudaStream_t stream);

}  // namespace specula::cuda

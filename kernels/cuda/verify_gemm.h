#pragma once
// Y (M, N) = X (M, K) · W (N, K)ᵀ for up to 128 rows of bf16 X: bf16 weights, f32 accumulation
// and output, on Hopper's warpgroup MMA (sm_90a). It serves the stacked split-halves products of
// a verify of 9-64 rows (CudaBackend's gemm_halves: X's hi rows, then its lo rows,
// f32_to_bf16_split in skinny_gemm.h), the shape that decides a tree verify's time on a large
// model: every weight is read once for all rows.
//
// Why our own: cuBLAS's GEMM at 60 rows (120 stacked) read Llama-8B's projections at 66-85% of
// the copy bandwidth on the H100 (bench/results/cuda_verify_8b_64k_profile_s14_h100_2026-11-25.json),
// and cuBLAS kernels cannot start under programmatic launch. Here a CTA streams a 128-row tile
// of W over a range of K through a TMA ring while its two consumer warpgroups run wgmma
// m64nNk16 with X as the B operand (swap-AB: the few X rows are the MMA's N), and projections
// with few tiles split K over a thread-block cluster whose CTAs sum their partial tiles through
// distributed shared memory in a fixed order (deterministic; no global workspace); its first
// ring of weights is in flight before the kernel ahead of it has finished.
// Where it stands (H200, bench/results/verify_gemm_sweep_s18c_*, GPU time through CUDA graphs):
// on Llama-8B's projections the better of cublasGemmEx and cuBLASLt is up to 24% faster (ours
// 64-89% of copy; on par on the lm_head at 97-98%); alone, SmolLM2's small products are
// 0.3-1.3 us slower than cuBLAS's 3-4.4 us, but in the verify the early weight stream pays: the
// CUDA backend takes it for SmolLM2's 17-48-row verifies only (CudaBackend's kVerifyGemmRows).
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::cuda {

inline constexpr int64_t kVerifyGemmMaxRows = 128;

// W: (N, K) row-major bf16; X: (M, K) row-major bf16 (row stride K); Y: (M, N) f32, row stride
// ldy ≥ N, overwritten. Needs 1 ≤ M ≤ kVerifyGemmMaxRows, K % 8 == 0, 16-byte aligned W and X,
// and a device of compute capability 9.0; returns false (launching nothing) otherwise, so the
// caller can take another path.
bool verify_gemm(const uint16_t* W, int64_t N, int64_t K, const uint16_t* X, int64_t M, float* Y, int64_t ldy,
                 cudaStream_t stream);

// The plan verify_gemm picks for a shape (a CTA always takes 128 W rows): K splits (cluster size,
// 1-8), the MMA's N (64 or 128 X rows) and the blocks of X rows (grid z; 2 where 65-128 rows take
// the 64-row MMA twice).
struct VerifyGemmPlan {
  int splits = 0;
  int x_rows = 0;
  int row_blocks = 0;
};
VerifyGemmPlan verify_gemm_plan(int64_t N, int64_t K, int64_t M);

// Forces the K splits (0 = by shape, else 1-8; at most K's 64-wide steps, 1 where the device
// cannot hold such a cluster). For tests and benchmarks; not thread-safe.
void set_verify_gemm_splits(int splits);
// Past 64 X rows: 0 = row blocks of 64 for weights that stay in L2, else one 128-row MMA; 1 =
// never row blocks; 2 = always. For tests and benchmarks; not thread-safe.
void set_verify_gemm_row_blocks(int mode);

}  // namespace specula::cuda

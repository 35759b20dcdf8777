#include "kernels/cuda/sparse_ffn.h"

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/warp_dot.cuh"

namespace specula::cuda {
namespace {

using warp_dot::dot_rows;
using warp_dot::warp_sum;

constexpr int kWarps = 8;           // one output (an active channel, or a row of Y) per warp
constexpr int kCompactThreads = 1024;

// The CPU's test, in the same f32 operations: |g / (1 + exp(−g))| ≥ tau.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// rows_kept[c] = |{t : |silu(gate[t][c])| ≥ tau}|, a thread per channel (reads coalesced along c).
__global__ void mask_kernel(const float* __restrict__ gate, int64_t F, int T, float tau, int32_t* __restrict__ rows_kept) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= F) return;
  int n = 0;
  for (int t = 0; t < T; ++t) n += fabsf(silu(gate[t * F + c])) >= tau;
  rows_kept[c] = n;
}

// One block lists the channels some row keeps, ascending (each thread a contiguous run of
// channels, placed by a block-wide exclusive scan), pads the list to a multiple of 8 with
// channel 0 (the gathers read whole 8-id groups; the up kernel zeroes those slots' activations)
// and writes the counts. Sums are of integers: the same on every run.
__global__ void __launch_bounds__(kCompactThreads) compact_kernel(const int32_t* __restrict__ rows_kept, int64_t F, int T,
                                                                  bool union_rows, int32_t* __restrict__ active,
                                                                  int32_t* __restrict__ counts) {
  using Scan = cub::BlockScan<int, kCompactThreads>;
  using Reduce = cub::BlockReduce<int, kCompactThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ typename Reduce::TempStorage reduce_storage;
  const int64_t per = (F + kCompactThreads - 1) / kCompactThreads;
  const int64_t begin = threadIdx.x * per, end = begin + per < F ? begin + per : F;
  int listed = 0, kept = 0;
  for (int64_t c = begin; c < end; ++c) {
    listed += rows_kept[c] > 0;
    kept += rows_kept[c];
  }
  int offset = 0, total = 0;
  Scan(scan_storage).ExclusiveSum(listed, offset, total);
  for (int64_t c = begin; c < end; ++c) {
    if (rows_kept[c] > 0) active[offset++] = static_cast<int32_t>(c);
  }
  const int kept_total = Reduce(reduce_storage).Sum(kept);  // valid in thread 0
  if (threadIdx.x < 8 && total + static_cast<int>(threadIdx.x) < ((total + 7) & ~7)) active[total + threadIdx.x] = 0;
  if (threadIdx.x == 0) {
    counts[0] = union_rows ? T * total : kept_total;
    counts[1] = total;
  }
}

// act[t][j] for the active slots j (a warp each), rows in passes of TC: the up row of channel
// active[j] dotted with X, times silu(gate), zero where row t drops the channel. The pad slots
// (count ≤ j < count rounded up to 8) get zeros.
template <int TC>
__global__ void __launch_bounds__(kWarps * 32) up_kernel(const bf16_bits* __restrict__ gate_up, int64_t dim, int64_t F,
                                                         const float* __restrict__ X, int64_t ld_x, int T,
                                                         const float* __restrict__ gate, float tau, bool union_rows,
                                                         const int32_t* __restrict__ active,
                                                         const int32_t* __restrict__ counts, float* __restrict__ act) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int n = counts[1];
  if (j >= ((n + 7) & ~7)) return;
  if (j >= n) {
    for (int t = lane; t < T; t += 32) act[t * F + j] = 0.0f;
    return;
  }
  const int64_t c = active[j];
  const uint16_t* const w[1] = {gate_up + (F + c) * dim};
  for (int t0 = 0; t0 < T; t0 += TC) {
    const int rows = T - t0 < TC ? T - t0 : TC;
    const float* x[TC];
#pragma unroll
    for (int t = 0; t < TC; ++t) x[t] = X + (t0 + (t < rows ? t : 0)) * ld_x;
    float acc[1][TC] = {};
    dot_rows<TC, 1>(w, nullptr, dim / 8, x, rows, acc);
#pragma unroll
    for (int t = 0; t < TC; ++t) {
      const float up = warp_sum(acc[0][t]);
      if (lane == 0 && t < rows) {
        const float s = silu(gate[(t0 + t) * F + c]);
        act[(t0 + t) * F + j] = union_rows || fabsf(s) >= tau ? s * up : 0.0f;
      }
    }
  }
}

// Y[t][d] (+)= Σ_j W_down[d][active[j]] · act[t][j], a warp per output column d.
template <int TC>
__global__ void __launch_bounds__(kWarps * 32) down_kernel(const bf16_bits* __restrict__ down, int64_t dim, int64_t F,
                                                           const float* __restrict__ act, int T,
                                                           const int32_t* __restrict__ active,
                                                           const int32_t* __restrict__ counts, float* __restrict__ Y,
                                                           int64_t ldy, bool accumulate) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (d >= dim) return;
  const int64_t k8 = (counts[1] + 7) / 8;
  const uint16_t* const w[1] = {down + d * F};
  for (int t0 = 0; t0 < T; t0 += TC) {
    const int rows = T - t0 < TC ? T - t0 : TC;
    const float* x[TC];
#pragma unroll
    for (int t = 0; t < TC; ++t) x[t] = act + (t0 + (t < rows ? t : 0)) * F;
    float acc[1][TC] = {};
    dot_rows<TC, 1>(w, active, k8, x, rows, acc);
#pragma unroll
    for (int t = 0; t < TC; ++t) {
      const float s = warp_sum(acc[0][t]);
      if (lane == 0 && t < rows) {
        float* y = Y + (t0 + t) * ldy + d;
        *y = accumulate ? *y + s : s;
      }
    }
  }
}

int64_t align16(int64_t bytes) { return (bytes + 15) & ~int64_t{15}; }

}  // namespace

size_t sparse_ffn_scratch_bytes(int64_t max_rows, int64_t F) {
  return static_cast<size_t>(2 * align16(max_rows * F * 4) + align16((F + 8) * 4) + align16(F * 4) + align16(2 * 4));
}

SparseFfnScratch sparse_ffn_scratch(void* base, int64_t max_rows, int64_t F) {
  auto* p = static_cast<char*>(base);
  SparseFfnScratch s;
  s.gate = reinterpret_cast<float*>(p);
  p += align16(max_rows * F * 4);
  s.act = reinterpret_cast<float*>(p);
  p += align16(max_rows * F * 4);
  s.active = reinterpret_cast<int32_t*>(p);
  p += align16((F + 8) * 4);
  s.rows_kept = reinterpret_cast<int32_t*>(p);
  p += align16(F * 4);
  s.counts = reinterpret_cast<int32_t*>(p);
  return s;
}

namespace {

bool sparse_ffn_shape_ok(const bf16_bits* gate_up, const bf16_bits* down, int64_t dim, int64_t F, const float* X,
                         int64_t ld_x, int64_t T, const SparseFfnScratch& s) {
  const bool aligned = reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(down) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(X) % 16 == 0 && reinterpret_cast<uintptr_t>(s.act) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(s.active) % 16 == 0;
  return T >= 1 && T <= kSparseFfnMaxRows && dim >= 8 && dim % 8 == 0 && F >= 8 && F % 8 == 0 && ld_x % 4 == 0 &&
         aligned && s.gate != nullptr && s.rows_kept != nullptr && s.counts != nullptr;
}

}  // namespace

bool sparse_ffn_from_gate(const bf16_bits* gate_up, const bf16_bits* down, int64_t dim, int64_t F, const float* X,
                          int64_t ld_x, int64_t T, float tau, bool union_rows, float* Y, int64_t ldy, bool accumulate,
                          const SparseFfnScratch& s, cudaStream_t stream) {
  if (!sparse_ffn_shape_ok(gate_up, down, dim, F, X, ld_x, T, s)) return false;
  const int rows = static_cast<int>(T);
  mask_kernel<<<static_cast<unsigned>((F + 255) / 256), 256, 0, stream>>>(s.gate, F, rows, tau, s.rows_kept);
  compact_kernel<<<1, kCompactThreads, 0, stream>>>(s.rows_kept, F, rows, union_rows, s.active, s.counts);
  warp_dot::with_rows<32>(T, [&](auto tc) {
    constexpr int TC = decltype(tc)::value;
    up_kernel<TC><<<static_cast<unsigned>(F / kWarps), kWarps * 32, 0, stream>>>(gate_up, dim, F, X, ld_x, rows, s.gate,
                                                                                   tau, union_rows, s.active, s.counts,
                                                                                   s.act);
    down_kernel<TC><<<static_cast<unsigned>((dim + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
        down, dim, F, s.act, rows, s.active, s.counts, Y, ldy, accumulate);
  });
  return true;
}

bool sparse_ffn(const bf16_bits* gate_up, const bf16_bits* down, int64_t dim, int64_t F, const float* X, int64_t ld_x,
                int64_t T, float tau, bool union_rows, float* Y, int64_t ldy, bool accumulate,
                const SparseFfnScratch& s, cudaStream_t stream) {
  if (!sparse_ffn_shape_ok(gate_up, down, dim, F, X, ld_x, T, s)) return false;
  // The dense gate. One row: the f32 skinny kernel. More: the tensor-core kernel in passes of up
  // to 16 rows (W_gate read once a pass); the f32 kernel's cost grows with every row (Llama-8B's
  // down: 47 us at 1 row, 352 at 16, bench/results/skinny_gemm_h100_2026-11-22.json). Large
  // matrices at many rows are cuBLAS's: call sparse_ffn_from_gate after the backend's GEMM.
  bool gate_ok = false;
  if (T > 1 && skinny_gemm_tc(gate_up, F, dim, X, ld_x, T < kSkinnyTcMaxRows ? T : kSkinnyTcMaxRows, s.gate, F, false,
                              stream)) {
    gate_ok = true;  // the first pass; the others have the same shapes and alignment
    for (int64_t t0 = kSkinnyTcMaxRows; t0 < T; t0 += kSkinnyTcMaxRows) {
      const int64_t rows = T - t0 < kSkinnyTcMaxRows ? T - t0 : kSkinnyTcMaxRows;
      gate_ok = gate_ok && skinny_gemm_tc(gate_up, F, dim, X + t0 * ld_x, ld_x, rows, s.gate + t0 * F, F, false, stream);
    }
  } else {
    gate_ok = skinny_gemm(gate_up, F, dim, X, ld_x, T, s.gate, F, false, stream);
  }
  if (!gate_ok) return false;
  return sparse_ffn_from_gate(gate_up, down, dim, F, X, ld_x, T, tau, union_rows, Y, ldy, accumulate, s, stream);
}

}  // namespace specula::cuda

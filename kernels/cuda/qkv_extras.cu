#include "kernels/cuda/qkv_extras.h"

#include <cuda_runtime.h>

#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/warp_dot.cuh"

namespace specula::cuda {
namespace {

using warp_dot::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// x[0..n) = x / rms(x) · w by one warp (the CPU's rmsnorm; its sum is in double, this one in
// f32: n ≤ a few thousand, far inside bf16's error).
__device__ void warp_rmsnorm(float* x, int64_t n, const float* __restrict__ w, float eps, int lane) {
  float s = 0.0f;
  for (int64_t i = lane; i < n; i += 32) s += x[i] * x[i];
  const float inv = rsqrtf(warp_sum(s) / static_cast<float>(n) + eps);
  for (int64_t i = lane; i < n; i += 32) x[i] = x[i] * inv * w[i];
}

// The whole-projection norm's values a thread holds in registers (q and k each): 16 a thread,
// projections up to 4096 wide (OLMoE's are 2048).
constexpr int kFullHeld = 16;

// The q and k parts of one row normed over each whole part (OLMoE), from registers: a thread
// loads its kHeld values of each at once, sums them, and scales what it holds. The arithmetic is
// the loop's that walked the row twice with dependent scalar loads (8.4 us a layer of an OLMoE
// decode step, bench/results/moe_norm_route_s17_h200_2026-12-02.json): a thread's x² in index
// order by fma, warp_sum, the warps' partial sums in order, x · inv · w; so the same bits.
template <int kHeld>
__device__ void full_norm_held(float* row, int64_t qd, int64_t kvd, const QkvExtrasParams& p, int warp, int lane) {
  __shared__ float partial[2][kWarps];
  float vq[kHeld], vk[kHeld];
#pragma unroll
  for (int j = 0; j < kHeld; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * kThreads;
    vq[j] = i < qd ? row[i] : 0.0f;
    vk[j] = i < kvd ? row[qd + i] : 0.0f;
  }
  float sq = 0.0f, sk = 0.0f;
#pragma unroll
  for (int j = 0; j < kHeld; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * kThreads;
    if (i < qd) sq = __fmaf_rn(vq[j], vq[j], sq);
    if (i < kvd) sk = __fmaf_rn(vk[j], vk[j], sk);
  }
  sq = warp_sum(sq);
  sk = warp_sum(sk);
  if (lane == 0) partial[0][warp] = sq, partial[1][warp] = sk;
  __syncthreads();
  float tq = 0.0f, tk = 0.0f;
  for (int i = 0; i < kWarps; ++i) tq = __fadd_rn(tq, partial[0][i]), tk = __fadd_rn(tk, partial[1][i]);
  const float iq = rsqrtf(__fadd_rn(__fdiv_rn(tq, static_cast<float>(qd)), p.eps));
  const float ik = rsqrtf(__fadd_rn(__fdiv_rn(tk, static_cast<float>(kvd)), p.eps));
#pragma unroll
  for (int j = 0; j < kHeld; ++j) {
    const int64_t i = threadIdx.x + int64_t{j} * kThreads;
    if (i < qd) row[i] = __fmul_rn(__fmul_rn(vq[j], iq), __ldg(p.q_norm + i));
    if (i < kvd) row[qd + i] = __fmul_rn(__fmul_rn(vk[j], ik), __ldg(p.k_norm + i));
  }
  __syncthreads();
}

// One block a row. Per-head norms are a warp each, in place in global memory; the
// whole-projection norm, whose sum needs the block, holds the row in registers (full_norm_held)
// or, past kFullHeld values a thread, walks it twice. qkv is written by the projection before:
// not __restrict__ (kernels/cuda/pdl.cuh).
__global__ void __launch_bounds__(kThreads) qkv_extras_kernel(float* qkv, int64_t ld, QkvExtrasParams p) {
  pdl_trigger();
  pdl_wait();  // the projection
  float* row = qkv + blockIdx.x * ld;
  const int64_t qd = p.n_heads * p.head_dim, kvd = p.n_kv_heads * p.head_dim, n = qd + 2 * kvd;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (p.bias) {
    // 8 values a thread at a time, all loaded before any is stored: with one at a time each add
    // waited for its loads behind the store before it (Qwen's rows are 6144 wide, 24 a thread).
    constexpr int kBatch = 8;
    for (int64_t i0 = threadIdx.x; i0 < n; i0 += kBatch * kThreads) {
      float v[kBatch], b[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t i = i0 + int64_t{j} * kThreads;
        v[j] = i < n ? row[i] : 0.0f;
        b[j] = i < n ? __ldg(p.bias + i) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t i = i0 + int64_t{j} * kThreads;
        if (i < n) row[i] = v[j] + b[j];
      }
    }
    __syncthreads();
  }
  if (p.norm == QkNormKind::kPerHead) {
    for (int64_t h = warp; h < p.n_heads + p.n_kv_heads; h += kWarps) {
      const bool q = h < p.n_heads;
      warp_rmsnorm(row + h * p.head_dim, p.head_dim, q ? p.q_norm : p.k_norm, p.eps, lane);
    }
    __syncthreads();
  } else if (p.norm == QkNormKind::kFull && qd <= kFullHeld * kThreads && kvd <= kFullHeld * kThreads) {
    if (qd <= 8 * kThreads && kvd <= 8 * kThreads) {
      full_norm_held<8>(row, qd, kvd, p, warp, lane);
    } else {
      full_norm_held<kFullHeld>(row, qd, kvd, p, warp, lane);
    }
  } else if (p.norm == QkNormKind::kFull) {
    __shared__ float partial[2][kWarps];
    float sq = 0.0f, sk = 0.0f;
    for (int64_t i = threadIdx.x; i < qd; i += kThreads) sq += row[i] * row[i];
    for (int64_t i = threadIdx.x; i < kvd; i += kThreads) sk += row[qd + i] * row[qd + i];
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    if (lane == 0) partial[0][warp] = sq, partial[1][warp] = sk;
    __syncthreads();
    float tq = 0.0f, tk = 0.0f;
    for (int i = 0; i < kWarps; ++i) tq += partial[0][i], tk += partial[1][i];
    const float iq = rsqrtf(tq / static_cast<float>(qd) + p.eps), ik = rsqrtf(tk / static_cast<float>(kvd) + p.eps);
    for (int64_t i = threadIdx.x; i < qd; i += kThreads) row[i] = row[i] * iq * p.q_norm[i];
    for (int64_t i = threadIdx.x; i < kvd; i += kThreads) row[qd + i] = row[qd + i] * ik * p.k_norm[i];
    __syncthreads();
  }
  if (p.clip > 0.0f) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) row[i] = fminf(fmaxf(row[i], -p.clip), p.clip);
  }
}

__global__ void add_bias_kernel(float* __restrict__ x, int64_t ld, int64_t dim, const float* __restrict__ bias) {
  pdl_trigger();
  pdl_wait();  // the output projection
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < dim) x[blockIdx.y * ld + i] += bias[i];
}

}  // namespace

void qkv_extras_rows(float* qkv, int64_t ld, int64_t T, const QkvExtrasParams& p, cudaStream_t stream) {
  if (!p.active() || T <= 0) return;
  launch_pdl(qkv_extras_kernel, dim3(static_cast<unsigned>(T)), dim3(kThreads), 0, stream, qkv, ld, p);
}

void add_bias_rows(float* x, int64_t ld, int64_t T, int64_t dim, const float* bias, cudaStream_t stream) {
  if (T <= 0 || dim <= 0) return;
  launch_pdl(add_bias_kernel, dim3(static_cast<unsigned>((dim + 255) / 256), static_cast<unsigned>(T)), dim3(256), 0,
             stream, x, ld, dim, bias);
}

}  // namespace specula::cuda

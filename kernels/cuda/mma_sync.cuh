#pragma once
// mma.sync-era building blocks shared by the attention kernels (tree_attention.cu and its
// wgmma fragments, prefill_attention.cu): cp.async copies, bf16 m16n8k16 MMA, ldmatrix, a one-MUFU
// exp2 and bf16 packing. Device-only inline functions; include from .cu files.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specula::cuda {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// 2^x in one MUFU.EX2 (exp2f adds range checks and a denormal path: ~5 instructions). ftz: results
// under 2^-126 become 0, which the softmax weights can afford; 2^-inf = 0 (masked keys).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Row r (0: g, 1: g + 8) of a warp's m16n8 scores s (key 8j + 2t + c at s[4j + 2r + c]): the
// thread's max over its keys, and p = 2^(s * scale_log2 - offset) in place with the thread's sum
// of p. Four partial results each, combined as a tree: one chain of dependent fmax / add steps a
// row was the longest dependency of a softmax stage (ncu at 48-64 nodes, 12-07 session 27: warps
// stalled on fixed-latency dependencies).
template <int N>
__device__ __forceinline__ float row_max(const float (&s)[N], int r) {
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
  for (int j = 0; j < N / 4; ++j) m[j % 4] = fmaxf(m[j % 4], fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
  return fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3]));
}
template <int N>
__device__ __forceinline__ float exp_row(float (&s)[N], int r, float scale_log2, float offset) {
  float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < N / 4; ++j)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float& x = s[4 * j + 2 * r + c];
      x = ex2(fmaf(x, scale_log2, -offset));
      sum[(2 * j + c) % 4] += x;
    }
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// The online-softmax step of a warp's two rows of a 16-row tile (g and g + 8) over N / 4 8-key
// n-tiles of scores s, laid out as m16n8 accumulators (row g + 8r, key 8j + 2t + c at
// s[4j + 2r + c]; masked keys already -inf) with mx the thread's own row maxima over them.
// Reduces mx over the row's 4 lanes, updates the running max (of the unscaled scores) and sum,
// turns s into p = 2^(s * scale_log2 - max * scale_log2) in place (one FFMA and one MUFU a score)
// and sets alpha, the rescale of O's rows. Returns whether this thread's max moved (the caller
// votes: once the maxima settle, whole warps skip rescaling O).
template <int N>
__device__ __forceinline__ bool online_softmax_update(float (&s)[N], float (&mx)[2], float scale_log2,
                                                      float (&m_run)[2], float (&l_run)[2], float (&alpha)[2]) {
#pragma unroll
  for (int x = 1; x <= 2; x *= 2)
#pragma unroll
    for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], x));
  bool moved = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m_run[r], mx[r]);
    // A row with nothing visible yet keeps max -inf: offset 0, so its -inf scores give p = 0.
    const float offset = m_new == -INFINITY ? 0.f : m_new * scale_log2;
    alpha[r] = m_new == m_run[r] ? 1.f : ex2(fmaf(m_run[r], scale_log2, -offset));
    moved = moved || m_new != m_run[r];
    m_run[r] = m_new;
    l_run[r] = fmaf(l_run[r], alpha[r], exp_row(s, r, scale_log2, offset));
  }
  return moved;
}

}  // namespace specula::cuda

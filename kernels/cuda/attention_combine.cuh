#pragma once
// The score and the end of a one-query attention block, shared by model_ops.cu's attention_kernel,
// decode_attention.cu's fused kernels and shared_kv_attention.cu (all must give the same bits): the warps' online
// softmax states (max, sum, unnormalised values in shared memory) combined into one row, written
// as the output, or, with the context split over several blocks, into this block's partial slot,
// where the last block of the (token, head) pair to finish merges every slot and resets the
// pair's counter for the next launch (a graph replay finds it at zero).
#include <cuda_runtime.h>

#include "kernels/cuda/model_ops.h"

namespace specula::cuda {

// Butterfly sum and max over a warp (every lane gets the result), in one order for every kernel
// that includes this header.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// q · k over 8 dimensions: q in f32, k as 8 bf16 in one 16-byte load (a bf16 is the upper half of
// an f32), summed in this one order by every kernel's score loop (`dot += key_dot8(...)`). The
// products and sums are written out as intrinsics: left to the compiler, a · b + c · d may fuse
// either product, and it did not choose alike in every kernel (shared_kv_attention.cu's first
// build differed from attention_kernel in the last bits).
__device__ __forceinline__ float key_dot8(const float* q, uint4 w) {
  float r = __fmul_rn(q[0], __uint_as_float(w.x << 16));
  r = __fmaf_rn(q[1], __uint_as_float(w.x & 0xffff0000u), r);
  r = __fmaf_rn(q[2], __uint_as_float(w.y << 16), r);
  r = __fmaf_rn(q[3], __uint_as_float(w.y & 0xffff0000u), r);
  r = __fmaf_rn(q[4], __uint_as_float(w.z << 16), r);
  r = __fmaf_rn(q[5], __uint_as_float(w.z & 0xffff0000u), r);
  r = __fmaf_rn(q[6], __uint_as_float(w.w << 16), r);
  return __fmaf_rn(q[7], __uint_as_float(w.w & 0xffff0000u), r);
}

// acc += p · v over 8 dimensions, v as 8 bf16 in one 16-byte load: the value side of every
// kernel's online softmax.
__device__ __forceinline__ void add_weighted_value8(float (&acc)[8], float p, uint4 v) {
  acc[0] = __fmaf_rn(p, __uint_as_float(v.x << 16), acc[0]);
  acc[1] = __fmaf_rn(p, __uint_as_float(v.x & 0xffff0000u), acc[1]);
  acc[2] = __fmaf_rn(p, __uint_as_float(v.y << 16), acc[2]);
  acc[3] = __fmaf_rn(p, __uint_as_float(v.y & 0xffff0000u), acc[3]);
  acc[4] = __fmaf_rn(p, __uint_as_float(v.z << 16), acc[4]);
  acc[5] = __fmaf_rn(p, __uint_as_float(v.z & 0xffff0000u), acc[5]);
  acc[6] = __fmaf_rn(p, __uint_as_float(v.w << 16), acc[6]);
  acc[7] = __fmaf_rn(p, __uint_as_float(v.w & 0xffff0000u), acc[7]);
}

// The warps' states of one (token, head) pair combined: sm_m, sm_l (kWarps) per-warp max and
// sum. weights[w] scales warp w's values; returns the pair's max, and its sum in *denom.
template <int kWarps>
__device__ __forceinline__ float warp_weights(const float* sm_m, const float* sm_l, float (&weights)[kWarps],
                                              float* denom) {
  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm_m[w]);
  float d = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weights[w] = sm_m[w] == -INFINITY ? 0.0f : expf(sm_m[w] - m_all);
    d = __fmaf_rn(weights[w], sm_l[w], d);
  }
  *denom = d;
  return m_all;
}

// Dimension d of the pair's combined unnormalised values (sm_acc: (kWarps, kStride)).
template <int kWarps, int kStride>
__device__ __forceinline__ float combined_value(const float (&weights)[kWarps], const float (*sm_acc)[kStride],
                                                int64_t d) {
  float v = 0.0f;
  for (int w = 0; w < kWarps; ++w) v = __fmaf_rn(weights[w], sm_acc[w][d], v);
  return v;
}

// One pair's `parts` split slots (all: its first slot; a slot is max, sum, then hd values) merged
// into out, dims first, first + stride, ...; every thread that calls it computes the same max and
// sum. The slots' loads are issued 8 at a time ahead of their sums, in slot order: the merge of
// 32 slots, a dependent L2 load each, had been ~16 us a pair (shared_kv_attention.cu merges up to
// 8 pairs in one block). Every slot s < parts was written by its block (empty ones: max -inf, 0s).
__device__ __forceinline__ void merge_split_partials(const float* all, int64_t parts, int64_t hd, float* out,
                                                     int64_t first, int64_t stride) {
  constexpr int kAhead = 8;
  const int64_t slot = hd + 2;
  float m_max = -INFINITY;
  for (int64_t s = 0; s < parts; ++s) m_max = fmaxf(m_max, __ldcg(all + s * slot));
  float l_sum = 0.0f;
  for (int64_t s0 = 0; s0 < parts; s0 += kAhead) {
    float ms[kAhead], ls[kAhead];
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      const bool in = s0 + i < parts;
      ms[i] = in ? __ldcg(all + (s0 + i) * slot) : -INFINITY;
      ls[i] = in ? __ldcg(all + (s0 + i) * slot + 1) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kAhead; ++i)
      if (ms[i] != -INFINITY) l_sum = __fmaf_rn(expf(ms[i] - m_max), ls[i], l_sum);
  }
  for (int64_t d = first; d < hd; d += stride) {
    float v = 0.0f;
    for (int64_t s0 = 0; s0 < parts; s0 += kAhead) {
      float ms[kAhead], x[kAhead];
#pragma unroll
      for (int i = 0; i < kAhead; ++i) {
        const bool in = s0 + i < parts;
        ms[i] = in ? __ldcg(all + (s0 + i) * slot) : -INFINITY;
        x[i] = in ? __ldcg(all + (s0 + i) * slot + 2 + d) : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kAhead; ++i)
        if (ms[i] != -INFINITY) v = __fmaf_rn(expf(ms[i] - m_max), x[i], v);
    }
    out[d] = l_sum > 0.0f ? v / l_sum : 0.0f;
  }
}

// sm_m, sm_l: (kWarps) per-warp max and sum; sm_acc: (kWarps, kStride) unnormalised values, hd of
// each row used. out: the pair's hd outputs. With parts > 1, slot is this block's part of the
// pair's `parts` (slots are split.splits apart per pair) and split holds the workspace.
template <int kWarps, int kStride>
__device__ __forceinline__ void combine_attention_row(const float* sm_m, const float* sm_l,
                                                      const float (*sm_acc)[kStride], int64_t hd, float* out,
                                                      const AttentionSplit& split, int64_t pair, int64_t slot,
                                                      int64_t parts) {
  float weights[kWarps], denom;
  const float m_all = warp_weights<kWarps>(sm_m, sm_l, weights, &denom);
  if (parts <= 1) {
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
      const float v = combined_value<kWarps, kStride>(weights, sm_acc, d);
      out[d] = denom > 0.0f ? v / denom : 0.0f;
    }
    return;
  }
  float* mine = split.partial + (pair * split.splits + slot) * (hd + 2);
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x)
    mine[2 + d] = combined_value<kWarps, kStride>(weights, sm_acc, d);
  if (threadIdx.x == 0) {
    mine[0] = m_all;
    mine[1] = denom;
  }
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(split.counters + pair, 1) == parts - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  merge_split_partials(split.partial + pair * split.splits * (hd + 2), parts, hd, out, threadIdx.x, blockDim.x);
  if (threadIdx.x == 0) split.counters[pair] = 0;
}

}  // namespace specula::cuda

#pragma once
// The score and the end of a one-query attention block, shared by model_ops.cu's attention_kernel and
// decode_attention.cu's fused decode kernel (the two must give the same bits): the warps' online
// softmax states (max, sum, unnormalised values in shared memory) combined into one row, written
// as the output, or, with the context split over several blocks, into this block's partial slot,
// where the last block of the (token, head) pair to finish merges every slot and resets the
// pair's counter for the next launch (a graph replay finds it at zero).
#include <cuda_runtime.h>

#include "kernels/cuda/model_ops.h"

namespace specula::cuda {

// q · k over 8 dimensions: q in f32, k as 8 bf16 in one 16-byte load (a bf16 is the upper half of
// an f32), summed in this one order by both kernels' score loops (`dot += key_dot8(...)`).
__device__ __forceinline__ float key_dot8(const float* q, uint4 w) {
  return q[0] * __uint_as_float(w.x << 16) + q[1] * __uint_as_float(w.x & 0xffff0000u) +
         q[2] * __uint_as_float(w.y << 16) + q[3] * __uint_as_float(w.y & 0xffff0000u) +
         q[4] * __uint_as_float(w.z << 16) + q[5] * __uint_as_float(w.z & 0xffff0000u) +
         q[6] * __uint_as_float(w.w << 16) + q[7] * __uint_as_float(w.w & 0xffff0000u);
}

// acc += p · v over 8 dimensions, v as 8 bf16 in one 16-byte load: the value side of both
// kernels' online softmax.
__device__ __forceinline__ void add_weighted_value8(float (&acc)[8], float p, uint4 v) {
  acc[0] += p * __uint_as_float(v.x << 16);
  acc[1] += p * __uint_as_float(v.x & 0xffff0000u);
  acc[2] += p * __uint_as_float(v.y << 16);
  acc[3] += p * __uint_as_float(v.y & 0xffff0000u);
  acc[4] += p * __uint_as_float(v.z << 16);
  acc[5] += p * __uint_as_float(v.z & 0xffff0000u);
  acc[6] += p * __uint_as_float(v.w << 16);
  acc[7] += p * __uint_as_float(v.w & 0xffff0000u);
}

// sm_m, sm_l: (kWarps) per-warp max and sum; sm_acc: (kWarps, kStride) unnormalised values, hd of
// each row used. out: the pair's hd outputs. With parts > 1, slot is this block's part of the
// pair's `parts` (slots are split.splits apart per pair) and split holds the workspace.
template <int kWarps, int kStride>
__device__ __forceinline__ void combine_attention_row(const float* sm_m, const float* sm_l,
                                                      const float (*sm_acc)[kStride], int64_t hd, float* out,
                                                      const AttentionSplit& split, int64_t pair, int64_t slot,
                                                      int64_t parts) {
  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, sm_m[w]);
  float weights[kWarps], denom = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    weights[w] = sm_m[w] == -INFINITY ? 0.0f : expf(sm_m[w] - m_all);
    denom += weights[w] * sm_l[w];
  }
  if (parts <= 1) {
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
      float v = 0.0f;
      for (int w = 0; w < kWarps; ++w) v += weights[w] * sm_acc[w][d];
      out[d] = denom > 0.0f ? v / denom : 0.0f;
    }
    return;
  }
  float* mine = split.partial + (pair * split.splits + slot) * (hd + 2);
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w) v += weights[w] * sm_acc[w][d];
    mine[2 + d] = v;
  }
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
  const float* all = split.partial + pair * split.splits * (hd + 2);
  float m_max = -INFINITY;
  for (int64_t s = 0; s < parts; ++s) m_max = fmaxf(m_max, __ldcg(all + s * (hd + 2)));
  float l_sum = 0.0f;
  for (int64_t s = 0; s < parts; ++s) {
    const float ms = __ldcg(all + s * (hd + 2));
    if (ms != -INFINITY) l_sum += expf(ms - m_max) * __ldcg(all + s * (hd + 2) + 1);
  }
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int64_t s = 0; s < parts; ++s) {
      const float ms = __ldcg(all + s * (hd + 2));
      if (ms != -INFINITY) v += expf(ms - m_max) * __ldcg(all + s * (hd + 2) + 2 + d);
    }
    out[d] = l_sum > 0.0f ? v / l_sum : 0.0f;
  }
  if (threadIdx.x == 0) split.counters[pair] = 0;
}

}  // namespace specula::cuda

#pragma once
// Device helpers of the paged KV cache (PagedKvLayer, kernels/cuda/model_ops.h) shared by
// model_ops.cu's append kernels and decode_attention.cu's fused kernels, which must lay rows out
// and fold block min/max the same way.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/model_ops.h"

namespace specula::cuda::paged_kv {

__device__ __forceinline__ float bf(bf16_bits v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
__device__ __forceinline__ bf16_bits to_bf(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

// Element offset of logical row `row`, KV head `head` in kv.keys / kv.values: a block holds
// block_size rows of each KV head one after another.
__device__ __forceinline__ int64_t slot_row(const PagedKvLayer& kv, int64_t row, int64_t head) {
  const int64_t phys = kv.block_table[row / kv.block_size];
  return ((phys * kv.n_kv_heads + head) * kv.block_size + row % kv.block_size) * kv.head_dim;
}

// Folds a new key into its block's min/max at element i (the first row of a block starts it).
// Compared in f32 and stored as bf16: exact, as both operands are bf16 (PagedKvLayer says why).
__device__ __forceinline__ void update_min_max(const PagedKvLayer& kv, int64_t i, bf16_bits key, bool first_in_block) {
  if (first_in_block) {
    kv.key_min[i] = key;
    kv.key_max[i] = key;
    return;
  }
  const float k = bf(key);
  kv.key_min[i] = to_bf(fminf(bf(kv.key_min[i]), k));
  kv.key_max[i] = to_bf(fmaxf(bf(kv.key_max[i]), k));
}

}  // namespace specula::cuda::paged_kv

#include "kernels/cuda/sparse_verify.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace specula::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_of(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

__global__ void q_rows_to_bf16_kernel(const float* __restrict__ qkv, int64_t ld, int64_t T, int64_t q_dim,
                                      const int32_t* __restrict__ order, __nv_bfloat16* __restrict__ q) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * q_dim; i += int64_t{gridDim.x} * blockDim.x) {
    q[i] = __float2bfloat16_rn(qkv[order[i / q_dim] * ld + i % q_dim]);
  }
}

__global__ void rows_bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ in, int64_t T, int64_t width,
                                        const int32_t* __restrict__ order, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * width; i += int64_t{gridDim.x} * blockDim.x) {
    out[order[i / width] * width + i % width] = __bfloat162float(in[i]);
  }
}

// One CTA per (group, kv head): each listed committed block sets the byte of every member node.
__global__ void visibility_kernel(BlockLists lists, int kv_heads, int committed_blocks, const int32_t* __restrict__ order,
                                  uint8_t* __restrict__ visible) {
  const int group = blockIdx.x, kvh = blockIdx.y;
  const int count = lists.counts[group * kv_heads + kvh];
  const size_t base = (size_t(group) * kv_heads + kvh) * lists.max_blocks;
  for (int e = threadIdx.x; e < count; e += blockDim.x) {
    const int b = lists.blocks[base + e];
    if (b >= committed_blocks) continue;
    for (uint64_t m = lists.members[base + e]; m != 0; m &= m - 1) {
      const int node = __ffsll(static_cast<long long>(m)) - 1;
      visible[(size_t(order[node]) * kv_heads + kvh) * committed_blocks + b] = 1;
    }
  }
}

__global__ void listed_rows_kernel(BlockLists lists, int kv_heads, int64_t committed, int block_size,
                                   unsigned long long* __restrict__ rows) {
  const int group = blockIdx.x, kvh = blockIdx.y;
  const int count = lists.counts[group * kv_heads + kvh];
  const size_t base = (size_t(group) * kv_heads + kvh) * lists.max_blocks;
  unsigned long long sum = 0;
  for (int e = threadIdx.x; e < count; e += blockDim.x) {
    const int64_t first = int64_t{lists.blocks[base + e]} * block_size;
    if (first < committed) sum += static_cast<unsigned long long>(min(int64_t{block_size}, committed - first));
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0 && sum) atomicAdd(rows, sum);
}

}  // namespace

void q_rows_to_bf16(const float* qkv, int64_t ld, int64_t T, int64_t q_dim, const int32_t* order, uint16_t* q,
                    cudaStream_t stream) {
  q_rows_to_bf16_kernel<<<grid_of(T * q_dim), kThreads, 0, stream>>>(qkv, ld, T, q_dim, order,
                                                                     reinterpret_cast<__nv_bfloat16*>(q));
}

void rows_bf16_to_f32(const uint16_t* in, int64_t T, int64_t width, const int32_t* order, float* out,
                      cudaStream_t stream) {
  rows_bf16_to_f32_kernel<<<grid_of(T * width), kThreads, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(in), T,
                                                                       width, order, out);
}

void block_lists_to_visibility(const BlockLists& lists, int T, int kv_heads, int committed_blocks, const int32_t* order,
                               uint8_t* visible, cudaStream_t stream) {
  cudaMemsetAsync(visible, 0, size_t(T) * kv_heads * committed_blocks, stream);
  visibility_kernel<<<dim3(lists.groups, kv_heads), 128, 0, stream>>>(lists, kv_heads, committed_blocks, order, visible);
}

void add_listed_rows(const BlockLists& lists, int kv_heads, int64_t committed, int block_size,
                     unsigned long long* rows, cudaStream_t stream) {
  listed_rows_kernel<<<dim3(lists.groups, kv_heads), 128, 0, stream>>>(lists, kv_heads, committed, block_size, rows);
}

}  // namespace specula::cuda

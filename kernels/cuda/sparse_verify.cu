#include "kernels/cuda/sparse_verify.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/pdl.cuh"

namespace specula::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_of(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

// The row adapters run under programmatic launch (pdl.cuh) between the verify's RoPE, attention
// and Wo GEMM: their inputs come from the kernel before, so they are not `const __restrict__`.
__global__ void q_rows_to_bf16_kernel(const float* qkv, int64_t ld, int64_t T, int64_t q_dim, const int32_t* order,
                                      __nv_bfloat16* q) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * q_dim; i += int64_t{gridDim.x} * blockDim.x) {
    q[i] = __float2bfloat16_rn(qkv[order[i / q_dim] * ld + i % q_dim]);
  }
}

__global__ void rows_bf16_to_f32_kernel(const __nv_bfloat16* in, int64_t T, int64_t width, const int32_t* order,
                                        float* out) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * width; i += int64_t{gridDim.x} * blockDim.x) {
    out[order[i / width] * width + i % width] = __bfloat162float(in[i]);
  }
}

// f32_to_bf16_split's arithmetic (skinny_gemm.cu) on rows_bf16_to_f32's value, so the halves are
// those the two launches wrote (lo is +0 for every finite bf16 input).
__global__ void rows_bf16_to_split_kernel(const __nv_bfloat16* in, int64_t T, int64_t width, const int32_t* order,
                                          uint16_t* hi, uint16_t* lo) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * width;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float f = __bfloat162float(in[i]);
    const __nv_bfloat16 h = __float2bfloat16_rn(f);
    const int64_t at = order[i / width] * width + i % width;
    hi[at] = __bfloat16_as_ushort(h);
    lo[at] = __bfloat16_as_ushort(__float2bfloat16_rn(f - __bfloat162float(h)));
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
                                   unsigned long long* rows) {
  pdl_trigger();
  pdl_wait();  // the lists come from the selection just before
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
  launch_pdl(q_rows_to_bf16_kernel, dim3(grid_of(T * q_dim)), dim3(kThreads), 0, stream, qkv, ld, T, q_dim, order,
             reinterpret_cast<__nv_bfloat16*>(q));
}

void rows_bf16_to_f32(const uint16_t* in, int64_t T, int64_t width, const int32_t* order, float* out,
                      cudaStream_t stream) {
  launch_pdl(rows_bf16_to_f32_kernel, dim3(grid_of(T * width)), dim3(kThreads), 0, stream,
             reinterpret_cast<const __nv_bfloat16*>(in), T, width, order, out);
}

void rows_bf16_to_split(const uint16_t* in, int64_t T, int64_t width, const int32_t* order, uint16_t* hi, uint16_t* lo,
                        cudaStream_t stream) {
  launch_pdl(rows_bf16_to_split_kernel, dim3(grid_of(T * width)), dim3(kThreads), 0, stream,
             reinterpret_cast<const __nv_bfloat16*>(in), T, width, order, hi, lo);
}

void block_lists_to_visibility(const BlockLists& lists, int T, int kv_heads, int committed_blocks, const int32_t* order,
                               uint8_t* visible, cudaStream_t stream) {
  cudaMemsetAsync(visible, 0, size_t(T) * kv_heads * committed_blocks, stream);
  visibility_kernel<<<dim3(lists.groups, kv_heads), 128, 0, stream>>>(lists, kv_heads, committed_blocks, order, visible);
}

void add_listed_rows(const BlockLists& lists, int kv_heads, int64_t committed, int block_size,
                     unsigned long long* rows, cudaStream_t stream) {
  launch_pdl(listed_rows_kernel, dim3(lists.groups, kv_heads), dim3(128), 0, stream, lists, kv_heads, committed,
             block_size, rows);
}

}  // namespace specula::cuda

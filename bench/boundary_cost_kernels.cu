// Kernels of bench_boundary_cost (bench/boundary_cost.cpp): what one stage boundary of a decode
// step costs as a kernel boundary (a graph of chained launches, with and without programmatic
// dependent launch) against a grid-wide barrier inside one persistent kernel. A stage is the
// smallest dependent step: each thread reads one float another block wrote in the stage before
// (an L2 round trip) and writes one.
#include <cuda_runtime.h>

#include "bench/boundary_cost_kernels.h"
#include "kernels/cuda/pdl.cuh"

namespace specula::bench {
namespace {

// next[i] = prev[(i · 7919) mod n] + 1: every element depends on another block's.
__device__ __forceinline__ void stage(const float* prev, float* next, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) next[i] = __ldcg(prev + (i * 7919) % n) + 1.0f;
}

__global__ void stage_kernel(const float* prev, float* next, int64_t n, bool work) {
  cuda::pdl_trigger();
  cuda::pdl_wait();
  if (work) stage(prev, next, n);
}

// A sense-free grid barrier: arrivals counted in *count (reset by the last block), the release
// published as a new value of *generation (which only grows, so graph replays need no reset).
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned* generation) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned g;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(g) : "l"(generation) : "memory");
    __threadfence();
    if (atomicAdd(count, 1u) == gridDim.x - 1) {
      *count = 0;
      __threadfence();
      atomicAdd(generation, 1u);
    } else {
      unsigned now = g;
      while (now == g) asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(now) : "l"(generation) : "memory");
    }
    __threadfence();
  }
  __syncthreads();
}

__global__ void persistent_kernel(float* a, float* b, int64_t n, int stages, bool work, unsigned* count,
                                  unsigned* generation) {
  for (int s = 0; s < stages; ++s) {
    if (work) stage(s % 2 ? b : a, s % 2 ? a : b, n);
    grid_barrier(count, generation);
  }
}

}  // namespace

void enqueue_kernel_chain(float* a, float* b, int64_t n, int stages, int blocks, bool work, cudaStream_t stream) {
  for (int s = 0; s < stages; ++s) {
    cuda::launch_pdl(stage_kernel, dim3(blocks), dim3(256), 0, stream, s % 2 ? b : a, s % 2 ? a : b, n, work);
  }
}

void enqueue_persistent(float* a, float* b, int64_t n, int stages, int blocks, bool work, unsigned* sync,
                        cudaStream_t stream) {
  persistent_kernel<<<blocks, 256, 0, stream>>>(a, b, n, stages, work, sync, sync + 1);
}

}  // namespace specula::bench

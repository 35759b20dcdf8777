#pragma once
// bench_boundary_cost's launches (bench/boundary_cost_kernels.cu): `stages` dependent stages over
// float buffers a and b (n elements each, `blocks` blocks of 256 threads), as a chain of kernels
// (programmatic dependent launch as set by cuda::set_programmatic_dependent_launch) or as one
// persistent kernel with a grid barrier between stages (sync: 2 zeroed unsigned counters; every
// block must be resident at once). work false: the boundaries alone.
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace specula::bench {

void enqueue_kernel_chain(float* a, float* b, int64_t n, int stages, int blocks, bool work, cudaStream_t stream);
void enqueue_persistent(float* a, float* b, int64_t n, int stages, int blocks, bool work, unsigned* sync,
                        cudaStream_t stream);

}  // namespace specula::bench

#pragma once
// Programmatic dependent launch (Hopper): a kernel launched through launch_pdl() may start while
// the kernel before it on the stream is still running, once every block of that one has called
// pdl_trigger(). Each such kernel must call pdl_wait() before it reads or writes anything the
// kernels before it touch (it waits for their completion and memory); before that, it may only
// read what no kernel writes (weights). Both calls are no-ops in a kernel launched plainly. In a
// decode step this overlaps each kernel's launch and weight loads with its predecessor's tail:
// the step is ~180 small kernels, where launch and latency are most of the time. Kept in the
// CUDA sources (not model_ops.h) because only kernels/cuda launches kernels.
// A pointer to what an earlier kernel writes must not be `const __restrict__` in a kernel that
// reads it after pdl_wait(): its loads then compile to ld.global.nc, which ptxas may move above
// the wait (it did in skinny_gemm.cu's one-row normed kernel; tests/kernels/cuda/pdl_order_test.cu).
// Weights may be: nothing writes them.
#include <cuda_runtime.h>

#include <utility>

namespace specula::cuda {

// On by default; set_programmatic_dependent_launch(false) (model_ops.h) launches plainly, for
// A/B timing and for ruling it out when a result looks wrong.
bool programmatic_dependent_launch();

__device__ __forceinline__ void pdl_wait() { cudaGridDependencySynchronize(); }
__device__ __forceinline__ void pdl_trigger() { cudaTriggerProgrammaticLaunchCompletion(); }

// A cudaLaunchKernelEx configuration: programmatic launch when on, and thread-block clusters of
// `cluster` CTAs when it is more than one (verify_gemm.cu's K splits, tree_attention.cu's row-split
// pairs). config points into attrs, so it is neither copied nor moved.
struct LaunchConfig {
  cudaLaunchAttribute attrs[2] = {};
  cudaLaunchConfig_t config{};
  LaunchConfig(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, dim3 cluster = dim3(1, 1, 1)) {
    unsigned n = 0;
    if (cluster.x * cluster.y * cluster.z > 1) {
      attrs[n].id = cudaLaunchAttributeClusterDimension;
      attrs[n].val.clusterDim.x = cluster.x;
      attrs[n].val.clusterDim.y = cluster.y;
      attrs[n].val.clusterDim.z = cluster.z;
      ++n;
    }
    if (programmatic_dependent_launch()) {
      attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[n].val.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    config.attrs = attrs;
    config.numAttrs = n;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                Args&&... args) {
  if (!programmatic_dependent_launch()) {
    kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
    return;
  }
  const LaunchConfig l(grid, block, shared_bytes, stream);
  // Errors surface through cudaGetLastError like a <<<>>> launch's.
  (void)cudaLaunchKernelEx(&l.config, kernel, std::forward<Args>(args)...);
}

}  // namespace specula::cuda

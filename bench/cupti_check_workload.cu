// The GPU work bench_cupti_capture_check times (kernels here, host logic in C++20 beside it).
#include <cuda_runtime.h>

#include <cstddef>

namespace specula::bench {

// out = a * in over n4 float4s: bandwidth-bound, duration proportional to n4.
__global__ void scale_kernel(const float4* __restrict__ in, float4* __restrict__ out, size_t n4, float a) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 v = in[i];
    out[i] = make_float4(v.x * a, v.y * a, v.z * a, v.w * a);
  }
}

// A launch-bound kernel, like the many small ones of a decode step.
__global__ void tiny_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.5f + 1.0f;
}

void launch_scale(const void* in, void* out, size_t n4, float a, int blocks) {
  scale_kernel<<<blocks, 256>>>(static_cast<const float4*>(in), static_cast<float4*>(out), n4, a);
}

void launch_tiny(float* x, int n) { tiny_kernel<<<(n + 255) / 256, 256>>>(x, n); }

}  // namespace specula::bench

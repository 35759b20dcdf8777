#include <cuda_runtime.h>

#include "kernels/cuda/decode_ffn.h"
#include "kernels/cuda/pdl.cuh"

namespace specula::cuda {
namespace {

constexpr int kWarps = 8;  // one FFN column (a gate row and an up row) per warp
constexpr size_t kMaxSharedBytes = 96 * 1024;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// The skinny kernel's one-row kNormSwiGlu (kernels/cuda/skinny_gemm.cu) with its input formed in
// shared memory first: x and the parts are copied in (cp.async, no registers held: the weights
// prefetched before the wait keep theirs), summed in order, and the warps read the sum from
// there. Shared memory: stage (1 + n_parts, K) f32; row 0 becomes the sum.
template <int kPrefetch>
__global__ void __launch_bounds__(kWarps * 32)
    residual_norm_swiglu_kernel(const bf16_bits* __restrict__ W, int64_t ffn, int64_t K, const float* __restrict__ x,
                                const float* __restrict__ parts, int n_parts, const float* __restrict__ gamma,
                                float eps, float* __restrict__ xn, float* __restrict__ x_out) {
  extern __shared__ float4 stage[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool column = n < ffn;  // every thread stages; only warps with a column dot
  const uint4* gate_row = reinterpret_cast<const uint4*>(W + n * K);
  const uint4* up_row = reinterpret_cast<const uint4*>(W + (n + ffn) * K);
  // Weights and gamma of the first kPrefetch steps (256 k a step) before the wait.
  const float4 one = make_float4(1.f, 1.f, 1.f, 1.f);
  uint4 pre[2][kPrefetch];
  float4 gpre[kPrefetch][2];
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i) {
    const int64_t k8 = lane + 32 * i;
    const bool in = column && k8 * 8 < K;
    pre[0][i] = in ? __ldg(gate_row + k8) : make_uint4(0, 0, 0, 0);
    pre[1][i] = in ? __ldg(up_row + k8) : make_uint4(0, 0, 0, 0);
    const float4* g = reinterpret_cast<const float4*>(gamma + k8 * 8);
    gpre[i][0] = in ? __ldg(g) : one;
    gpre[i][1] = in ? __ldg(g + 1) : one;
  }
  pdl_trigger();
  pdl_wait();
  const int64_t K4 = K / 4, items = (1 + n_parts) * K4;
  for (int64_t q = threadIdx.x; q < items; q += blockDim.x) {
    const float4* src =
        q < K4 ? reinterpret_cast<const float4*>(x) + q : reinterpret_cast<const float4*>(parts) + (q - K4);
    const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(stage + q));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  }
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  for (int64_t i = threadIdx.x; i < K4; i += blockDim.x) {
    float4 r = stage[i];
    for (int j = 1; j <= n_parts; ++j) {
      const float4 p = stage[j * K4 + i];
      r.x += p.x, r.y += p.y, r.z += p.z, r.w += p.w;
    }
    stage[i] = r;
    if (blockIdx.x == 0) reinterpret_cast<float4*>(x_out)[i] = r;
  }
  __syncthreads();
  if (!column) return;
  float acc[2] = {0.0f, 0.0f}, sumsq = 0.0f;
  auto accum = [&](uint4 wg, uint4 wu, int64_t k8, float4 ga, float4 gb) {
    float4 a = stage[2 * k8], b = stage[2 * k8 + 1];
    sumsq += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w + b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
    a.x *= ga.x, a.y *= ga.y, a.z *= ga.z, a.w *= ga.w;
    b.x *= gb.x, b.y *= gb.y, b.z *= gb.z, b.w *= gb.w;
    const uint4 w[2] = {wg, wu};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      acc[r] += lo_bf16(w[r].x) * a.x + hi_bf16(w[r].x) * a.y + lo_bf16(w[r].y) * a.z + hi_bf16(w[r].y) * a.w +
                lo_bf16(w[r].z) * b.x + hi_bf16(w[r].z) * b.y + lo_bf16(w[r].w) * b.z + hi_bf16(w[r].w) * b.w;
    }
  };
#pragma unroll
  for (int i = 0; i < kPrefetch; ++i) {
    const int64_t k8 = lane + 32 * i;
    if (k8 * 8 < K) accum(pre[0][i], pre[1][i], k8, gpre[i][0], gpre[i][1]);
  }
  for (int64_t k8 = lane + 32 * kPrefetch; k8 * 8 < K; k8 += 32) {
    const float4* g = reinterpret_cast<const float4*>(gamma + k8 * 8);
    accum(__ldg(gate_row + k8), __ldg(up_row + k8), k8, __ldg(g), __ldg(g + 1));
  }
  const float inv = rsqrtf(warp_sum(sumsq) / static_cast<float>(K) + eps);
  const float gate = warp_sum(acc[0]) * inv, up = warp_sum(acc[1]) * inv;
  if (lane == 0) xn[n] = gate / (1.0f + expf(-gate)) * up;
}

template <int kPrefetch>
void launch(const bf16_bits* W, int64_t ffn, int64_t K, const float* x, const float* parts, int n_parts,
            const float* gamma, float eps, float* xn, float* x_out, size_t shared, cudaStream_t stream) {
  // Past 48 KB a kernel takes dynamic shared memory only after this: once, for the largest.
  static const cudaError_t raised = cudaFuncSetAttribute(
      residual_norm_swiglu_kernel<kPrefetch>, cudaFuncAttributeMaxDynamicSharedMemorySize, int{kMaxSharedBytes});
  (void)raised;  // a failure shows as the launch's error
  const auto blocks = static_cast<unsigned>((ffn + kWarps - 1) / kWarps);
  launch_pdl(residual_norm_swiglu_kernel<kPrefetch>, dim3(blocks), dim3(kWarps * 32), shared, stream, W, ffn, K, x,
             parts, n_parts, gamma, eps, xn, x_out);
}

}  // namespace

bool decode_residual_norm_swiglu(const bf16_bits* W, int64_t ffn, int64_t K, const float* x, const float* parts,
                                 int n_parts, const float* gamma, float eps, float* xn, float* x_out,
                                 cudaStream_t stream) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const size_t shared = size_t(1 + n_parts) * size_t(K) * 4;
  if (ffn < 1 || K < 8 || K % 8 != 0 || n_parts < 1 || n_parts > kDecodeFfnMaxParts || shared > kMaxSharedBytes ||
      !aligned(W) || !aligned(x) || !aligned(parts) || !aligned(gamma) || !aligned(x_out)) {
    return false;
  }
  // The whole row's weights in flight before the wait up to K = 1024 (SmolLM2's 576: 3 steps);
  // past that one step, and the rest streamed (the registers go to occupancy).
  if (K <= 3 * 256) {
    launch<3>(W, ffn, K, x, parts, n_parts, gamma, eps, xn, x_out, shared, stream);
  } else if (K <= 4 * 256) {
    launch<4>(W, ffn, K, x, parts, n_parts, gamma, eps, xn, x_out, shared, stream);
  } else {
    launch<1>(W, ffn, K, x, parts, n_parts, gamma, eps, xn, x_out, shared, stream);
  }
  return true;
}

}  // namespace specula::cuda

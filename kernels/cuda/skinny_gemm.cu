#include "kernels/cuda/skinny_gemm.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace specula::cuda {
namespace {

constexpr int kWarps = 8;  // one output row per warp, 8 rows per block

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A bf16 is the upper half of an f32: the two halves of a 32-bit word, widened exactly.
__device__ __forceinline__ float lo_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Rows T ≤ TC of X against one weight row per warp. Each lane reads 8 weights (16 bytes) per
// step, so a warp reads 512 contiguous bytes of its row; X rows come through L1 (every warp of
// the block reads the same ones).
template <int TC>
__global__ void __launch_bounds__(kWarps * 32) skinny_kernel(const bf16_bits* __restrict__ W, int64_t N, int64_t K,
                                                             const float* __restrict__ X, int64_t ld_x, int T,
                                                             float* __restrict__ Y, int64_t ldy, bool accumulate) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (n >= N) return;
  float acc[TC];
#pragma unroll
  for (int t = 0; t < TC; ++t) acc[t] = 0.0f;
  const uint4* wrow = reinterpret_cast<const uint4*>(W + n * K);
  for (int64_t k8 = lane; k8 * 8 < K; k8 += 32) {
    const uint4 wv = __ldg(wrow + k8);
    const float w[8] = {lo_bf16(wv.x), hi_bf16(wv.x), lo_bf16(wv.y), hi_bf16(wv.y),
                        lo_bf16(wv.z), hi_bf16(wv.z), lo_bf16(wv.w), hi_bf16(wv.w)};
#pragma unroll
    for (int t = 0; t < TC; ++t) {
      if (t < T) {
        const float4* xr = reinterpret_cast<const float4*>(X + t * ld_x + k8 * 8);
        const float4 a = __ldg(xr), b = __ldg(xr + 1);
        acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < TC; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < T) {
      float* y = Y + t * ldy + n;
      *y = accumulate ? *y + s : s;
    }
  }
}

template <int TC>
void launch(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int T, float* Y, int64_t ldy,
            bool accumulate, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  skinny_kernel<TC><<<blocks, kWarps * 32, 0, stream>>>(W, N, K, X, ld_x, T, Y, ldy, accumulate);
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, int64_t n, bf16_bits* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
  }
}

}  // namespace

bool skinny_gemm(const bf16_bits* W, int64_t N, int64_t K, const float* X, int64_t ld_x, int64_t T, float* Y,
                 int64_t ldy, bool accumulate, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(W) % 16 == 0 && reinterpret_cast<uintptr_t>(X) % 16 == 0;
  if (T < 1 || T > kSkinnyMaxRows || N < 1 || K < 8 || K % 8 != 0 || ld_x % 4 != 0 || !aligned) return false;
  // Up to 32 rows per pass over the weights: 32 accumulators per lane still fit in registers.
  for (int64_t t0 = 0; t0 < T; t0 += 32) {
    const int rows = static_cast<int>(T - t0 < 32 ? T - t0 : 32);
    const float* x = X + t0 * ld_x;
    float* y = Y + t0 * ldy;
    if (rows == 1) {
      launch<1>(W, N, K, x, ld_x, rows, y, ldy, accumulate, stream);
    } else if (rows <= 2) {
      launch<2>(W, N, K, x, ld_x, rows, y, ldy, accumulate, stream);
    } else if (rows <= 4) {
      launch<4>(W, N, K, x, ld_x, rows, y, ldy, accumulate, stream);
    } else if (rows <= 8) {
      launch<8>(W, N, K, x, ld_x, rows, y, ldy, accumulate, stream);
    } else if (rows <= 16) {
      launch<16>(W, N, K, x, ld_x, rows, y, ldy, accumulate, stream);
    } else {
      launch<32>(W, N, K, x, ld_x, rows, y, ldy, accumulate, stream);
    }
  }
  return true;
}

void f32_to_bf16(const float* in, int64_t n, bf16_bits* out, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = (n + 255) / 256;
  f32_to_bf16_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(in, n, out);
}

}  // namespace specula::cuda

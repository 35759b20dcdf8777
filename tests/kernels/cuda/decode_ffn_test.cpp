// kernels/cuda/decode_ffn (the residual plus Wo's per-head parts, its RMSNorm, gate_up and
// SwiGLU in one launch) against a double-precision CPU reference over the same bf16 weights, on
// random inputs drawn fresh every run; the residual it writes against the same f32 sum on the
// CPU (the same order: the same bits).
#include "kernels/cuda/decode_ffn.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using testing::download;
using testing::upload;

using DecodeFfnTest = testing::GpuRandomTest;

TEST_F(DecodeFfnTest, MatchesCpuForEachPrefetchDepth) {
  struct Shape {
    int64_t ffn, K;
    int parts;
  };
  // SmolLM2's (3 steps before the wait), a column count off the 8 warps with the 1-step variant
  // (K > 1024), the 4-step variant past 48 KB of shared memory, the most parts.
  for (const Shape sh :
       {Shape{1536, 576, 9}, Shape{100, 1040, 3}, Shape{64, 1024, 16}, Shape{72, 512, kDecodeFfnMaxParts}}) {
    const int64_t F = sh.ffn, K = sh.K;
    const auto w = bf16_weights(2 * F * K, 0.05f);
    const auto x = random(K, 2.0f), parts = random(sh.parts * K, 0.5f), gamma = random(K, 1.5f);
    const float eps = 1e-5f;
    uint16_t* dw = upload(w.bits);
    float *dx = upload(x), *dparts = upload(parts), *dgamma = upload(gamma);
    float* dxn = upload(std::vector<float>(F, NAN));  // every output must be written
    float* dout = upload(std::vector<float>(K, NAN));
    ASSERT_TRUE(decode_residual_norm_swiglu(dw, F, K, dx, dparts, sh.parts, dgamma, eps, dxn, dout, nullptr));
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto xn = download(dxn, F), out = download(dout, K);
    // The residual: x + parts[0] + ... in f32, in order.
    std::vector<double> r(K);
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) {
      float sum = x[k];
      for (int j = 0; j < sh.parts; ++j) sum += parts[j * K + k];
      ASSERT_EQ(out[k], sum) << "residual " << k << ", K " << K;
      r[k] = sum;
      ss += r[k] * r[k];
    }
    const double inv = 1.0 / std::sqrt(ss / K + eps);
    double num = 0, den = 0;
    for (int64_t n = 0; n < F; ++n) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double v = r[k] * inv * gamma[k];
        g += w.values[n * K + k] * v;
        u += w.values[(n + F) * K + k] * v;
      }
      const double ref = g / (1 + std::exp(-g)) * u;
      ASSERT_FALSE(std::isnan(xn[n])) << "unwritten column " << n;
      num += (xn[n] - ref) * (xn[n] - ref);
      den += ref * ref;
    }
    const double err = std::sqrt(num / den);
    std::printf("ffn %lld K %lld parts %d: rel L2 %.2e\n", static_cast<long long>(F), static_cast<long long>(K),
                sh.parts, err);
    EXPECT_LT(err, 1e-5);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dparts);
    cudaFree(dgamma);
    cudaFree(dxn);
    cudaFree(dout);
  }
}

TEST_F(DecodeFfnTest, RefusesWhatItCannotTake) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4096), cudaSuccess);
  const auto* w = reinterpret_cast<const uint16_t*>(d);
  EXPECT_FALSE(decode_residual_norm_swiglu(w, 8, 12, d, d, 1, d, 1e-5f, d, d, nullptr));  // K % 8
  EXPECT_FALSE(decode_residual_norm_swiglu(w, 8, 64, d, d, 0, d, 1e-5f, d, d, nullptr));  // no parts
  EXPECT_FALSE(decode_residual_norm_swiglu(w, 8, 64, d, d, kDecodeFfnMaxParts + 1, d, 1e-5f, d, d, nullptr));
  EXPECT_FALSE(decode_residual_norm_swiglu(w, 8, 8192, d, d, 8, d, 1e-5f, d, d, nullptr));    // shared memory
  EXPECT_FALSE(decode_residual_norm_swiglu(w, 8, 64, d + 1, d, 1, d, 1e-5f, d, d, nullptr));  // alignment
  cudaFree(d);
}

}  // namespace
}  // namespace specula::cuda

#pragma once
// What the kernel tests share: a fixture that skips without a GPU (printing "skipped: no GPU")
// and draws its random inputs from a seed chosen fresh every run and printed, bf16 weights with
// their exact values for double references, and host <-> device copies checked by gtest.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cuda/device.h"

namespace specula::cuda::testing {

class GpuRandomTest : public ::testing::Test {
 public:  // helpers outside the fixture (a test's free check functions) draw from it too
  void SetUp() override {
    if (device_count() == 0) {
      std::puts("skipped: no GPU");
      GTEST_SKIP() << "skipped: no GPU";
    }
    seed_ = std::random_device{}();
    std::printf("seed %u\n", seed_);
    rng_.seed(seed_);
  }
  // n values uniform in [-scale, scale] (zero has probability ~0).
  std::vector<float> random(size_t n, float scale = 1.0f) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng_);
    return v;
  }
  struct Bf16Weights {
    std::vector<uint16_t> bits;
    std::vector<double> values;  // the same weights, exactly
  };
  Bf16Weights bf16_weights(size_t n, float scale) {
    const auto f = random(n, scale);
    Bf16Weights w{std::vector<uint16_t>(n), std::vector<double>(n)};
    for (size_t i = 0; i < n; ++i) {
      const __nv_bfloat16 b = __float2bfloat16_rn(f[i]);
      w.bits[i] = __bfloat16_as_ushort(b);
      w.values[i] = __bfloat162float(b);
    }
    return w;
  }
  unsigned seed_ = 0;
  std::mt19937 rng_;
};

template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(1, h.size()) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

template <class T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

}  // namespace specula::cuda::testing

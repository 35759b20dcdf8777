#pragma once
// What the kernel tests share: a fixture that skips without a GPU (printing "skipped: no GPU")
// and draws its random inputs from a seed chosen fresh every run and printed, bf16 weights with
// their exact values for double references, and host <-> device copies checked by gtest.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"

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

// Double reference of one attention row: query q (hd floats) over the cache rows `rows`, whose
// key and value heads sit in `all` at all[r * ld + k_col] and all[r * ld + v_col] (rounded to bf16,
// as the cache holds them); scores scaled by `scale`. Returns hd doubles.
inline std::vector<double> reference_attention_row(const float* q, int64_t hd, double scale,
                                                   const std::vector<int64_t>& rows, const std::vector<float>& all,
                                                   int64_t ld, int64_t k_col, int64_t v_col) {
  auto bf = [](float v) { return static_cast<double>(__bfloat162float(__float2bfloat16_rn(v))); };
  std::vector<double> s(rows.size());
  for (size_t n = 0; n < rows.size(); ++n) {
    double d = 0;
    for (int64_t k = 0; k < hd; ++k) d += double(q[k]) * bf(all[rows[n] * ld + k_col + k]);
    s[n] = d * scale;
  }
  const double m = *std::max_element(s.begin(), s.end());
  double z = 0;
  for (auto& v : s) z += (v = std::exp(v - m));
  std::vector<double> out(hd, 0.0);
  for (size_t n = 0; n < rows.size(); ++n)
    for (int64_t k = 0; k < hd; ++k) out[k] += s[n] / z * bf(all[rows[n] * ld + v_col + k]);
  return out;
}

// A paged KV layer on the device: `blocks` blocks of B rows for kv_heads heads of hd, the given
// block table, every key and value set to `fill` and the block min/max to `meta_fill` (bf16
// bits; NaN by default, so a row read before it is written shows). Freed with the object.
struct DevicePagedKv {
  PagedKvLayer kv;
  int64_t n_kv = 0, n_meta = 0;  // elements of keys (and values), of key_min (and key_max)
  DevicePagedKv(int64_t blocks, int64_t kv_heads, int64_t B, int64_t hd, const std::vector<int32_t>& table,
                uint16_t fill = 0x7fc0, uint16_t meta_fill = 0x7fc0) {
    n_kv = blocks * kv_heads * B * hd;
    n_meta = blocks * kv_heads * hd;
    const std::vector<uint16_t> rows(static_cast<size_t>(n_kv), fill);
    const std::vector<uint16_t> meta(static_cast<size_t>(n_meta), meta_fill);
    kv.keys = upload(rows);
    kv.values = upload(rows);
    kv.key_min = upload(meta);
    kv.key_max = upload(meta);
    kv.block_table = upload(table);
    kv.n_kv_heads = kv_heads;
    kv.head_dim = hd;
    kv.block_size = B;
  }
  DevicePagedKv(const DevicePagedKv&) = delete;
  DevicePagedKv& operator=(const DevicePagedKv&) = delete;
  ~DevicePagedKv() {
    cudaFree(kv.keys);
    cudaFree(kv.values);
    cudaFree(kv.key_min);
    cudaFree(kv.key_max);
    cudaFree(const_cast<int32_t*>(kv.block_table));
  }
};

}  // namespace specula::cuda::testing

// kernels/cuda/prefill_attention against a double CPU reference on random inputs (fresh seed per
// run), through attention_at's dispatch: unmasked launches of kPrefillMinRows rows and more take
// the tensor-core kernel; the same rows with an explicit causal mask take attention_at's own kernel,
// checked beside it.
#include "kernels/cuda/prefill_attention.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using testing::download;
using testing::upload;

using PrefillAttentionTest = testing::GpuRandomTest;

struct Case {
  int64_t head_dim, kv_heads, group, committed, gap, T;  // new rows go to first_new = committed + gap
};

TEST_F(PrefillAttentionTest, CausalRowsMatchCpu) {
  for (const Case c : {Case{64, 3, 3, 0, 0, 200}, Case{128, 2, 4, 45, 0, 130}, Case{64, 1, 2, 100, 19, 65},
                       Case{128, 2, 2, 0, 0, 600}, Case{64, 3, 3, 1000, 0, 97}}) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + " committed " + std::to_string(c.committed) + " gap " +
                 std::to_string(c.gap) + " T " + std::to_string(c.T));
    ASSERT_GE(c.T, kPrefillMinRows);
    const int64_t hd = c.head_dim, kv_heads = c.kv_heads, heads = kv_heads * c.group, B = 16;
    const int64_t first_new = c.committed + c.gap, rows = first_new + c.T;
    const int64_t ld = (heads + 2 * kv_heads) * hd, qd = heads * hd, kvd = kv_heads * hd;
    const int64_t blocks = (rows + B - 1) / B;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng_);
    // Rows [committed, first_new) stay NaN: a kernel that reads them fails the check below.
    testing::DevicePagedKv cache(blocks, kv_heads, B, hd, table);
    const auto all = random(rows * ld, 1.5f);  // row r: q heads, then the key and value heads
    float* dall = upload(all);
    const std::vector<int32_t> steps = {0, 0, int32_t(c.committed), int32_t(first_new)};
    int32_t* dsteps = upload(steps);
    if (c.committed > 0) kv_append_at(cache.kv, dall, ld, qd, qd + kvd, c.committed, dsteps, nullptr);
    kv_append_at(cache.kv, dall + first_new * ld, ld, qd, qd + kvd, c.T, dsteps + 2, nullptr);
    std::vector<uint8_t> causal(c.T * c.T);
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.T; ++j) causal[i * c.T + j] = j <= i;
    uint8_t* dmask = upload(causal);
    float* dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, c.T * qd * 4), cudaSuccess);
    const float scale = 1.0f / std::sqrt(float(hd));
    const float* q = dall + first_new * ld;
    for (const bool tensor_cores : {true, false}) {
      attention_at(q, ld, c.T, heads, cache.kv, dsteps + 2, tensor_cores ? nullptr : dmask, scale, dout, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto out = download(dout, c.T * qd);
      double num = 0, den = 0;
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t g = h / c.group;
          // Visible: committed rows, then new rows first_new + j for j <= t.
          std::vector<int64_t> idx;
          for (int64_t r = 0; r < c.committed; ++r) idx.push_back(r);
          for (int64_t j = 0; j <= t; ++j) idx.push_back(first_new + j);
          const auto ref = testing::reference_attention_row(&all[(first_new + t) * ld + h * hd], hd, scale, idx, all,
                                                            ld, qd + g * hd, qd + kvd + g * hd);
          for (int64_t k = 0; k < hd; ++k) {
            const double got = out[t * qd + h * hd + k];
            ASSERT_TRUE(std::isfinite(got)) << "row " << t << " head " << h << " dim " << k;
            num += (got - ref[k]) * (got - ref[k]);
            den += ref[k] * ref[k];
          }
        }
      const double err = std::sqrt(num / den);
      std::printf("prefill attention %s head_dim=%lld committed=%lld gap=%lld T=%lld rel L2 %.2e\n",
                  tensor_cores ? "tensor cores" : "attention_at", static_cast<long long>(hd),
                  static_cast<long long>(c.committed), static_cast<long long>(c.gap), static_cast<long long>(c.T), err);
      // The tensor-core kernel rounds Q and P to bf16 (relative 2^-9 each); attention_at's kernel
      // differs from the reference in f32 arithmetic only.
      EXPECT_LT(err, tensor_cores ? 1e-2 : 1e-4);
    }
    cudaFree(dall);
    cudaFree(dsteps);
    cudaFree(dmask);
    cudaFree(dout);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Head dims other than 64 and 128 and block sizes other than 16 are refused (attention_at then
// runs its own kernel).
TEST_F(PrefillAttentionTest, RefusesOtherShapes) {
  PagedKvLayer kv;
  kv.n_kv_heads = 1;
  kv.block_size = 16;
  kv.head_dim = 96;
  EXPECT_FALSE(prefill_attention(nullptr, 0, 100, 2, kv, nullptr, 1.f, nullptr, nullptr));
  kv.head_dim = 64;
  kv.block_size = 32;
  EXPECT_FALSE(prefill_attention(nullptr, 0, 100, 2, kv, nullptr, 1.f, nullptr, nullptr));
}

}  // namespace
}  // namespace specula::cuda

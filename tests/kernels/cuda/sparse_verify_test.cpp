// kernels/cuda/sparse_verify's row adapters against host copies of the same conversions, on random
// rows and row orders drawn fresh every run: the queries into tree order as bf16, the attention's
// bf16 rows back into f32 rows, and those rows straight into the Wo GEMM's input halves, which
// must equal f32_to_bf16_split of the f32 rows bit for bit (the launch they replace).
#include "kernels/cuda/sparse_verify.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <vector>

#include "kernels/cuda/skinny_gemm.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using SparseVerifyRowsTest = testing::GpuRandomTest;
using testing::download;
using testing::upload;

uint16_t bf16_bits_of(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
float float_of(uint16_t bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }

std::vector<int32_t> shuffled_order(SparseVerifyRowsTest& test, int64_t T) {
  std::vector<int32_t> order(static_cast<size_t>(T));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), test.rng_);
  return order;
}

TEST_F(SparseVerifyRowsTest, QueriesGoToTreeOrderAsBf16) {
  for (const int64_t T : {1, 5, 61, 64}) {
    const int64_t q_dim = 4096, ld = q_dim + 2 * 1024;  // Llama-8B's q, then k and v
    const auto qkv_host = random(static_cast<size_t>(T * ld), 3.0f);
    const auto order = shuffled_order(*this, T);
    float* qkv = upload(qkv_host);
    int32_t* d_order = upload(order);
    uint16_t* q = upload(std::vector<uint16_t>(static_cast<size_t>(T * q_dim), 0));
    q_rows_to_bf16(qkv, ld, T, q_dim, d_order, q, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = download(q, static_cast<size_t>(T * q_dim));
    int64_t wrong = 0;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t d = 0; d < q_dim; ++d) wrong += got[i * q_dim + d] != bf16_bits_of(qkv_host[order[i] * ld + d]);
    EXPECT_EQ(wrong, 0) << T << " rows";
    for (void* p : std::initializer_list<void*>{qkv, d_order, q}) cudaFree(p);
  }
}

TEST_F(SparseVerifyRowsTest, AttentionRowsToF32AndToTheWoHalvesInOneLaunch) {
  for (const int64_t T : {1, 17, 60}) {
    for (const int64_t width : {576, 4096}) {  // SmolLM2's and Llama-8B's q_dim
      const size_t n = static_cast<size_t>(T * width);
      const auto in_host = bf16_weights(n, 4.0f).bits;
      const auto order = shuffled_order(*this, T);
      uint16_t* in = upload(in_host);
      int32_t* d_order = upload(order);
      float* rows = upload(std::vector<float>(n, 0.0f));
      uint16_t* halves = upload(std::vector<uint16_t>(2 * n, 0xffff));  // hi, then lo
      uint16_t* two_launch = upload(std::vector<uint16_t>(2 * n, 0xffff));
      rows_bf16_to_f32(in, T, width, d_order, rows, nullptr);
      f32_to_bf16_split(rows, static_cast<int64_t>(n), two_launch, two_launch + n, nullptr);
      rows_bf16_to_split(in, T, width, d_order, halves, halves + n, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got_rows = download(rows, n);
      const auto got_halves = download(halves, 2 * n);
      const auto got_two = download(two_launch, 2 * n);
      int64_t wrong_rows = 0, wrong_hi = 0, nonzero_lo = 0;
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < width; ++d) {
          const size_t from = static_cast<size_t>(i * width + d), to = static_cast<size_t>(order[i] * width + d);
          wrong_rows += got_rows[to] != float_of(in_host[from]);
          wrong_hi += got_halves[to] != in_host[from];
          nonzero_lo += got_halves[n + to] != 0;
        }
      EXPECT_EQ(wrong_rows, 0) << T << " x " << width;
      EXPECT_EQ(wrong_hi, 0) << T << " x " << width;
      EXPECT_EQ(nonzero_lo, 0) << T << " x " << width << ": a bf16 value's remainder is +0";
      EXPECT_EQ(got_halves, got_two) << T << " x " << width << ": not the bits of the two launches";
      for (void* p : std::initializer_list<void*>{in, d_order, rows, halves, two_launch}) cudaFree(p);
    }
  }
}

}  // namespace
}  // namespace specula::cuda

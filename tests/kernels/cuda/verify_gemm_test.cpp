// kernels/cuda/verify_gemm (bf16 X and W on wgmma, f32 out) against a double-precision CPU
// product over the same bf16 values, on random inputs drawn fresh every run, for every plan the
// kernel has (K split 1-8 over a cluster, 64 or 128 X rows an MMA, X rows in blocks of 64).
#include "kernels/cuda/verify_gemm.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using VerifyGemmTest = testing::GpuRandomTest;
using testing::download;
using testing::upload;

bool hopper() {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
}

constexpr float kUntouched = 12345.0f;  // Y's padding columns must keep it

struct Case {
  int64_t N, K, ldy;
  std::vector<int64_t> rows;
  int check_every;  // reference columns n with n % check_every == 0 (big shapes)
};

// Runs every plan on each row count; each against the double product, and all plans' outputs
// equal bit for bit where they sum in the same order (same splits and tile).
void expect_plans_match_double(VerifyGemmTest& test, const Case& c) {
  const auto w = test.bf16_weights(c.N * c.K, 0.05f);
  uint16_t* dw = upload(w.bits);
  const int64_t max_m = *std::max_element(c.rows.begin(), c.rows.end());
  float* dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dy, max_m * c.ldy * 4), cudaSuccess);
  for (const int64_t M : c.rows) {
    const auto x = test.bf16_weights(M * c.K, 2.0f);
    uint16_t* dx = upload(x.bits);
    std::vector<double> ref(M * c.N, 0.0);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t n = 0; n < c.N; n += c.check_every) {
        double acc = 0;
        for (int64_t k = 0; k < c.K; ++k) acc += w.values[n * c.K + k] * x.values[r * c.K + k];
        ref[r * c.N + n] = acc;
      }
    for (const int row_blocks : {0, 1, 2}) {
      if (row_blocks != 0 && M <= 64) continue;  // only past 64 rows is there a choice
      set_verify_gemm_row_blocks(row_blocks);
      for (const int splits : {0, 1, 3, 8}) {
        set_verify_gemm_splits(splits);
        const VerifyGemmPlan plan = verify_gemm_plan(c.N, c.K, M);
        std::vector<float> init(M * c.ldy, kUntouched);
        ASSERT_EQ(cudaMemcpy(dy, init.data(), init.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_TRUE(verify_gemm(dw, c.N, c.K, dx, M, dy, c.ldy, nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto y = download(dy, M * c.ldy);
        double num = 0, den = 0, worst = 0;
        int untouched_lost = 0;
        for (int64_t r = 0; r < M; ++r) {
          for (int64_t n = 0; n < c.N; n += c.check_every) {
            const double d = y[r * c.ldy + n] - ref[r * c.N + n];
            num += d * d;
            den += ref[r * c.N + n] * ref[r * c.N + n];
            worst = std::max(worst, std::abs(d));
          }
          for (int64_t n = c.N; n < c.ldy; ++n) untouched_lost += y[r * c.ldy + n] != kUntouched;
        }
        const auto where = ::testing::Message()
                           << "N " << c.N << " K " << c.K << " M " << M << " splits " << plan.splits << " x_rows "
                           << plan.x_rows << " row blocks " << plan.row_blocks;
        // bf16 products are exact in f32; f32 sums of ~K terms of size ~0.05: far under 1e-5.
        EXPECT_LT(std::sqrt(num / den), 1e-5) << where;
        EXPECT_LT(worst, 1e-3) << where;
        EXPECT_EQ(untouched_lost, 0) << where << ": wrote past N";
        // Deterministic: the same plan again gives the same bits (the split sum's order is fixed).
        ASSERT_TRUE(verify_gemm(dw, c.N, c.K, dx, M, dy, c.ldy, nullptr));
        const auto again = download(dy, M * c.ldy);
        EXPECT_EQ(std::memcmp(again.data(), y.data(), y.size() * 4), 0) << where << ": not deterministic";
      }
    }
    cudaFree(dx);
  }
  set_verify_gemm_splits(0);
  set_verify_gemm_row_blocks(0);
  cudaFree(dw);
  cudaFree(dy);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(VerifyGemmTest, EveryPlanMatchesDoubleReference) {
  if (!hopper()) GTEST_SKIP() << "skipped: verify_gemm needs sm_90";
  // N 1000: a partial last tile; K 1544: a partial last 64-wide step (1544 = 24·64
  // + 8), and 3 splits of 25 steps leave the last one 7. Rows: one, the 64-row MMA's edge, the
  // 128-row MMA's start, a 60-node verify's 120 stacked rows, and the most.
  expect_plans_match_double(*this, {1000, 1544, 1000, {1, 17, 64, 65, 120, 128}, 1});
  // A padded Y (ldy > N) and SmolLM2's narrow rows (K 576: 9 steps, so 8 splits are one step each).
  expect_plans_match_double(*this, {960, 576, 1003, {34, 120}, 1});
  // Llama-8B's o projection at a 60-node verify (auto plan splits K over a cluster), sampled.
  expect_plans_match_double(*this, {4096, 4096, 4096, {120}, 61});
}

// One small shape with and without a K split, 40 and 100 rows (one MMA, or row blocks): quick enough for
// compute-sanitizer's memcheck and racecheck (the ring's mbarrier hand-offs, the split's partial tiles in shared
// memory).
TEST_F(VerifyGemmTest, SmallShapeForTheSanitizers) {
  if (!hopper()) GTEST_SKIP() << "skipped: verify_gemm needs sm_90";
  expect_plans_match_double(*this, {200, 640, 200, {40, 100}, 1});
}

TEST_F(VerifyGemmTest, RefusesWhatItCannotRun) {
  uint16_t* dw = nullptr;
  float* dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dw, 4096 * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, 4096 * 4), cudaSuccess);
  EXPECT_FALSE(verify_gemm(dw, 16, 64, dw, 0, dy, 16, nullptr)) << "no rows";
  EXPECT_FALSE(verify_gemm(dw, 16, 64, dw, kVerifyGemmMaxRows + 1, dy, 16, nullptr)) << "too many rows";
  EXPECT_FALSE(verify_gemm(dw, 16, 60, dw, 4, dy, 16, nullptr)) << "K not a multiple of 8";
  EXPECT_FALSE(verify_gemm(dw, 16, 64, dw, 4, dy, 8, nullptr)) << "ldy < N";
  EXPECT_FALSE(verify_gemm(dw + 1, 16, 64, dw, 4, dy, 16, nullptr)) << "misaligned W";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(dw);
  cudaFree(dy);
}

}  // namespace
}  // namespace specula::cuda

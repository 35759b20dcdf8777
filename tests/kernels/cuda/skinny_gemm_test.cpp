// kernels/cuda/skinny_gemm (bf16 weights × f32 activations) against a double-precision CPU
// product over the same bf16 weights, on random inputs drawn fresh every run.
#include "kernels/cuda/skinny_gemm.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/device.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

using SkinnyGemmTest = testing::GpuRandomTest;

using Gemm = bool (*)(const uint16_t*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool,
                      cudaStream_t);

// One kernel against a double-precision product over the same bf16 weights and the f32 X, for
// each row count, overwriting and accumulating.
void expect_matches_double(SkinnyGemmTest& test, Gemm gemm, int64_t N, int64_t K, std::initializer_list<int64_t> rows,
                           const char* kernel) {
  const int64_t ld_x = K + 4;  // a padded row stride
  const auto w = test.bf16_weights(N * K, 0.05f);
  const int64_t max_T = std::max(rows);
  uint16_t* dw = nullptr;
  float *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dw, w.bits.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dx, max_T * ld_x * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, max_T * N * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dw, w.bits.data(), w.bits.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  for (int64_t T : rows) {
    for (bool accumulate : {false, true}) {
      const auto x = test.random(T * ld_x, 2.0f), y0 = test.random(T * N, 1.0f);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dy, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_TRUE(gemm(dw, N, K, dx, ld_x, T, dy, N, accumulate, nullptr)) << kernel;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> y(T * N);
      ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      double num = 0, den = 0, worst = 0;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t n = 0; n < N; ++n) {
          double ref = accumulate ? y0[t * N + n] : 0.0;
          for (int64_t k = 0; k < K; ++k) ref += w.values[n * K + k] * x[t * ld_x + k];
          const double d = y[t * N + n] - ref;
          num += d * d;
          den += ref * ref;
          worst = std::max(worst, std::abs(d));
        }
      }
      // f32 accumulation over ~1550 products of size ~0.05: well under 1e-5 relative (the
      // tensor-core kernel's hi + lo split of X keeps ~16 significant bits, also under it).
      EXPECT_LT(std::sqrt(num / den), 1e-5) << kernel << " T " << T << " accumulate " << accumulate;
      EXPECT_LT(worst, 1e-3) << kernel << " T " << T << " accumulate " << accumulate;
    }
  }
  cudaFree(dw);
  cudaFree(dx);
  cudaFree(dy);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(SkinnyGemmTest, MatchesDoubleReferenceForEveryRowCount) {
  // K 1544 takes the 8-step prefetch at one row, 1000 the 4-step one and 2312 the 1-step one
  // (K > 2048). N 1003 is not a multiple of the 8 rows a block takes.
  // Every row count up to 8 has its kernel; 7 runs the 8-row one (its row 7 re-reads row 6).
  expect_matches_double(*this, skinny_gemm, 1000, 1544, {1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 17, 32, 33, 64}, "skinny");
  expect_matches_double(*this, skinny_gemm, 1003, 1000, {1, 2, 3, 5, 6, 7, 12}, "skinny, N 1003, K 1000");
  expect_matches_double(*this, skinny_gemm, 1000, 2312, {1, 2, 5, 6}, "skinny, K 2312");
  // Llama-8B-like long rows (K 4160) at one row, N a multiple of a block's rows or not.
  expect_matches_double(*this, skinny_gemm, 1000, 4160, {1, 2}, "skinny, K 4160");
  expect_matches_double(*this, skinny_gemm, 1003, 4160, {1}, "skinny, N 1003, K 4160");
}

TEST_F(SkinnyGemmTest, TensorCorePathMatchesDoubleReferenceOverF32Inputs) {
  // Multiples of 16 (its tiles), not of 64.
  expect_matches_double(*this, skinny_gemm_tc, 1008, 1552, {1, 2, 3, 5, 8, 13, 16}, "tensor-core");
  uint16_t* dw = nullptr;
  float *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dw, 1008 * 1552 * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dx, 32 * 1556 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, 32 * 1008 * 4), cudaSuccess);
  EXPECT_FALSE(skinny_gemm_tc(dw, 1008, 1552, dx, 1556, kSkinnyTcMaxRows + 1, dy, 1008, false, nullptr));
  EXPECT_FALSE(skinny_gemm_tc(dw, 1000, 1552, dx, 1556, 2, dy, 1008, false, nullptr));      // N not a multiple of 16
  EXPECT_FALSE(skinny_gemm_tc(dw, 1008, 1544, dx, 1556, 2, dy, 1008, false, nullptr));      // K not a multiple of 16
  EXPECT_FALSE(skinny_gemm_tc(dw + 8, 1008, 1552, dx, 1556, 2, dy, 1008, false, nullptr));  // W not 32-byte aligned
  cudaFree(dw);
  cudaFree(dx);
  cudaFree(dy);
}

// The fused decode variants against RMSNorm, the product and SwiGLU done separately in double.
// ffn 504 (not a multiple of 16) runs the f32 kernels; 496 the tensor-core ones too, up to 16 rows.
// K 576 is SmolLM2's hidden size (the 4-step prefetch at one row); 2320 and 4160 take the 1-step
// one.
TEST_F(SkinnyGemmTest, NormAndSwiGluFusionsMatchTheSeparateSteps) {
  for (const auto& [ffn, K] : {std::pair<int64_t, int64_t>{504, 576}, {496, 576}, {496, 2320}, {248, 4160}}) {
    const int64_t ld_x = K + 8;
    const float eps = 1e-5f;
    const auto weights = bf16_weights(2 * ffn * K, 0.05f);
    const std::vector<uint16_t>& w = weights.bits;
    const std::vector<double>& wr = weights.values;
    auto gamma = random(K, 1.0f);
    for (auto& g : gamma) g += 1.5f;  // RMSNorm weights sit around 1; never zero
    uint16_t* dw = nullptr;
    float *dx = nullptr, *dy = nullptr, *dg = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dx, kSkinnyMaxRows * ld_x * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, kSkinnyMaxRows * 2 * ffn * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dg, K * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dg, gamma.data(), K * 4, cudaMemcpyHostToDevice), cudaSuccess);
    for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 9, 16, 17, 40}) {
      const auto x = random(T * ld_x, 3.0f);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      // Reference: xn = rmsnorm(x), gate/up = xn · W, swiglu.
      std::vector<double> norm_out(T * 2 * ffn), swiglu_out(T * ffn);
      for (int64_t t = 0; t < T; ++t) {
        double ss = 0;
        for (int64_t k = 0; k < K; ++k) ss += double(x[t * ld_x + k]) * x[t * ld_x + k];
        const double inv = 1.0 / std::sqrt(ss / K + eps);
        for (int64_t n = 0; n < 2 * ffn; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += wr[n * K + k] * (x[t * ld_x + k] * inv * gamma[k]);
          norm_out[t * 2 * ffn + n] = acc;
        }
        for (int64_t n = 0; n < ffn; ++n) {
          const double g = norm_out[t * 2 * ffn + n], u = norm_out[t * 2 * ffn + ffn + n];
          swiglu_out[t * ffn + n] = g / (1.0 + std::exp(-g)) * u;
        }
      }
      auto check = [&](const std::vector<double>& ref, int64_t cols, const char* what) {
        std::vector<float> y(T * cols);
        ASSERT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        double num = 0, den = 0;
        for (size_t i = 0; i < y.size(); ++i) {
          num += (y[i] - ref[i]) * (y[i] - ref[i]);
          den += ref[i] * ref[i];
        }
        EXPECT_LT(std::sqrt(num / den), 1e-5) << what << " T " << T;
      };
      ASSERT_TRUE(skinny_gemm_norm(dw, 2 * ffn, K, dx, ld_x, T, dg, eps, dy, 2 * ffn, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      check(norm_out, 2 * ffn, "norm");
      ASSERT_TRUE(skinny_gemm_norm_swiglu(dw, ffn, K, dx, ld_x, T, dg, eps, dy, ffn, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      check(swiglu_out, ffn, "norm + swiglu");
      if (ffn % 16 == 0 && T <= kSkinnyTcMaxRows) {
        ASSERT_TRUE(skinny_gemm_tc_norm(dw, 2 * ffn, K, dx, ld_x, T, dg, eps, dy, 2 * ffn, nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        check(norm_out, 2 * ffn, "tensor-core norm");
        ASSERT_TRUE(skinny_gemm_tc_norm_swiglu(dw, ffn, K, dx, ld_x, T, dg, eps, dy, ffn, nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        check(swiglu_out, ffn, "tensor-core norm + swiglu");
      }
    }
    EXPECT_FALSE(skinny_gemm_norm(dw, 2 * ffn, K, dx, ld_x, 1, nullptr, eps, dy, 2 * ffn, nullptr));  // no gamma
    EXPECT_FALSE(skinny_gemm_norm_swiglu(dw, ffn, K, dx, ld_x, 1, dg + 1, eps, dy, ffn, nullptr));    // misaligned
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dg);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// A verify row must be bit-identical to the decode step of the same token (the GPU fidelity
// invariant: greedy speculative output == plain greedy): every row t of a T-row product, for
// T = 2..16, each fusion and each choice of multi-row kernel (the register kernel with all rows
// in one block or in groups of 4 or 8, the choice by shape, the staged kernel at 1 / 2 / 4 outputs
// a warp), equals the one-row kernel on that row alone,
// bit for bit. N 1003 is no multiple of a block's columns, 8456 wide enough for the staged
// kernel by shape; K 576 is SmolLM2's hidden size (its last step covers lanes 0..7 only), 1544
// like its down projection's, 4096 Llama-8B's (staged by shape from 3 rows; past 6 rows X in
// chunks), 4160 in chunks from 7 rows, the last chunk short and its last step covering lanes
// 0..7 only.
TEST_F(SkinnyGemmTest, MultiRowKernelsMatchTheOneRowKernelBitForBit) {
  enum Kind { kPlain, kAccumulate, kNorm, kNormSwiGlu };
  for (const auto& [N, K] :
       {std::pair<int64_t, int64_t>{1003, 576}, {8456, 576}, {1003, 1544}, {1003, 4096}, {250, 4160}}) {
    const int64_t ld_x = K + 4, max_T = 16;
    const auto w = bf16_weights(2 * N * K, 0.05f);
    auto gamma = random(K, 1.0f);
    for (auto& g : gamma) g += 1.5f;  // never zero
    const auto x = random(max_T * ld_x, 3.0f), y0 = random(max_T * N, 1.0f);
    uint16_t* dw = nullptr;
    float *dx = nullptr, *dy = nullptr, *dg = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, w.bits.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, y0.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dg, K * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, w.bits.data(), w.bits.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dg, gamma.data(), K * 4, cudaMemcpyHostToDevice), cudaSuccess);
    // Y of rows [t0, t0 + T) of x, starting from y0's rows (accumulate) or overwritten.
    auto product = [&](Kind kind, int64_t t0, int64_t T, std::vector<float>* out) {
      ASSERT_EQ(cudaMemcpy(dy, y0.data() + t0 * N, T * N * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const float* xt = dx + t0 * ld_x;
      bool ok = false;
      if (kind == kPlain || kind == kAccumulate) {
        ok = skinny_gemm(dw, N, K, xt, ld_x, T, dy, N, kind == kAccumulate, nullptr);
      } else if (kind == kNorm) {
        ok = skinny_gemm_norm(dw, N, K, xt, ld_x, T, dg, 1e-5f, dy, N, nullptr);
      } else {
        ok = skinny_gemm_norm_swiglu(dw, N, K, xt, ld_x, T, dg, 1e-5f, dy, N, nullptr);
      }
      ASSERT_TRUE(ok);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      out->resize(T * N);
      ASSERT_EQ(cudaMemcpy(out->data(), dy, T * N * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    };
    for (Kind kind : {kPlain, kAccumulate, kNorm, kNormSwiGlu}) {
      std::vector<float> single(max_T * N), row;
      for (int64_t t = 0; t < max_T; ++t) {
        product(kind, t, 1, &row);
        std::copy(row.begin(), row.end(), single.begin() + t * N);
      }
      // (staged outputs per warp, register kernel's row group)
      for (const auto& [outputs, group] : {std::pair{-1, -1}, {-1, 4}, {-1, 8}, {0, 0}, {1, 0}, {2, 0}, {4, 0}}) {
        set_skinny_outputs_per_warp(outputs);
        set_skinny_row_group(group);
        for (int64_t T = 2; T <= max_T; ++T) {
          std::vector<float> multi;
          product(kind, 0, T, &multi);
          int64_t differ = 0;
          for (int64_t i = 0; i < T * N; ++i) {
            uint32_t a = 0, b = 0;
            std::memcpy(&a, &multi[i], 4);
            std::memcpy(&b, &single[i], 4);
            differ += a != b;
          }
          EXPECT_EQ(differ, 0) << "kind " << kind << " N " << N << " K " << K << " T " << T << " outputs/warp "
                               << outputs << " row group " << group;
        }
      }
      set_skinny_outputs_per_warp(0);
      set_skinny_row_group(0);
    }
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dg);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// The one-row RMSNorm-fused products with x ⊙ gamma staged once a block (the default) against
// each warp's own (skinny_kernel), bit for bit: K 576 and 1000 (4 steps before the wait; 1000's
// last step covers lanes 0..28 only), 2048 (8 steps, the whole row: OLMoE's QKV), 4096 (8 steps,
// then the streaming loop: Llama-8B's); N 1003 leaves the last block's warps past N (they stage
// and leave).
TEST_F(SkinnyGemmTest, StagedNormRowEqualsTheRegisterKernelBitForBit) {
  for (const auto& [N, K] : {std::pair<int64_t, int64_t>{1003, 576}, {1003, 1000}, {2048, 2048}, {1003, 4096}}) {
    const auto w = bf16_weights(2 * N * K, 0.05f);
    auto gamma = random(K, 1.0f);
    for (auto& g : gamma) g += 1.5f;  // never zero
    const auto x = random(K, 3.0f);
    uint16_t* dw = nullptr;
    float *dx = nullptr, *dy = nullptr, *dg = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, w.bits.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dx, K * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dy, 2 * N * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dg, K * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, w.bits.data(), w.bits.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), K * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dg, gamma.data(), K * 4, cudaMemcpyHostToDevice), cudaSuccess);
    for (bool swiglu : {false, true}) {
      std::vector<float> y[2];
      for (bool staged : {false, true}) {
        set_skinny_norm_row_staged(staged);
        ASSERT_EQ(cudaMemset(dy, 0xff, 2 * N * 4), cudaSuccess);  // NaNs where nothing was written
        ASSERT_TRUE(swiglu ? skinny_gemm_norm_swiglu(dw, N, K, dx, K, 1, dg, 1e-5f, dy, N, nullptr)
                           : skinny_gemm_norm(dw, 2 * N, K, dx, K, 1, dg, 1e-5f, dy, 2 * N, nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        y[staged].resize(swiglu ? N : 2 * N);
        ASSERT_EQ(cudaMemcpy(y[staged].data(), dy, y[staged].size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      }
      set_skinny_norm_row_staged(true);
      int64_t differ = 0, finite = 0;
      for (size_t i = 0; i < y[0].size(); ++i) {
        differ += std::memcmp(&y[0][i], &y[1][i], 4) != 0;
        finite += std::isfinite(y[1][i]);
      }
      EXPECT_EQ(differ, 0) << "N " << N << " K " << K << " swiglu " << swiglu;
      EXPECT_EQ(finite, static_cast<int64_t>(y[1].size())) << "N " << N << " K " << K << " swiglu " << swiglu;
    }
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dg);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

TEST_F(SkinnyGemmTest, RefusesShapesItDoesNotCover) {
  uint16_t* dw = nullptr;
  float *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dw, 64 * 64 * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dx, 128 * 64 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dy, 128 * 64 * 4), cudaSuccess);
  EXPECT_FALSE(skinny_gemm(dw, 64, 60, dx, 60, 1, dy, 64, false, nullptr));  // K not a multiple of 8
  EXPECT_FALSE(skinny_gemm(dw, 64, 64, dx, 66, 1, dy, 64, false, nullptr));  // row stride not 16-byte
  EXPECT_FALSE(skinny_gemm(dw, 64, 64, dx, 64, 0, dy, 64, false, nullptr));  // no rows
  EXPECT_FALSE(skinny_gemm(dw, 64, 64, dx, 64, kSkinnyMaxRows + 1, dy, 64, false, nullptr));
  EXPECT_FALSE(skinny_gemm(dw + 1, 64, 64, dx, 64, 1, dy, 64, false, nullptr));  // misaligned W
  EXPECT_TRUE(skinny_gemm(dw, 64, 64, dx, 64, 1, dy, 64, false, nullptr));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(dw);
  cudaFree(dx);
  cudaFree(dy);
}

}  // namespace
}  // namespace specula::cuda

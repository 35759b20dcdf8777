// kernels/cuda/moe against the CPU's MoE (engine/model/moe.cpp): router logits against a double
// product; each token's routing against route_token over the same logits (ids exactly, except
// tokens whose top k + 1 probabilities come within 1e-6 of each other, which are counted and
// printed), its skipped count against skip_count over the same weights, exactly; the experts
// that ran against MoeLayerStats::experts_run; the output against a double-precision MoE over
// the GPU's routing; two runs bit for bit. Random inputs drawn fresh every run.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "engine/model/moe.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/moe.h"
#include "tests/kernels/cuda/gpu_test_support.h"

namespace specula::cuda {
namespace {

// bf16 bits → the exact value.
double bf(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A fast seeded generator (the expert weights are ~0.5G values): splitmix64.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform(float scale) { return (static_cast<float>(next() >> 40) / 16777216.0f * 2.0f - 1.0f) * scale; }
};

std::vector<uint16_t> bf16_random(Rng& rng, size_t n, float scale) {
  std::vector<uint16_t> v(n);
  for (auto& b : v) b = __bfloat16_as_ushort(__float2bfloat16_rn(rng.uniform(scale)));
  return v;
}
std::vector<float> f32_random(Rng& rng, size_t n, float scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(scale);
  return v;
}

using testing::download;
using testing::upload;

// out[r] = Σ_k W[r][k] · x[k] in double, W (rows, n) bf16.
double dot_row(const uint16_t* w, const float* x, int64_t n) {
  double acc = 0;
  for (int64_t k = 0; k < n; ++k) acc += bf(w[k]) * x[k];
  return acc;
}
// down(silu(gate · x) ⊙ (up · x)) in double: gate_up (2F, dim), down (dim, F).
std::vector<double> swiglu_ffn(const uint16_t* gate_up, const uint16_t* down, int64_t F, int64_t dim, const float* x) {
  std::vector<double> act(F), y(dim, 0.0);
  for (int64_t f = 0; f < F; ++f) {
    const double g = dot_row(gate_up + f * dim, x, dim), u = dot_row(gate_up + (F + f) * dim, x, dim);
    act[f] = g / (1.0 + std::exp(-g)) * u;
  }
  for (int64_t d = 0; d < dim; ++d) {
    double acc = 0;
    for (int64_t f = 0; f < F; ++f) acc += bf(down[d * F + f]) * act[f];
    y[d] = acc;
  }
  return y;
}

template <class Fn>
void parallel_over(int64_t n, Fn&& fn) {
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      for (int64_t i = w; i < n; i += workers) fn(i);
    });
  }
  for (auto& t : pool) t.join();
}

class MoeTest : public testing::GpuRandomTest {
 public:
  void SetUp() override {
    GpuRandomTest::SetUp();
    fast_.s = seed_;  // the expert weights are large: the cheap generator draws them
  }
  void check(const MoeShape& shape, std::initializer_list<int64_t> token_counts);
  Rng fast_{0};
};

void MoeTest::check(const MoeShape& s, std::initializer_list<int64_t> token_counts) {
  const int64_t E = s.n_experts, k = s.top_k, dim = s.dim, F = s.expert_ffn, SF = s.shared_ffn;
  const int64_t max_T = std::max(token_counts), ld_x = dim + 4;
  const auto router = bf16_random(fast_, E * dim, 0.05f);
  const auto gate_up = bf16_random(fast_, E * 2 * F * dim, 0.05f);
  const auto down = bf16_random(fast_, E * dim * F, 0.05f);
  const auto shared_gate_up = bf16_random(fast_, 2 * SF * dim, 0.05f);
  const auto shared_down = bf16_random(fast_, dim * SF, 0.05f);
  const auto shared_gate = f32_random(fast_, SF > 0 ? dim : 0, 0.05f);
  MoeDeviceWeights w{upload(router), upload(gate_up), upload(down)};
  if (SF > 0) {
    w.shared_gate_up = upload(shared_gate_up);
    w.shared_down = upload(shared_down);
    w.shared_gate = upload(shared_gate);
  }

  // Thresholds as the engine calibrates them (moe_calibration.h): tau_s = the median of r_s over
  // calibration tokens, here 64 random ones routed on the CPU.
  std::vector<double> thresholds;
  for (int sk = 1; sk < k; ++sk) {
    std::vector<double> ratios;
    for (int c = 0; c < 64; ++c) {
      const auto x = f32_random(fast_, dim, 1.0f);
      std::vector<float> logits(E);
      for (int64_t e = 0; e < E; ++e) logits[e] = static_cast<float>(dot_row(router.data() + e * dim, x.data(), dim));
      std::vector<int32_t> ids(k);
      std::vector<float> wts(k);
      route_token(logits, s.normalize, ids, wts);
      ratios.push_back(skip_ratio(wts, sk));
    }
    std::nth_element(ratios.begin(), ratios.begin() + 32, ratios.end());
    thresholds.push_back(ratios[32]);
  }
  double* d_thresholds = upload(thresholds);
  const MoeDeviceSkip skip{static_cast<int>(k - 1), d_thresholds, static_cast<int>(thresholds.size())};

  void* d_scratch = nullptr;
  const size_t scratch_bytes = moe_scratch_bytes(s, max_T);
  ASSERT_EQ(cudaMalloc(&d_scratch, scratch_bytes), cudaSuccess);
  const MoeScratch m = moe_scratch(d_scratch, s, max_T);
  float *d_x = nullptr, *d_y = nullptr;
  ASSERT_EQ(cudaMalloc(&d_x, max_T * ld_x * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_y, max_T * dim * 4), cudaSuccess);

  for (const int64_t T : token_counts) {
    for (const bool skipping : {false, true}) {
      if (skipping && k < 2) continue;
      const bool accumulate = skipping;  // both paths of y, once each
      const auto x = f32_random(fast_, T * ld_x, 1.0f), y0 = f32_random(fast_, T * dim, 1.0f);
      ASSERT_EQ(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      std::vector<float> y_runs[2];
      for (auto& y : y_runs) {
        if (accumulate) {
          ASSERT_EQ(cudaMemcpy(d_y, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        } else {
          ASSERT_EQ(cudaMemset(d_y, 0xff, T * dim * 4), cudaSuccess);  // NaN: every element must be written
        }
        ASSERT_EQ(cudaMemset(d_scratch, 0xff, scratch_bytes), cudaSuccess);
        ASSERT_TRUE(moe_ffn(s, w, d_x, ld_x, T, skipping ? &skip : nullptr, d_y, dim, accumulate, m, nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        y = download(d_y, T * dim);
      }
      EXPECT_EQ(std::memcmp(y_runs[0].data(), y_runs[1].data(), T * dim * 4), 0) << "two runs differ, T " << T;
      if (SF > 0) {
        // The staged calls, the shared expert's output handed to moe_combine from another buffer
        // (as the backend's dense path would give it): the same bits.
        float* d_shared = nullptr;
        ASSERT_EQ(cudaMalloc(&d_shared, T * dim * 4), cudaSuccess);
        if (accumulate) {
          ASSERT_EQ(cudaMemcpy(d_y, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        } else {
          ASSERT_EQ(cudaMemset(d_y, 0xff, T * dim * 4), cudaSuccess);
        }
        ASSERT_EQ(cudaMemset(d_scratch, 0xff, scratch_bytes), cudaSuccess);
        ASSERT_TRUE(moe_route(s, w, d_x, ld_x, T, skipping ? &skip : nullptr, m, nullptr));
        moe_experts(s, w, d_x, ld_x, T, m, nullptr);
        ASSERT_TRUE(moe_shared_expert(s, w, d_x, ld_x, T, m, nullptr));
        ASSERT_EQ(cudaMemcpy(d_shared, m.shared_out, T * dim * 4, cudaMemcpyDeviceToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemset(m.shared_out, 0xff, T * dim * 4), cudaSuccess);
        moe_combine(s, T, d_shared, d_y, dim, accumulate, m, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto staged = download(d_y, T * dim);
        EXPECT_EQ(std::memcmp(staged.data(), y_runs[0].data(), T * dim * 4), 0) << "staged calls differ, T " << T;
        cudaFree(d_shared);
      }
      const auto& y = y_runs[0];
      const auto logits = download(m.logits, T * E);
      const auto ids = download(m.ids, T * k);
      const auto wts = download(m.weights, T * k);
      const auto skipped = download(m.skipped, T);
      const auto n_active = download(m.n_active, 1);
      const auto active = download(m.active, E);

      // 1. Router logits.
      double num = 0, den = 0;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < E; ++e) {
          const double ref = dot_row(router.data() + e * dim, x.data() + t * ld_x, dim);
          num += (logits[t * E + e] - ref) * (logits[t * E + e] - ref);
          den += ref * ref;
        }
      }
      EXPECT_LT(std::sqrt(num / den), 1e-5) << "router logits, T " << T;

      // 2. Routing: route_token and skip_count over the GPU's logits and weights.
      MoeLayerStats stats;
      stats.n_experts = static_cast<int32_t>(E);
      int near_ties = 0, tokens_skipping = 0;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> cpu_ids(k);
        std::vector<float> cpu_w(k);
        route_token({logits.data() + t * E, static_cast<size_t>(E)}, s.normalize, cpu_ids, cpu_w);
        std::vector<double> p(logits.begin() + t * E, logits.begin() + (t + 1) * E);
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (auto& v : p) sum += (v = std::exp(v - mx));
        for (auto& v : p) v /= sum;
        std::sort(p.begin(), p.end(), std::greater<>());
        bool tie = false;
        for (int64_t i = 0; i < k && i + 1 < E; ++i) tie = tie || p[i] - p[i + 1] < 1e-6;
        const std::span<const float> gpu_w(wts.data() + t * k, static_cast<size_t>(k));
        if (tie) {
          ++near_ties;
        } else {
          for (int64_t i = 0; i < k; ++i) {
            EXPECT_EQ(ids[t * k + i], cpu_ids[i]) << "token " << t << " slot " << i;
            EXPECT_NEAR(gpu_w[i], cpu_w[i], 1e-6) << "token " << t << " slot " << i;
          }
        }
        const int expected_skip = skipping ? skip_count(gpu_w, thresholds, static_cast<int>(k - 1)) : 0;
        EXPECT_EQ(skipped[t], expected_skip) << "token " << t;
        tokens_skipping += skipped[t] > 0;
        stats.tokens.push_back({{ids.begin() + t * k, ids.begin() + (t + 1) * k}, {gpu_w.begin(), gpu_w.end()},
                                skipped[t]});
      }
      const std::vector<int32_t> run = stats.experts_run();
      ASSERT_EQ(n_active[0], static_cast<int32_t>(run.size())) << "T " << T;
      EXPECT_TRUE(std::equal(run.begin(), run.end(), active.begin())) << "active experts, T " << T;
      std::printf("E %lld top-%lld dim %lld ffn %lld shared %lld T %lld %s: %zu experts ran, %lld of %lld pairs "
                  "skipped (%d tokens), %d near-tie tokens\n",
                  static_cast<long long>(E), static_cast<long long>(k), static_cast<long long>(dim),
                  static_cast<long long>(F), static_cast<long long>(SF), static_cast<long long>(T),
                  skipping ? "skipping" : "no skip", run.size(), static_cast<long long>(stats.skipped()),
                  static_cast<long long>(stats.routed()), tokens_skipping, near_ties);
      if (skipping && T >= 16) {  // each token skips with probability ~1/2 (median thresholds)
        EXPECT_GT(tokens_skipping, 0) << "the rule never fired: the test would not exercise it";
      }

      // 3. The output: a double MoE over the GPU's routing.
      std::vector<double> ref(T * dim);
      parallel_over(T, [&](int64_t t) {
        const float* xt = x.data() + t * ld_x;
        for (int64_t d = 0; d < dim; ++d) ref[t * dim + d] = accumulate ? y0[t * dim + d] : 0.0;
        for (int64_t i = 0; i < k - skipped[t]; ++i) {
          const int64_t e = ids[t * k + i];
          const auto out = swiglu_ffn(gate_up.data() + e * 2 * F * dim, down.data() + e * dim * F, F, dim, xt);
          for (int64_t d = 0; d < dim; ++d) ref[t * dim + d] += wts[t * k + i] * out[d];
        }
        if (SF > 0) {
          double g = 0;
          for (int64_t d = 0; d < dim; ++d) g += double(shared_gate[d]) * xt[d];
          const auto out = swiglu_ffn(shared_gate_up.data(), shared_down.data(), SF, dim, xt);
          for (int64_t d = 0; d < dim; ++d) ref[t * dim + d] += out[d] / (1.0 + std::exp(-g));
        }
      });
      num = den = 0;
      for (int64_t i = 0; i < T * dim; ++i) {
        num += (y[i] - ref[i]) * (y[i] - ref[i]);
        den += ref[i] * ref[i];
      }
      std::printf("  output relative L2 %.3g\n", std::sqrt(num / den));
      EXPECT_LT(std::sqrt(num / den), 1e-4) << "output, T " << T << (skipping ? " skipping" : "");
    }
  }
  for (const void* p : {static_cast<const void*>(w.router), static_cast<const void*>(w.gate_up),
                        static_cast<const void*>(w.down), static_cast<const void*>(w.shared_gate_up),
                        static_cast<const void*>(w.shared_down), static_cast<const void*>(w.shared_gate)}) {
    cudaFree(const_cast<void*>(p));
  }
  cudaFree(d_thresholds);
  cudaFree(d_scratch);
  cudaFree(d_x);
  cudaFree(d_y);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(MoeTest, QwenMoeShapeWithSharedExpertMatchesCpuRouting) {
  // Qwen1.5-MoE-A2.7B / Qwen2-MoE-like: 60 experts, top-4 without renormalization, a shared
  // expert of 4 experts' width behind a sigmoid gate.
  check({.dim = 2048, .n_experts = 60, .top_k = 4, .expert_ffn = 1408, .shared_ffn = 5632, .normalize = false},
        {1, 8, 64});
}

TEST_F(MoeTest, MixtralShapeMatchesCpuRouting) {
  // Mixtral-like: 8 experts, top-2 renormalized, dim 4096; the expert FFN cut from 14336 to 2048
  // to keep the double reference and the host copy of the weights small.
  check({.dim = 4096, .n_experts = 8, .top_k = 2, .expert_ffn = 2048, .shared_ffn = 0, .normalize = true},
        {1, 16, 64});
}

TEST_F(MoeTest, RefusesShapesItDoesNotCover) {
  const MoeShape ok{.dim = 64, .n_experts = 8, .top_k = 2, .expert_ffn = 64, .shared_ffn = 0, .normalize = false};
  void* scratch = nullptr;
  float *x = nullptr, *y = nullptr;
  uint16_t* wts = nullptr;
  ASSERT_EQ(cudaMalloc(&scratch, moe_scratch_bytes(ok, kMoeMaxTokens)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&x, kMoeMaxTokens * 64 * 4 + 16), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&y, kMoeMaxTokens * 64 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&wts, 8 * 3 * 64 * 64 * 2), cudaSuccess);
  const MoeScratch m = moe_scratch(scratch, ok, kMoeMaxTokens);
  const MoeDeviceWeights w{wts, wts, wts, nullptr, nullptr, nullptr};
  MoeShape bad = ok;
  bad.top_k = 9;  // more than the experts
  EXPECT_FALSE(moe_ffn(bad, w, x, 64, 1, nullptr, y, 64, false, m, nullptr));
  bad = ok;
  bad.expert_ffn = 60;  // not a multiple of 8
  EXPECT_FALSE(moe_ffn(bad, w, x, 64, 1, nullptr, y, 64, false, m, nullptr));
  EXPECT_FALSE(moe_ffn(ok, w, x, 64, kMoeMaxTokens + 1, nullptr, y, 64, false, m, nullptr));
  EXPECT_FALSE(moe_ffn(ok, w, x + 1, 64, 1, nullptr, y, 64, false, m, nullptr));  // misaligned X
  bad = ok;
  bad.shared_ffn = 64;  // a shared expert without its weights
  EXPECT_FALSE(moe_ffn(bad, w, x, 64, 1, nullptr, y, 64, false, m, nullptr));
  cudaFree(scratch);
  cudaFree(x);
  cudaFree(y);
  cudaFree(wts);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace specula::cuda

// RMSNorm, RoPE (both pairings), SwiGLU, softmax, exp, dot/axpy and grouped attention
// against naive double-precision references on random data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"

namespace specula {
namespace {

std::vector<float> random_vector(int64_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

TEST(Ops, RmsNorm) {
  std::mt19937 rng(std::random_device{}());
  for (int64_t n : {1, 7, 16, 576, 1000}) {
    auto x = random_vector(n, rng, 3.0f), w = random_vector(n, rng);
    std::vector<float> out(x.size());
    rmsnorm(x.data(), w.data(), out.data(), n, 1e-5f);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(out[i], x[i] * scale * w[i], 1e-5 * (1 + std::fabs(x[i] * scale * w[i])));
  }
}

TEST(Ops, RopeBothPairings) {
  std::mt19937 rng(std::random_device{}());
  const int64_t hd = 64, heads = 3;
  for (int64_t pos : {0, 1, 17, 4095}) {
    std::vector<float> table(hd);
    rope_table(pos, hd, 100000.0f, table.data());
    for (RopePairing pairing : {RopePairing::Adjacent, RopePairing::HalfSplit}) {
      auto x = random_vector(heads * hd, rng);
      auto y = x;
      rope_apply(y.data(), heads, hd, table.data(), pairing);
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double angle = pos * std::pow(100000.0, -2.0 * i / hd);
          const int64_t a = h * hd + (pairing == RopePairing::Adjacent ? 2 * i : i);
          const int64_t b = h * hd + (pairing == RopePairing::Adjacent ? 2 * i + 1 : i + hd / 2);
          const double ya = x[a] * std::cos(angle) - x[b] * std::sin(angle);
          const double yb = x[b] * std::cos(angle) + x[a] * std::sin(angle);
          // float angles (as transformers computes them) lose ~pos·2^-24 radians
          const double tol = 1e-5 + pos * 1.2e-7 * (std::fabs(x[a]) + std::fabs(x[b]));
          EXPECT_NEAR(y[a], ya, tol) << "pos " << pos << " i " << i;
          EXPECT_NEAR(y[b], yb, tol) << "pos " << pos << " i " << i;
        }
      }
      // Rotation keeps every pair's norm.
      double n0 = 0, n1 = 0;
      for (size_t i = 0; i < x.size(); ++i) n0 += x[i] * x[i], n1 += y[i] * y[i];
      EXPECT_NEAR(n0, n1, 1e-4 * n0);
    }
  }
}

TEST(Ops, ExpAndSwiglu) {
  std::mt19937 rng(std::random_device{}());
  auto x = random_vector(1000, rng, 20.0f);
  x[0] = -100.0f;
  x[1] = 100.0f;
  x[2] = -std::numeric_limits<float>::infinity();
  auto e = x;
  exp_inplace(e.data(), static_cast<int64_t>(e.size()));
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[2], 0.0f);
  EXPECT_TRUE(std::isfinite(e[1]));
  for (size_t i = 3; i < x.size(); ++i) {
    if (x[i] < -87.0f || x[i] > 88.0f) continue;
    EXPECT_NEAR(e[i], std::exp(static_cast<double>(x[i])), 3e-7 * std::exp(static_cast<double>(x[i]))) << x[i];
  }
  auto g = random_vector(777, rng, 4.0f), u = random_vector(777, rng);
  std::vector<float> out(g.size());
  swiglu(g.data(), u.data(), out.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want)));
  }
}

TEST(Ops, SoftmaxDotAxpy) {
  std::mt19937 rng(std::random_device{}());
  auto x = random_vector(100, rng, 5.0f);
  x[7] = -std::numeric_limits<float>::infinity();
  auto p = x;
  softmax(p.data(), 100);
  double max = -1e30, sum = 0;
  for (float v : x) max = std::max(max, static_cast<double>(v));
  for (float v : x) sum += std::exp(v - max);
  for (int i = 0; i < 100; ++i) EXPECT_NEAR(p[i], std::exp(x[i] - max) / sum, 1e-6);
  EXPECT_EQ(p[7], 0.0f);

  std::vector<float> none(5, -std::numeric_limits<float>::infinity());
  softmax(none.data(), 5);
  for (float v : none) EXPECT_EQ(v, 0.0f);

  auto a = random_vector(67, rng), b = random_vector(67, rng);
  double dot = 0;
  for (int i = 0; i < 67; ++i) dot += static_cast<double>(a[i]) * b[i];
  EXPECT_NEAR(dot_f32(a.data(), b.data(), 67), dot, 1e-4);
  auto y = b;
  axpy_f32(0.5f, a.data(), y.data(), 67);
  for (int i = 0; i < 67; ++i) EXPECT_NEAR(y[i], b[i] + 0.5f * a[i], 1e-6);
}

TEST(Ops, AttentionGroupMatchesNaive) {
  std::mt19937 rng(std::random_device{}());
  const int64_t hd = 64, group = 3;
  // Three spans: 16 rows, 5 rows, and 9 rows with a mask.
  auto keys = random_vector(30 * hd, rng), values = random_vector(30 * hd, rng), q = random_vector(group * hd, rng);
  std::vector<uint8_t> allowed = {1, 0, 1, 1, 0, 0, 1, 0, 1};
  std::vector<KvSpan> spans = {{keys.data(), values.data(), 16, nullptr},
                               {keys.data() + 16 * hd, values.data() + 16 * hd, 5, nullptr},
                               {keys.data() + 21 * hd, values.data() + 21 * hd, 9, allowed.data()}};
  std::vector<float> scores(group * 30), out(group * hd);
  const float scale = 0.125f;
  attention_group(q.data(), group, hd, spans, scale, scores.data(), out.data());
  for (int64_t g = 0; g < group; ++g) {
    std::vector<double> s;
    std::vector<int64_t> rows;
    for (int64_t j = 0; j < 30; ++j) {
      if (j >= 21 && !allowed[j - 21]) continue;
      double d = 0;
      for (int64_t k = 0; k < hd; ++k) d += static_cast<double>(q[g * hd + k]) * keys[j * hd + k];
      s.push_back(d * scale);
      rows.push_back(j);
    }
    double max = *std::max_element(s.begin(), s.end()), sum = 0;
    for (double& v : s) sum += (v = std::exp(v - max));
    for (int64_t k = 0; k < hd; ++k) {
      double want = 0;
      for (size_t i = 0; i < rows.size(); ++i) want += s[i] / sum * values[rows[i] * hd + k];
      EXPECT_NEAR(out[g * hd + k], want, 1e-5) << "head " << g << " dim " << k;
    }
  }
}

// Queries with masks of their own (allowed_stride) in one call give, bit for bit, what each
// query gives alone with its mask: the batched tree attention relies on it.
TEST(Ops, AttentionGroupPerQueryMasksMatchOneQueryCalls) {
  std::mt19937 rng(std::random_device{}());
  const int64_t hd = 64, n_queries = 5, n_new = 7;
  auto keys = random_vector(23 * hd, rng), values = random_vector(23 * hd, rng), q = random_vector(n_queries * hd, rng);
  std::vector<uint8_t> allowed(static_cast<size_t>(n_queries * n_new));
  for (auto& a : allowed) a = static_cast<uint8_t>(rng() % 2);
  allowed[0] = 1;  // query 0 sees a new row, so sharing its mask changes query 3
  for (int64_t j = 0; j < n_new; ++j) allowed[static_cast<size_t>(3 * n_new + j)] = 0;  // query 3 sees only the shared rows
  std::vector<KvSpan> spans = {{keys.data(), values.data(), 16, nullptr},
                               {keys.data() + 16 * hd, values.data() + 16 * hd, n_new, allowed.data(), n_new}};
  std::vector<float> scores(n_queries * 23), out(n_queries * hd);
  attention_group(q.data(), n_queries, hd, spans, 0.125f, scores.data(), out.data());
  for (int64_t g = 0; g < n_queries; ++g) {
    std::vector<KvSpan> own = spans;
    own[1].allowed = allowed.data() + g * n_new;
    own[1].allowed_stride = 0;
    std::vector<float> one_scores(23), one(hd);
    attention_group(q.data() + g * hd, 1, hd, own, 0.125f, one_scores.data(), one.data());
    ASSERT_EQ(0, std::memcmp(one.data(), out.data() + g * hd, hd * sizeof(float))) << "query " << g;
  }
  // A different mask must change the result (the stride is really used).
  std::vector<KvSpan> shared = spans;
  shared[1].allowed_stride = 0;
  std::vector<float> shared_out(out.size());
  attention_group(q.data(), n_queries, hd, shared, 0.125f, scores.data(), shared_out.data());
  EXPECT_NE(0, std::memcmp(shared_out.data() + 3 * hd, out.data() + 3 * hd, hd * sizeof(float)));
}

}  // namespace
}  // namespace specula

// Plain decoding (Sampler) and speculative verification (apply_sampling_filters) must draw from
// the same distribution, or a lossless speculative run would not match plain sampling. For
// several temperature/top-k/top-p settings, 1e5 Sampler draws are compared by chi-square with
// the probabilities apply_sampling_filters gives; tokens it zeroes must never be drawn.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/sampling/sampler.h"
#include "engine/spec/sampling_filters.h"
#include "tests/engine/spec/chi_square.h"

namespace specula {
namespace {

void expect_same_distribution(const std::vector<float>& logits, SamplingParams params) {
  const std::vector<float> probs = apply_sampling_filters(logits, params);
  Sampler sampler(params);
  const long n = 100000;
  std::vector<long> counts(logits.size(), 0);
  for (long i = 0; i < n; ++i) ++counts[static_cast<size_t>(sampler.sample(logits))];
  const std::vector<double> expected(probs.begin(), probs.end());
  const auto r = testing_support::chi_square(counts, expected, n);
  EXPECT_EQ(r.impossible, 0) << "Sampler drew a token the filters exclude (T=" << params.temperature
                             << " k=" << params.top_k << " p=" << params.top_p << ")";
  EXPECT_GT(r.p_value, 0.01) << "chi2 " << r.stat << " dof " << r.dof << " (T=" << params.temperature
                             << " k=" << params.top_k << " p=" << params.top_p << ")";
}

TEST(SamplerConsistency, SamplerDrawsWhatTheSpeculativeFiltersDescribe) {
  // Fixed seeds: a statistical test at p > 0.01 must not fail one run in a hundred by chance.
  std::mt19937_64 rng(20261122);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(40);
  for (float& x : logits) x = normal(rng);
  expect_same_distribution(logits, {1.0f, 0, 1.0f, 1});
  expect_same_distribution(logits, {0.7f, 10, 1.0f, 2});
  expect_same_distribution(logits, {1.3f, 0, 0.8f, 3});
  expect_same_distribution(logits, {1.0f, 12, 0.9f, 4});
}

TEST(SamplerConsistency, GreedyIsTheFiltersOneHot) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f};
  const auto probs = apply_sampling_filters(logits, {0.0f, 0, 1.0f, 0});
  Sampler sampler({0.0f, 0, 1.0f, 0});
  const int32_t drawn = sampler.sample(logits);
  EXPECT_EQ(drawn, 1);  // ties: the lower id on both sides
  EXPECT_FLOAT_EQ(probs[static_cast<size_t>(drawn)], 1.0f);
}

}  // namespace
}  // namespace specula

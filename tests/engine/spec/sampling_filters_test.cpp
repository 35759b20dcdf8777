#include "engine/spec/sampling_filters.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace specula {
namespace {

SamplingParams params(float temperature, int top_k = 0, float top_p = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

// logits ln(1), ln(2), ln(3), ln(4): softmax at temperature 1 is {1, 2, 3, 4} / 10.
const std::vector<float> kLogits1234 = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};

TEST(SamplingFilters, TemperatureZeroIsOneHotArgmax) {
  expect_probs(apply_sampling_filters(std::vector<float>{1, 3, 3, 2}, params(0)), {0, 1, 0, 0});  // tie: lower id
  expect_probs(apply_sampling_filters(std::vector<float>{-5, -1, -3}, params(-1)), {0, 1, 0});
}

TEST(SamplingFilters, SoftmaxWithTemperature) {
  expect_probs(apply_sampling_filters(kLogits1234, params(1)), {0.1, 0.2, 0.3, 0.4});
  // Doubling the logits and the temperature gives the same distribution.
  std::vector<float> doubled;
  for (float l : kLogits1234) doubled.push_back(2 * l);
  expect_probs(apply_sampling_filters(doubled, params(2)), {0.1, 0.2, 0.3, 0.4});
  // Temperature 0.5 squares the odds: {1, 4, 9, 16} / 30.
  expect_probs(apply_sampling_filters(kLogits1234, params(0.5f)), {1 / 30.0, 4 / 30.0, 9 / 30.0, 16 / 30.0});
  // Large logits do not overflow.
  expect_probs(apply_sampling_filters(std::vector<float>{1000.0f, 1000.0f}, params(1)), {0.5, 0.5});
}

TEST(SamplingFilters, TopKKeepsTheMostProbable) {
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 2)), {0, 0, 3 / 7.0, 4 / 7.0});
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 1)), {0, 0, 0, 1});
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 10)), {0.1, 0.2, 0.3, 0.4});  // k >= vocab: off
  // Ties at the cut keep the lower id.
  expect_probs(apply_sampling_filters(std::vector<float>{0, 1, 1, 1}, params(1, 2)), {0, 0.5, 0.5, 0});
}

TEST(SamplingFilters, TopPKeepsTheSmallestPrefixReachingP) {
  // Sorted 0.4, 0.3, 0.2, 0.1: 0.4 < 0.5 <= 0.7 keeps two tokens.
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 0, 0.5f)), {0, 0, 3 / 7.0, 4 / 7.0});
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 0, 0.35f)), {0, 0, 0, 1});
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 0, 0.75f)), {0, 2 / 9.0, 3 / 9.0, 4 / 9.0});
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 0, 0.0f)), {0, 0, 0, 1});  // at least one token
}

TEST(SamplingFilters, TopPAppliesToTheTopKRenormalisedDistribution) {
  // top-k 3 leaves {2, 3, 4} / 9 = .222, .333, .444; top-p .75 then stops at .777: two tokens.
  // (top-p alone would keep three, see above.)
  expect_probs(apply_sampling_filters(kLogits1234, params(1, 3, 0.75f)), {0, 0, 3 / 7.0, 4 / 7.0});
}

TEST(SamplingFilters, NegativeInfinityHasNoMass) {
  const float ninf = -INFINITY;
  expect_probs(apply_sampling_filters(std::vector<float>{ninf, 0.0f, ninf, 0.0f}, params(1)), {0, 0.5, 0, 0.5});
  expect_probs(apply_sampling_filters(std::vector<float>{ninf, 0.0f, ninf, 0.0f}, params(1, 3)), {0, 0.5, 0, 0.5});
  expect_probs(apply_sampling_filters(std::vector<float>{ninf, ninf}, params(1)), {1, 0});
  EXPECT_TRUE(apply_sampling_filters(std::vector<float>{}, params(1)).empty());
}

TEST(SampleIndex, FollowsTheWeights) {
  std::mt19937_64 rng(7);
  const std::vector<float> weights = {0.0f, 1.0f, 0.0f, 3.0f};  // unnormalised on purpose
  std::vector<int> counts(4, 0);
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sample_index(std::span<const float>(weights), rng))];
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[3] / static_cast<double>(draws), 0.75, 0.01);  // ~5 standard deviations
  EXPECT_EQ(sample_index(std::span<const float>(std::vector<float>{0, 0}), rng), -1);

  std::mt19937_64 a(3), b(3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(uniform_unit(a), uniform_unit(b));
  std::mt19937_64 c(3);
  for (int i = 0; i < 1000; ++i) {
    const double u = uniform_unit(c);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace specula

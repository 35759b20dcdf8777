#include "engine/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace specula {
namespace {

std::vector<float> random_logits(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(n);
  for (auto& v : logits) v = normal(rng);
  return logits;
}

TEST(Sampler, GreedyIsArgmax) {
  auto logits = random_logits(1000, std::random_device{}());
  logits[321] = 100.0f;
  Sampler greedy({0.0f, 0, 1.0f, 5});
  EXPECT_EQ(greedy.sample(logits), 321);
  EXPECT_EQ(argmax(logits), 321);
  EXPECT_EQ(argmax(std::vector<float>{1.0f, 3.0f, 3.0f}), 1);  // ties: lowest id
}

TEST(Sampler, SameSeedSameTokens) {
  auto logits = random_logits(5000, 7);
  for (SamplingParams params : {SamplingParams{0.8f, 0, 1.0f, 42}, SamplingParams{1.0f, 40, 1.0f, 42},
                                SamplingParams{0.7f, 0, 0.9f, 42}, SamplingParams{1.2f, 50, 0.8f, 42}}) {
    Sampler a(params), b(params);
    std::vector<int32_t> ta, tb;
    for (int i = 0; i < 200; ++i) {
      ta.push_back(a.sample(logits));
      tb.push_back(b.sample(logits));
    }
    EXPECT_EQ(ta, tb);
    params.seed = 43;
    Sampler c(params);
    std::vector<int32_t> tc;
    for (int i = 0; i < 200; ++i) tc.push_back(c.sample(logits));
    EXPECT_NE(ta, tc) << "a different seed should give a different sequence";
  }
}

TEST(Sampler, PinnedSequenceForSeed) {
  // The same seed gives the same tokens on every machine: mt19937_64 and our own
  // uniform conversion are fully specified.
  std::vector<float> logits = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f};
  Sampler s({1.0f, 0, 1.0f, 1234});
  std::vector<int32_t> got;
  for (int i = 0; i < 12; ++i) got.push_back(s.sample(logits));
  std::mt19937_64 rng(1234);
  double norm = 0;
  for (float l : logits) norm += std::exp(static_cast<double>(l - 2.0f));
  std::vector<int32_t> want;
  for (int i = 0; i < 12; ++i) {
    double target = static_cast<double>(rng() >> 11) * 0x1.0p-53 * norm;
    // Without top-k / top-p the candidates are walked in id order.
    int32_t pick = 4;
    for (int32_t id : {0, 1, 2, 3, 4}) {
      target -= std::exp(static_cast<double>(logits[id] - 2.0f));
      if (target < 0) {
        pick = id;
        break;
      }
    }
    want.push_back(pick);
  }
  EXPECT_EQ(got, want);
}

TEST(Sampler, TopKOnlyReturnsTheKBest) {
  auto logits = random_logits(2000, std::random_device{}());
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const std::set<int32_t> top5(order.begin(), order.begin() + 5);
  Sampler s({5.0f, 5, 1.0f, 9});  // hot temperature: without top-k anything could come out
  std::set<int32_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = s.sample(logits);
    ASSERT_TRUE(top5.count(t)) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 5u);
  Sampler one({1.0f, 1, 1.0f, 9});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(one.sample(logits), order[0]);
}

TEST(Sampler, TopPKeepsTheNucleus) {
  // probabilities 0.5, 0.25, 0.125, 0.0625, ... : top_p 0.8 keeps the first three.
  std::vector<float> logits;
  for (int i = 0; i < 20; ++i) logits.push_back(-static_cast<float>(i) * std::log(2.0f));
  Sampler s({1.0f, 0, 0.8f, 3});
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.sample(logits)]++;
  EXPECT_EQ(counts.size(), 3u);
  // Renormalized over the nucleus: 4/7, 2/7, 1/7.
  EXPECT_NEAR(counts[0] / static_cast<double>(n), 4.0 / 7, 0.02);
  EXPECT_NEAR(counts[1] / static_cast<double>(n), 2.0 / 7, 0.02);
  EXPECT_NEAR(counts[2] / static_cast<double>(n), 1.0 / 7, 0.02);
  Sampler tiny({1.0f, 0, 0.01f, 3});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(tiny.sample(logits), 0);
}

TEST(Sampler, TemperatureMatchesSoftmax) {
  std::vector<float> logits = {1.0f, 2.0f, 0.0f};
  const float temperature = 0.5f;
  Sampler s({temperature, 0, 1.0f, 11});
  std::vector<int> counts(3);
  const int n = 30000;
  for (int i = 0; i < n; ++i) counts[s.sample(logits)]++;
  double z = 0;
  for (float l : logits) z += std::exp(l / temperature);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(counts[i] / static_cast<double>(n), std::exp(logits[i] / temperature) / z, 0.015);
}

}  // namespace
}  // namespace specula

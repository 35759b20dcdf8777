// Quest bound and top-k block selection on random data (a fresh seed per run, printed).
#include "kernels/cpu/block_select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace specula {
namespace {

uint64_t fresh_seed() {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

TEST(QuestBound, BoundsEveryKeyOfTheBlockForTheWholeGroup) {
  std::mt19937_64 rng(fresh_seed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int hd = 64, group = 3, rows = 16;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> q(group * hd), keys(rows * hd), kmin(hd, 1e30f), kmax(hd, -1e30f);
    for (float& v : q) v = normal(rng);
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < hd; ++i) {
        const float v = normal(rng) * 2.0f + 0.5f;
        keys[r * hd + i] = v;
        kmin[i] = std::min(kmin[i], v);
        kmax[i] = std::max(kmax[i], v);
      }
    }
    const float bound = quest_bound(q.data(), group, hd, kmin.data(), kmax.data());
    for (int r = 0; r < rows; ++r) {
      float s = 0;
      for (int g = 0; g < group; ++g)
        for (int i = 0; i < hd; ++i) s += q[g * hd + i] * keys[r * hd + i];
      EXPECT_GE(bound + 1e-3f, s) << "trial " << trial << " row " << r;
    }
  }
}

TEST(SelectBlocks, KeepsSinkLocalAndTheTopScoresLikeASort) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_real_distribution<float> uniform(-5.0f, 5.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 5 + static_cast<int>(rng() % 60);
    const int sink = static_cast<int>(rng() % 3), local = 1 + static_cast<int>(rng() % 3);
    const int k = static_cast<int>(rng() % (n + 2));
    std::vector<float> scores(static_cast<size_t>(n));
    for (float& s : scores) s = uniform(rng);
    const auto chosen = select_blocks(scores, k, sink, local);
    ASSERT_TRUE(std::is_sorted(chosen.begin(), chosen.end()));
    if (k >= n) {
      EXPECT_EQ(static_cast<int>(chosen.size()), n);
      continue;
    }
    // Brute force: forced blocks, then the rest by descending score.
    std::vector<int> forced;
    for (int b = 0; b < n; ++b) {
      if (b < sink || b >= n - local) forced.push_back(b);
    }
    std::vector<int> rest;
    for (int b = 0; b < n; ++b) {
      if (b >= sink && b < n - local) rest.push_back(b);
    }
    std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return scores[a] > scores[b]; });
    std::vector<int> want = forced;
    for (int i = 0; i < k - static_cast<int>(forced.size()) && i < static_cast<int>(rest.size()); ++i) want.push_back(rest[i]);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(std::vector<int>(chosen.begin(), chosen.end()), want) << "trial " << trial << " n " << n << " k " << k;
    for (int b = 0; b < sink && b < n; ++b) EXPECT_TRUE(std::binary_search(chosen.begin(), chosen.end(), b));
    for (int b = std::max(0, n - local); b < n; ++b) EXPECT_TRUE(std::binary_search(chosen.begin(), chosen.end(), b));
  }
}

}  // namespace
}  // namespace specula

// KvCache: block size validation, capacity, row storage, Quest min/max after appends,
// commit compaction (in and out of order) and rollback, always against a brute-force model
// of which rows are present.
#include "engine/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

namespace specula {
namespace {

constexpr int64_t kLayers = 2, kHeads = 3, kDim = 5;

KvCache make(int block_size, int64_t capacity = 200) {
  auto kv = KvCache::create({kLayers, kHeads, kDim, capacity, block_size});
  EXPECT_TRUE(kv.ok()) << (kv ? "" : kv.error().message);
  return std::move(*kv);
}

// Test driver: writes random rows and remembers, per present row, the keys it holds.
struct Shadow {
  std::mt19937 rng{std::random_device{}()};
  std::vector<std::vector<float>> keys;  // row -> (layers, heads, dim)
  std::vector<std::vector<float>> values;

  std::vector<float> random_row() {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> row(kLayers * kHeads * kDim);
    for (auto& v : row) v = normal(rng);
    return row;
  }
  void append(KvCache& kv, int64_t n) {
    auto first = kv.append_provisional(n);
    ASSERT_TRUE(first.ok()) << first.error().message;
    ASSERT_EQ(*first, static_cast<int64_t>(keys.size()));
    for (int64_t i = 0; i < n; ++i) {
      keys.push_back(random_row());
      values.push_back(random_row());
    }
    for (int64_t l = 0; l < kLayers; ++l)  // layer-major, as a forward pass writes
      for (int64_t i = 0; i < n; ++i) {
        const auto& k = keys[*first + i];
        const auto& v = values[*first + i];
        kv.write(l, *first + i, k.data() + l * kHeads * kDim, v.data() + l * kHeads * kDim);
      }
  }
};

void expect_matches(const KvCache& kv, const Shadow& s) {
  ASSERT_EQ(kv.size(), static_cast<int64_t>(s.keys.size()));
  const int64_t B = kv.block_size();
  for (int64_t l = 0; l < kLayers; ++l)
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t r = 0; r < kv.size(); ++r)
        for (int64_t d = 0; d < kDim; ++d) {
          const int64_t at = (l * kHeads + h) * kDim + d;
          ASSERT_EQ(kv.key_row(l, h, r)[d], s.keys[r][at]) << "row " << r;
          ASSERT_EQ(kv.value_row(l, h, r)[d], s.values[r][at]) << "row " << r;
          ASSERT_EQ(kv.keys(l, h, r / B)[(r % B) * kDim + d], s.keys[r][at]);
        }
      for (int64_t b = 0; b < kv.n_blocks(); ++b)
        for (int64_t d = 0; d < kDim; ++d) {
          float lo = std::numeric_limits<float>::infinity(), hi = -lo;
          for (int64_t r = b * B; r < std::min(kv.size(), (b + 1) * B); ++r) {
            lo = std::min(lo, s.keys[r][(l * kHeads + h) * kDim + d]);
            hi = std::max(hi, s.keys[r][(l * kHeads + h) * kDim + d]);
          }
          ASSERT_EQ(kv.key_min(l, h, b)[d], lo) << "layer " << l << " head " << h << " block " << b << " dim " << d;
          ASSERT_EQ(kv.key_max(l, h, b)[d], hi) << "layer " << l << " head " << h << " block " << b << " dim " << d;
        }
    }
}

TEST(KvCache, BlockSizeValidation) {
  for (int bad : {0, 1, 7, 129, 256, -16}) {
    auto kv = KvCache::create({kLayers, kHeads, kDim, 100, bad});
    ASSERT_FALSE(kv.ok()) << bad;
    EXPECT_NE(kv.error().message.find("block size " + std::to_string(bad)), std::string::npos) << kv.error().message;
    EXPECT_NE(kv.error().message.find("8..128"), std::string::npos) << kv.error().message;
  }
  for (int good : {8, 16, 33, 128}) EXPECT_TRUE(KvCache::create({kLayers, kHeads, kDim, 100, good}).ok()) << good;
  EXPECT_FALSE(KvCache::create({0, kHeads, kDim, 100, 16}).ok());
  EXPECT_FALSE(KvCache::create({kLayers, kHeads, kDim, 0, 16}).ok());
  ModelConfig model;
  model.n_layers = 30;
  model.n_kv_heads = 3;
  model.head_dim = 64;
  model.context_length = 8192;
  auto from_model = KvCache::for_model(model);
  ASSERT_TRUE(from_model.ok());
  EXPECT_EQ(from_model->capacity(), 8192);
  EXPECT_EQ(from_model->block_size(), 16);
  EXPECT_EQ(KvCache::for_model(model, 32, 100)->capacity(), 100);
}

TEST(KvCache, CapacityOverflowIsAnError) {
  KvCache kv = make(8, 20);
  Shadow s;
  s.append(kv, 15);
  auto over = kv.append_provisional(6);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("capacity of 20"), std::string::npos) << over.error().message;
  EXPECT_EQ(kv.size(), 15);
  EXPECT_TRUE(kv.append_provisional(5).ok());
}

TEST(KvCache, MinMaxAfterAppends) {
  for (int B : {8, 16, 13}) {
    KvCache kv = make(B);
    Shadow s;
    for (int64_t n : {1, 3, 9, 17, 1}) {
      s.append(kv, n);
      expect_matches(kv, s);
    }
    kv.commit_all();
    EXPECT_EQ(kv.committed(), 31);
    EXPECT_EQ(kv.provisional(), 0);
    expect_matches(kv, s);
  }
}

TEST(KvCache, RollbackRestoresBounds) {
  KvCache kv = make(8);
  Shadow s;
  s.append(kv, 11);
  kv.commit_all();
  // Provisional rows with huge keys, in the committed tail block and beyond.
  auto first = kv.append_provisional(10);
  ASSERT_TRUE(first.ok());
  std::vector<float> big(kHeads * kDim, 1e6f), small(kHeads * kDim, -1e6f);
  for (int64_t l = 0; l < kLayers; ++l)
    for (int64_t i = 0; i < 10; ++i) kv.write(l, *first + i, i % 2 ? big.data() : small.data(), big.data());
  EXPECT_EQ(kv.key_max(0, 0, 1)[0], 1e6f);
  kv.rollback();
  EXPECT_EQ(kv.provisional(), 0);
  EXPECT_EQ(kv.committed(), 11);
  expect_matches(kv, s);
  // Appends after a rollback keep the bounds right.
  s.append(kv, 9);
  expect_matches(kv, s);
}

// Truncating committed rows (a drafter drops its draft path after the round): the cut block's
// bounds cover only the rows left in it, and appends continue from the cut.
TEST(KvCache, TruncateDropsCommittedRowsAndTheirBounds) {
  KvCache kv = make(8);
  Shadow s;
  s.append(kv, 11);
  kv.commit_all();
  s.append(kv, 7);  // committed rows 11..17, then 3 provisional ones
  kv.commit_all();
  s.append(kv, 3);
  EXPECT_FALSE(kv.truncate(19).ok()) << "past the committed rows";
  EXPECT_FALSE(kv.truncate(-1).ok());
  ASSERT_TRUE(kv.truncate(11).ok());
  EXPECT_EQ(kv.committed(), 11);
  EXPECT_EQ(kv.provisional(), 0);
  s.keys.resize(11);
  s.values.resize(11);
  expect_matches(kv, s);
  s.append(kv, 6);  // continues at row 11, in the cut block
  kv.commit_all();
  expect_matches(kv, s);
  ASSERT_TRUE(kv.truncate(0).ok());
  EXPECT_EQ(kv.committed(), 0);
}

TEST(KvCache, CommitCompactsAcceptedRowsInOrder) {
  for (bool in_order : {true, false}) {
    KvCache kv = make(8);
    Shadow s;
    s.append(kv, 6);
    kv.commit_all();
    s.append(kv, 12);  // provisional rows 0..11 = cache rows 6..17
    const std::vector<int> accepted = in_order ? std::vector<int>{0, 3, 4, 9, 11} : std::vector<int>{9, 0, 11, 3};
    std::vector<std::vector<float>> keys(s.keys.begin(), s.keys.begin() + 6),
        values(s.values.begin(), s.values.begin() + 6);
    for (int a : accepted) {
      keys.push_back(s.keys[6 + a]);
      values.push_back(s.values[6 + a]);
    }
    ASSERT_TRUE(kv.commit(accepted).ok());
    s.keys = keys;
    s.values = values;
    EXPECT_EQ(kv.committed(), 6 + static_cast<int64_t>(accepted.size()));
    EXPECT_EQ(kv.provisional(), 0);
    expect_matches(kv, s);
    s.append(kv, 4);
    expect_matches(kv, s);
  }
}

TEST(KvCache, CommitRejectsBadRows) {
  KvCache kv = make(8);
  Shadow s;
  s.append(kv, 4);
  EXPECT_FALSE(kv.commit(std::vector<int>{4}).ok());
  EXPECT_FALSE(kv.commit(std::vector<int>{-1}).ok());
  EXPECT_FALSE(kv.commit(std::vector<int>{1, 1}).ok());
  EXPECT_EQ(kv.provisional(), 4);  // a refused commit changes nothing
  EXPECT_TRUE(kv.commit(std::vector<int>{}).ok());
  EXPECT_EQ(kv.size(), 0);
}

TEST(KvCache, RandomizedTransactions) {
  std::mt19937 rng(std::random_device{}());
  KvCache kv = make(8, 400);
  Shadow s;
  for (int step = 0; step < 60; ++step) {
    const int64_t committed = kv.committed();
    s.keys.resize(committed);
    s.values.resize(committed);
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    s.append(kv, n);
    const int action = std::uniform_int_distribution<int>(0, 2)(rng);
    if (action == 0) {
      kv.rollback();
      s.keys.resize(committed);
      s.values.resize(committed);
    } else if (action == 1) {
      kv.commit_all();
    } else {
      std::vector<int> rows;
      for (int i = 0; i < n; ++i)
        if (rng() % 2) rows.push_back(i);
      std::shuffle(rows.begin(), rows.end(), rng);
      auto keys = s.keys, values = s.values;
      keys.resize(committed);
      values.resize(committed);
      for (int r : rows) {
        keys.push_back(s.keys[committed + r]);
        values.push_back(s.values[committed + r]);
      }
      ASSERT_TRUE(kv.commit(rows).ok());
      s.keys = keys;
      s.values = values;
    }
    expect_matches(kv, s);
  }
}

}  // namespace
}  // namespace specula

// attention_group against a double-precision reference (GQA groups of a draft tree's tokens with
// masks of their own, several head dims, long contexts), and the bit-for-bit promises that
// speculative verification relies on: a query's result does not depend on the other queries of
// its call (one query folds its keys alone, four or more share packed key tiles), nor on where
// the spans split its keys when the extra rows are masked out.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace specula {
namespace {

std::vector<float> random_vector(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

// A draft tree's verify for one KV head: `committed` keys in blocks of 16, then `tokens` new rows
// split where the cache's 16-row blocks split them; token t sees itself and a random subset of
// the earlier new rows; `group` query heads per token (token-major).
struct TreeCase {
  int64_t head_dim, committed, tokens, group;
  std::vector<float> keys, values, q;
  std::vector<uint8_t> mask;  // (tokens, tokens)
  std::vector<KvSpan> spans;

  TreeCase(int64_t hd, int64_t committed_rows, int64_t n_tokens, int64_t n_group, std::mt19937& rng)
      : head_dim(hd), committed(committed_rows), tokens(n_tokens), group(n_group) {
    const int64_t total = committed + tokens;
    keys = random_vector(total * hd, rng);
    values = random_vector(total * hd, rng);
    q = random_vector(tokens * group * hd, rng);
    mask.assign(static_cast<size_t>(tokens * tokens), 0);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < t; ++j) mask[static_cast<size_t>(t * tokens + j)] = static_cast<uint8_t>(rng() % 2);
      mask[static_cast<size_t>(t * tokens + t)] = 1;
    }
    for (int64_t b = 0; b * 16 < committed; ++b) {
      spans.push_back(
          {keys.data() + b * 16 * hd, values.data() + b * 16 * hd, std::min<int64_t>(16, committed - b * 16)});
    }
    for (int64_t r = committed; r < total;) {
      const int64_t rows = std::min(16 - r % 16, total - r);
      spans.push_back(
          {keys.data() + r * hd, values.data() + r * hd, rows, mask.data() + (r - committed), tokens, group});
      r += rows;
    }
  }

  std::vector<float> run() const {
    const int64_t n = tokens * group;
    std::vector<float> scores(static_cast<size_t>(n * (committed + tokens))), out(static_cast<size_t>(n * head_dim));
    attention_group(q.data(), n, head_dim, spans, 0.125f, scores.data(), out.data());
    return out;
  }

  bool visible(int64_t query, int64_t key) const {
    return key < committed || mask[static_cast<size_t>((query / group) * tokens + key - committed)] != 0;
  }
};

TEST(Attention, TreeGroupsMatchReference) {
  std::mt19937 rng(std::random_device{}());
  struct Shape {
    int64_t head_dim, committed, tokens, group;
  };
  // head_dim 32 takes the portable path; 64 and 128 the AVX-512 one where built.
  for (const Shape s : {Shape{64, 30, 1, 1}, Shape{64, 30, 1, 3}, Shape{64, 509, 5, 3}, Shape{64, 512, 16, 3},
                        Shape{128, 77, 6, 2}, Shape{32, 40, 4, 3}, Shape{64, 2100, 8, 3}}) {
    const TreeCase c(s.head_dim, s.committed, s.tokens, s.group, rng);
    const auto out = c.run();
    const int64_t total = c.committed + c.tokens, hd = c.head_dim;
    for (int64_t g = 0; g < c.tokens * c.group; ++g) {
      std::vector<double> p(static_cast<size_t>(total), 0.0);
      double max = -1e300, sum = 0;
      for (int64_t j = 0; j < total; ++j) {
        if (!c.visible(g, j)) continue;
        double d = 0;
        for (int64_t k = 0; k < hd; ++k) d += static_cast<double>(c.q[g * hd + k]) * c.keys[j * hd + k];
        p[j] = d * 0.125;
        max = std::max(max, p[j]);
      }
      for (int64_t j = 0; j < total; ++j) sum += (p[j] = c.visible(g, j) ? std::exp(p[j] - max) : 0.0);
      for (int64_t k = 0; k < hd; ++k) {
        double want = 0;
        for (int64_t j = 0; j < total; ++j) want += p[j] / sum * c.values[j * hd + k];
        ASSERT_NEAR(out[g * hd + k], want, 1e-5)
            << "head dim " << hd << ", " << c.committed << " keys, query " << g << ", dim " << k;
      }
    }
  }
}

// Every query of a many-query call (packed key tiles, values four queries at a time) equals, bit
// for bit, the same query alone (its own key folds, values alone) with its own mask row.
TEST(Attention, QueriesOfOneCallEqualOneQueryCalls) {
  std::mt19937 rng(std::random_device{}());
  for (const int64_t hd : {64, 128}) {
    for (const int64_t tokens : {2, 3, 5, 16}) {
      const TreeCase c(hd, 16 * 9 + 5, tokens, 3, rng);
      const auto out = c.run();
      for (int64_t g = 0; g < tokens * 3; ++g) {
        std::vector<KvSpan> own = c.spans;
        for (auto& span : own) {
          if (span.allowed) span.allowed += (g / 3) * tokens;
          span.allowed_stride = 0;
        }
        std::vector<float> scores(static_cast<size_t>(c.committed + tokens)), one(static_cast<size_t>(hd));
        attention_group(c.q.data() + g * hd, 1, hd, own, 0.125f, scores.data(), one.data());
        ASSERT_EQ(0, std::memcmp(one.data(), out.data() + g * hd, hd * sizeof(float)))
            << "head dim " << hd << ", " << tokens << " tokens, query " << g;
      }
    }
  }
}

// A chain's token t in a verify (its keys split where the verify's blocks split them, later new
// rows masked out) equals a decode step of the same token (the same keys as committed blocks
// plus one new row): the invariant that makes greedy speculation equal plain greedy decoding.
// The decode step calls attention_group with any contiguous run of a KV head's query heads
// (CpuTransformer splits a step's heads over its threads: with 2 threads SmolLM2's 9 heads run as
// 3+2 and 1+3), over 16- or 64-row cache blocks; every run must give the verify's bits.
TEST(Attention, VerifyRowEqualsDecodeStep) {
  std::mt19937 rng(std::random_device{}());
  const int64_t hd = 64, committed = 16 * 31 + 7, tokens = 12, group = 3;
  TreeCase verify(hd, committed, tokens, group, rng);
  for (int64_t t = 0; t < tokens; ++t) {  // a chain: token t sees every earlier new row
    for (int64_t j = 0; j < tokens; ++j) verify.mask[static_cast<size_t>(t * tokens + j)] = j <= t;
  }
  const auto out = verify.run();
  for (const int64_t block : {16, 64}) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t seen = committed + t;  // committed keys before the decode step's new row
      std::vector<KvSpan> decode;
      for (int64_t b = 0; b * block < seen; ++b) {
        decode.push_back({verify.keys.data() + b * block * hd, verify.values.data() + b * block * hd,
                          std::min<int64_t>(block, seen - b * block)});
      }
      decode.push_back({verify.keys.data() + seen * hd, verify.values.data() + seen * hd, 1});
      std::vector<float> scores(static_cast<size_t>(group * (seen + 1))), step(static_cast<size_t>(group * hd));
      for (int64_t first = 0; first < group; ++first) {
        for (int64_t n = 1; first + n <= group; ++n) {
          const int64_t row = t * group + first;  // the run's first query among the verify's
          attention_group(verify.q.data() + row * hd, n, hd, decode, 0.125f, scores.data(), step.data());
          ASSERT_EQ(0, std::memcmp(step.data(), out.data() + row * hd, n * hd * sizeof(float)))
              << "token " << t << ", heads " << first << ".." << first + n - 1 << ", " << block << "-row blocks";
        }
      }
    }
  }
}

TEST(Attention, NoVisibleRowGivesZeros) {
  std::mt19937 rng(std::random_device{}());
  const int64_t hd = 64;
  auto keys = random_vector(20 * hd, rng), values = random_vector(20 * hd, rng), q = random_vector(5 * hd, rng);
  const std::vector<uint8_t> none(20, 0);
  const std::vector<KvSpan> spans = {{keys.data(), values.data(), 20, none.data()}};
  std::vector<float> scores(5 * 20), out(5 * hd, 1.0f);
  attention_group(q.data(), 5, hd, spans, 0.125f, scores.data(), out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  std::fill(out.begin(), out.end(), 1.0f);
  attention_group(q.data(), 5, hd, {}, 0.125f, scores.data(), out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace specula

// Run metrics from known rounds.
#include "engine/spec/metrics.h"

#include <gtest/gtest.h>

namespace specula {
namespace {

RoundRecord spec(int depth, int accepted, int nodes) {
  RoundRecord r;
  r.speculative = true;
  r.tree_depth = depth;
  r.accepted = accepted;
  r.tree_nodes = nodes;
  r.emitted = accepted + 1;
  r.draft_ms = 1;
  r.verify_ms = 4;
  r.rollback_tokens = nodes - accepted;
  r.rejected_kv_bytes = (nodes - accepted) * 100;
  return r;
}

TEST(Metrics, Percentile) {
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 0.5), 2);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9), 9);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5), 5);
}

TEST(Metrics, SummarisesRounds) {
  std::vector<RoundRecord> rounds = {spec(4, 4, 4), spec(4, 0, 4), spec(2, 1, 3), spec(4, 2, 4)};
  RoundRecord plain;
  plain.plain_ms = 3;
  plain.emitted = 1;
  rounds.push_back(plain);
  // 5 + 1 + 2 + 3 + 1 = 12 tokens after the first.
  const auto m = summarize_rounds(rounds, 13, 0.12);
  EXPECT_EQ(m.rounds, 5);
  EXPECT_EQ(m.speculative_rounds, 4);
  EXPECT_DOUBLE_EQ(m.mean_accepted_length, (5 + 1 + 2 + 3) / 4.0);
  EXPECT_DOUBLE_EQ(m.accepted_length_p50, 2);
  EXPECT_DOUBLE_EQ(m.accepted_length_p90, 5);
  // depth 1: 3 of 4 rounds; depth 2: 2 of 4; depth 3: 1 of 3; depth 4: 1 of 3.
  ASSERT_EQ(m.acceptance_by_depth.size(), 4u);
  EXPECT_DOUBLE_EQ(m.acceptance_by_depth[0], 0.75);
  EXPECT_DOUBLE_EQ(m.acceptance_by_depth[1], 0.5);
  EXPECT_DOUBLE_EQ(m.acceptance_by_depth[2], 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.acceptance_by_depth[3], 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.target_passes_per_token, 5.0 / 12);
  EXPECT_DOUBLE_EQ(m.draft_ms, 4);
  EXPECT_DOUBLE_EQ(m.verify_ms, 16);
  EXPECT_DOUBLE_EQ(m.plain_decode_ms, 3);
  EXPECT_NEAR(m.tpot_ms, 10, 1e-9);
  EXPECT_NEAR(m.tokens_per_s, 100, 1e-9);
  EXPECT_EQ(m.rollback_tokens, 0 + 4 + 2 + 2);
  EXPECT_EQ(m.rejected_kv_bytes, 800);
  const auto j = to_json(m);
  for (const char* key : {"mean_accepted_length", "accepted_length_p50", "accepted_length_p90", "acceptance_by_depth",
                          "target_passes_per_token", "draft_ms", "verify_ms", "tpot_ms", "tokens_per_s",
                          "rollback_tokens", "rejected_kv_bytes", "controller_fallbacks"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

TEST(Metrics, PlainRunHasOnePassPerToken) {
  std::vector<RoundRecord> rounds(9);
  const auto m = summarize_rounds(rounds, 10, 0.9);
  EXPECT_DOUBLE_EQ(m.target_passes_per_token, 1.0);
  EXPECT_DOUBLE_EQ(m.mean_accepted_length, 1.0);
  EXPECT_TRUE(m.acceptance_by_depth.empty());
}

}  // namespace
}  // namespace specula

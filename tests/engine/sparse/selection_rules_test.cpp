// Selection rules on a hand-built cache where the answer is known: how a GQA group's query heads
// combine into one block score (one head with large logits wants block 1, the two others want
// block 2), and successor blocks.
#include <gtest/gtest.h>

#include <vector>

#include "engine/sparse/sparse_attention.h"
#include "kernels/cpu/block_select.h"

namespace specula {
namespace {

// 1 layer, 1 KV head, head dim 2, blocks of 8; 6 blocks. Keys are constant inside a block, so
// the Quest bound is the true maximum. Block 1: (1, 0); block 2: (0, 3); the rest (0, 0).
KvCache make_cache() {
  auto kv = KvCache::create({1, 1, 2, 64, 8});
  EXPECT_TRUE(kv.ok());
  const int64_t rows = 48;
  EXPECT_TRUE(kv->append_provisional(rows).ok());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / 8;
    const float k[2] = {b == 1 ? 1.0f : 0.0f, b == 2 ? 3.0f : 0.0f};
    const float v[2] = {0.0f, 0.0f};
    kv->write(0, r, k, v);
  }
  kv->commit_all();
  return std::move(*kv);
}

// Blocks chosen with 3 query heads: head A = (10, 0) (logit 10 on block 1), heads B, C = (0, 1)
// (logit 3 on block 2). k = 3 with 1 sink and 1 local block leaves one block to choose.
std::vector<int32_t> choose(const KvCache& kv, const std::string& group_score, int successors = 0) {
  SparseConfig c = *sparse_preset("sa");
  c.dense_below = 0;
  c.eta = 0.5;  // ceil(0.5 · 48 / 8) = 3 blocks
  c.sink_blocks = 1;
  c.local_blocks = 1;
  c.group_score = group_score;
  c.successor_blocks = successors;
  SparseStats stats;
  SparseSelection selection(c, kv, /*n_heads=*/3, /*rows=*/1, {}, nullptr, 0, &stats);
  EXPECT_TRUE(selection.active());
  EXPECT_EQ(selection.kept_per_head(), 3);
  const float q[6] = {10, 0, 0, 1, 0, 1};
  selection.select(0, q, 6);
  return selection.blocks(0, 0);
}

TEST(GroupScore, LogitSumFollowsTheLoudHeadProbSumTheMajorityProbMaxTheMostCertainHead) {
  const KvCache kv = make_cache();
  // logit-sum: block 1 scores 10, block 2 scores 3 + 3.
  EXPECT_EQ(choose(kv, "logit-sum"), (std::vector<int32_t>{0, 1, 5}));
  // prob-sum (scale 1/sqrt 2): head A gives block 1 a share of 0.996, heads B and C give block 2
  // 0.625 each, and block 1 0.075 each: block 2 has 1.25 against 1.15.
  EXPECT_EQ(choose(kv, "prob-sum"), (std::vector<int32_t>{0, 2, 5}));
  // prob-max: block 1's best share is 0.996, block 2's is 0.625.
  EXPECT_EQ(choose(kv, "prob-max"), (std::vector<int32_t>{0, 1, 5}));
}

TEST(SuccessorBlocks, RuleOnScores) {
  // Scores peak at block 3, then block 6; sink 1, local 1 of 10 blocks.
  const std::vector<float> scores = {0, 0, 0, 9, 0, 0, 5, 0, 1, 0};
  EXPECT_EQ(select_blocks(scores, 4, 1, 1), (std::vector<int32_t>{0, 3, 6, 9}));
  EXPECT_EQ(select_blocks_with_successors(scores, 4, 1, 1, 1), (std::vector<int32_t>{0, 3, 4, 9}));
  EXPECT_EQ(select_blocks_with_successors(scores, 6, 1, 1, 1), (std::vector<int32_t>{0, 3, 4, 6, 7, 9}));
  EXPECT_EQ(select_blocks_with_successors(scores, 20, 1, 1, 1).size(), 10u) << "a budget over the blocks keeps them all";
}

TEST(SuccessorBlocks, ChosenThroughTheConfig) {
  const KvCache kv = make_cache();
  // Budget 3 = sink 0 + local 5 + block 1 (logit-sum); with a successor there is no room for block 2.
  EXPECT_EQ(choose(kv, "logit-sum", 1), (std::vector<int32_t>{0, 1, 5}));
}

TEST(GroupScore, ConfigNamesTheRulesAndRejectsOthers) {
  auto c = sparse_config_from_json(
      {{"preset", "sa"}, {"group_score", "prob-sum"}, {"dense_layers", 2}, {"successor_blocks", 1}});
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->group_score, "prob-sum");
  EXPECT_EQ(c->dense_layers, 2);
  EXPECT_EQ(c->successor_blocks, 1);
  EXPECT_EQ(sparse_preset("sa")->group_score, "logit-sum") << "the issue's rule stays the default";
  EXPECT_EQ(c->to_json()["group_score"], "prob-sum");
  auto bad = sparse_config_from_json({{"preset", "sa"}, {"group_score", "mean"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("group_score"), std::string::npos);
  SparseConfig too_many = *sparse_preset("sa");
  too_many.dense_layers = 31;
  const Status s = validate(too_many, 30, false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("dense_layers 31"), std::string::npos);
}

}  // namespace
}  // namespace specula

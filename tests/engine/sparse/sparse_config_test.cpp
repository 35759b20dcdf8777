#include "engine/sparse/sparse_config.h"

#include <gtest/gtest.h>

namespace specula {
namespace {

TEST(SparseConfig, PresetsSetWhatTheyName) {
  EXPECT_TRUE(sparse_preset("strict")->strict());
  EXPECT_TRUE(sparse_preset("sa")->attention);
  EXPECT_FALSE(sparse_preset("sa")->ffn);
  EXPECT_TRUE(sparse_preset("sa-reuse")->reuses(1));
  EXPECT_FALSE(sparse_preset("sa-reuse")->reuses(2));
  EXPECT_EQ(sparse_preset("sa-reuse")->anchor_for(5), 4);
  EXPECT_TRUE(sparse_preset("sffn")->ffn);
  EXPECT_TRUE(sparse_preset("hybrid")->ffn && sparse_preset("hybrid")->attention);
  EXPECT_EQ(sparse_preset("ssv-exact")->query_mode, QueryMode::kGroupUnion);
  EXPECT_EQ(sparse_preset("ssv-approx")->query_mode, QueryMode::kGroupShared);
  EXPECT_FALSE(sparse_preset("dense-ish").ok());
}

TEST(SparseConfig, JsonOverridesAndRejectsUnknownKeys) {
  auto c = sparse_config_from_json(nlohmann::json::parse(
      R"({"preset":"sa","eta":0.1,"query_mode":"group-union","order":"dfs","group_size":8,"anchors":[0,4,9]})"));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_DOUBLE_EQ(c->eta, 0.1);
  EXPECT_EQ(c->query_mode, QueryMode::kGroupUnion);
  EXPECT_EQ(c->order, TraversalOrder::kDfs);
  EXPECT_EQ(c->group_size, 8);
  EXPECT_EQ(c->anchor_for(8), 4);
  EXPECT_FALSE(c->reuses(9));
  EXPECT_EQ(sparse_config_from_json(c->to_json())->to_json(), c->to_json()) << "to_json round-trips";
  EXPECT_FALSE(sparse_config_from_json(nlohmann::json::parse(R"({"etta":0.1})")).ok());
  EXPECT_FALSE(sparse_config_from_json(nlohmann::json::parse(R"({"query_mode":"best"})")).ok());
  EXPECT_FALSE(sparse_config_from_json(nlohmann::json::parse(R"({"eta":"high"})")).ok());
}

TEST(SparseConfig, ValidationNamesWhatIsOutOfRange) {
  SparseConfig c = *sparse_preset("sa");
  EXPECT_TRUE(validate(c, 30, false).ok());
  c.eta = 1.5;
  EXPECT_NE(validate(c, 30, false).error().message.find("eta"), std::string::npos);
  c = *sparse_preset("sffn");
  c.ffn_threshold = -1;
  EXPECT_NE(validate(c, 30, false).error().message.find("ffn_threshold"), std::string::npos);
  c = *sparse_preset("sa");
  c.anchors = {0, 40};
  EXPECT_NE(validate(c, 30, false).error().message.find("anchor layer 40"), std::string::npos);
  EXPECT_NE(validate(*sparse_preset("smoe"), 30, false).error().message.find("no MoE layers"), std::string::npos);
  EXPECT_TRUE(validate(*sparse_preset("sa-reuse"), 30, false).ok()) << "the preset's default anchors fit any depth";
}

TEST(SparseConfig, PiecewiseBudget) {
  SparseConfig c = *sparse_preset("sa");
  c.dense_below = 1024;
  c.eta = 0.2;
  EXPECT_EQ(kept_blocks(c, 1000, 16), 63) << "below L_b: every block";
  EXPECT_EQ(kept_blocks(c, 1024, 16), 64) << "at L_b: still every block (continuous)";
  EXPECT_EQ(kept_blocks(c, 2048, 16), 77) << "ceil((1024 + 0.2 · 1024) / 16) = ceil(76.8)";
  EXPECT_EQ(kept_blocks(c, 8192, 16), 154) << "ceil((1024 + 0.2 · 7168) / 16) = ceil(153.6) of 512";
  EXPECT_EQ(kept_blocks(c, 65536, 16), 871) << "tends to a fraction eta of the blocks";
  c.dense_below = 0;
  EXPECT_EQ(kept_blocks(c, 160, 16), 3) << "never below sink + local";
  EXPECT_EQ(kept_blocks(*sparse_preset("strict"), 65536, 16), 4096) << "strict drops nothing";
}

TEST(SparseConfig, ScoringIsQuestOrExact) {
  EXPECT_EQ(sparse_preset("sa")->scoring, "quest");
  auto exact = sparse_config_from_json(nlohmann::json{{"preset", "sa"}, {"scoring", "exact"}});
  ASSERT_TRUE(exact) << exact.error().message;
  EXPECT_EQ(exact->scoring, "exact");
  EXPECT_EQ(exact->to_json()["scoring"], "exact");
  auto bad = sparse_config_from_json(nlohmann::json{{"preset", "sa"}, {"scoring", "oracle"}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("scoring"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace specula

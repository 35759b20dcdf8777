// Teaching mode's facts and explanations, guiless: on the fixture session (worked out below) and
// on a strict session with no selections.
#include "ui/models/teach_steps.h"

#include <gtest/gtest.h>

#include <QTemporaryDir>

#include "../ui_session_fixture.h"

namespace specula::ui {
namespace {

std::string hash_name(int32_t id) {
  std::string name(1, '#');  // not "#" + to_string: gcc 12 raises a false -Wrestrict there
  name += std::to_string(id);
  return name;
}

TEST(TeachSteps, FixtureRoundThreeFacts) {
  QTemporaryDir dir;
  const std::string path = dir.filePath("fixture.sqlite").toStdString();
  ASSERT_EQ(testing::write_fixture_session(path), "");
  auto data = load_session_data(path);
  ASSERT_TRUE(data) << data.error().message;
  const TeachFacts f = teach_facts(*data, 3);
  ASSERT_TRUE(f.found);
  EXPECT_TRUE(f.speculative);
  EXPECT_EQ(f.tree_nodes, 5);
  EXPECT_EQ(f.tree_depth, 3);
  EXPECT_EQ(f.accepted, 3);  // fixture_accepted(3)
  EXPECT_EQ(f.next_token, 7);
  EXPECT_EQ(f.context_len, 224);  // 200 + 8 * 3
  EXPECT_EQ(f.blocks_per_head, 14);
  EXPECT_EQ(f.sparse_preset, "sa-reuse");
  EXPECT_EQ(f.selection_layers, 6);
  EXPECT_EQ(f.reuse_layers, 4);  // layers 1, 2 reuse 0; 4, 5 reuse 3
  EXPECT_EQ(f.strip_layer, 0);
  // Layer 0, head 0: sink 0, local 12 and 13, and 1 + (depth + i) % 11 for depths 1..3, i 0..2.
  EXPECT_EQ(f.strip_blocks, (std::vector<int32_t>{0, 2, 3, 4, 5, 6, 12, 13}));
  // Every layer keeps 8 of 14 blocks per head (anchor 3's middle blocks are 1, 8, 9, 10, 11).
  EXPECT_NEAR(f.kept_fraction, 8.0 / 14.0, 1e-12);
  EXPECT_EQ(f.emitted, (std::vector<int32_t>{100, 102, 104, 7}));
  EXPECT_EQ(f.rollback_tokens, 2);
  EXPECT_FALSE(teach_facts(*data, 99).found);

  EXPECT_EQ(teach_explanation(f, TeachStage::kDraft, hash_name),
            "Round 3: the ngram drafter guesses the next tokens cheaply. It proposes 5 tokens as a tree 3 levels deep; "
            "each branch is one possible continuation. Nothing is checked yet.");
  const std::string select = teach_explanation(f, TeachStage::kSelect, hash_name);
  EXPECT_NE(select.find("Sparse verification (sa-reuse)"), std::string::npos) << select;
  EXPECT_NE(select.find("On average 57% of 14 blocks per head are read; 4 of 6 layers reuse"), std::string::npos) << select;
  EXPECT_NE(teach_explanation(f, TeachStage::kVerify, hash_name).find("all 5 nodes go through together"), std::string::npos);
  const std::string accept = teach_explanation(f, TeachStage::kAccept, hash_name);
  EXPECT_NE(accept.find("agrees with 3 drafted tokens"), std::string::npos) << accept;
  EXPECT_NE(accept.find("own token #7 replaces the draft (a correction)"), std::string::npos) << accept;
  EXPECT_EQ(teach_explanation(f, TeachStage::kCommit, hash_name),
            "4 tokens are added to the output for one target pass (plain decoding would add 1). The KV rows of 2 "
            "rejected nodes (8192 bytes) are rolled back, and the next round starts from the new context of 228 tokens.");
}

TEST(TeachSteps, StrictRoundsAndPlainStepsSaySo) {
  SessionData data;
  profiler::RoundRow r;
  r.round = 0;
  r.speculative = true;
  r.tree_nodes = 2;
  r.tree_depth = 2;
  r.accepted_length = 3;
  r.next_token = 9;
  r.bonus = true;
  r.context_len = 40;  // 3 blocks of 16
  r.drafter = "ngram";
  data.rounds.push_back(r);
  r.round = 1;
  r.speculative = false;
  r.tree_nodes = 0;
  data.rounds.push_back(r);
  const TeachFacts f = teach_facts(data, 0);
  EXPECT_EQ(f.selection_layers, 0);
  EXPECT_EQ(f.blocks_per_head, 3);
  EXPECT_EQ(teach_explanation(f, TeachStage::kSelect, hash_name),
            "Before verifying, attention may skip parts of the context. This run is strict: every layer reads all 3 KV "
            "blocks of the 40-token context.");
  EXPECT_NE(teach_explanation(f, TeachStage::kAccept, hash_name).find("#9 comes free as a bonus token"), std::string::npos);
  EXPECT_EQ(teach_explanation(teach_facts(data, 1), TeachStage::kVerify, hash_name),
            "Round 1 is a plain decode step: no draft was made, so the target computes one token the usual way.");
}

}  // namespace
}  // namespace specula::ui

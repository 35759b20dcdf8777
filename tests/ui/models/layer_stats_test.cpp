// The numbers behind the heatmaps, the schedule and the expert/FFN bars, on hand-built sessions
// whose answers are worked out in the comments.
#include "ui/models/layer_stats.h"

#include <gtest/gtest.h>

namespace specula::ui {
namespace {

profiler::LayerSelectionRow selection(int64_t round, int32_t layer, int32_t query, std::vector<int32_t> blocks,
                                      int32_t total = 16, SelectionMode mode = SelectionMode::kRefresh,
                                      int32_t anchor = -1) {
  profiler::LayerSelectionRow row;
  row.selection.round = round;
  row.selection.layer = layer;
  row.selection.query = query;
  row.selection.mode = mode;
  row.selection.anchor_layer = anchor;
  row.selection.total_blocks = total;
  row.selection.block_bits = pack_block_bits(blocks, total);
  return row;
}

profiler::DraftNodeRow draft(int64_t round, int32_t id, int32_t parent, int32_t depth) {
  profiler::DraftNodeRow n;
  n.round = round;
  n.node = id;
  n.parent = parent;
  n.depth = depth;
  return n;
}

profiler::RoundRow round_row(int64_t round, int64_t context) {
  profiler::RoundRow r;
  r.round = round;
  r.context_len = context;
  return r;
}

TEST(LayerStats, BitsetCounts) {
  const auto a = pack_block_bits({0, 3, 9}, 16), b = pack_block_bits({3, 9, 12}, 16), c = pack_block_bits({1}, 8);
  EXPECT_EQ(intersection_count(a, b), 2);
  EXPECT_EQ(union_count(a, b), 4);
  EXPECT_EQ(intersection_count(a, c), 0);
  EXPECT_EQ(union_count(a, c), 4);  // shorter set zero-extended
}

// Round 0: nodes 0 and 1 at depth 1, node 2 at depth 2. Layer 0 reads
//   q0 {0,1,2,3}, q1 {0,1,2,4}, q2 {0,5,6,7}
// so distance 0 (q0, q1): 3/4 = 0.75; distance 1 (q0, q2) and (q1, q2): 1/4 each.
// Round 1 repeats the tree with q1 = q0, so distance 0 gives 1.0 there.
SessionData overlap_session() {
  SessionData d;
  d.rounds = {round_row(0, 256), round_row(1, 256)};
  for (int64_t r = 0; r < 2; ++r) {
    d.draft_nodes[r] = {draft(r, 0, -1, 1), draft(r, 1, -1, 1), draft(r, 2, 0, 2)};
    d.selections[r] = {selection(r, 0, 0, {0, 1, 2, 3}), selection(r, 0, 1, r == 0 ? std::vector<int32_t>{0, 1, 2, 4}
                                                                                     : std::vector<int32_t>{0, 1, 2, 3}),
                       selection(r, 0, 2, {0, 5, 6, 7}), selection(r, 0, -1, {0, 1, 2, 3, 4, 5, 6, 7})};
  }
  return d;
}

TEST(LayerStats, DistanceOverlapOfOneRound) {
  const Grid g = distance_overlap(overlap_session(), 0);
  ASSERT_EQ(g.rows, 1);
  ASSERT_EQ(g.cols, 2);
  EXPECT_DOUBLE_EQ(g.at(0, 0), 0.75);
  EXPECT_EQ(g.samples_at(0, 0), 1);
  EXPECT_DOUBLE_EQ(g.at(0, 1), 0.25);
  EXPECT_EQ(g.samples_at(0, 1), 2);
}

TEST(LayerStats, DistanceOverlapAveragesOverRounds) {
  const Grid g = distance_overlap(overlap_session(), std::nullopt);
  EXPECT_DOUBLE_EQ(g.at(0, 0), (0.75 + 1.0) / 2);
  EXPECT_EQ(g.samples_at(0, 0), 2);
  EXPECT_DOUBLE_EQ(g.at(0, 1), 0.25);
  EXPECT_EQ(g.samples_at(0, 1), 4);
}

TEST(LayerStats, DistanceOverlapWithoutPerQueryRowsIsEmpty) {
  SessionData d = overlap_session();
  for (auto& [r, rows] : d.selections) std::erase_if(rows, [](const auto& row) { return row.selection.query >= 0; });
  const Grid g = distance_overlap(d, std::nullopt);
  for (double v : g.values) EXPECT_TRUE(std::isnan(v));
}

// Whole-tree rows: layer 0 {0,1,2,3}, layer 1 {2,3,4,5}: Jaccard 2/6.
TEST(LayerStats, LayerJaccard) {
  SessionData d;
  d.rounds = {round_row(0, 256)};
  d.selections[0] = {selection(0, 0, -1, {0, 1, 2, 3}), selection(0, 1, -1, {2, 3, 4, 5})};
  const Grid g = layer_jaccard(d, std::nullopt);
  ASSERT_EQ(g.rows, 2);
  EXPECT_DOUBLE_EQ(g.at(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(g.at(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(g.at(0, 1), 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(g.at(1, 0), 2.0 / 6.0);
}

// Context 64 in blocks of 16: 4 blocks per head, 2 heads (total 8). q0 reads {0, 5 = head 1
// block 1}, q1 reads {4 = head 1 block 0, 0}: block 0 by both queries (once each across heads),
// block 1 by q0 only.
TEST(LayerStats, BlockCountsFoldHeadsAndCountQueries) {
  SessionData d;
  d.sparse.block_size = 16;
  d.sparse.sink_blocks = 1;
  d.sparse.local_blocks = 2;
  d.rounds = {round_row(3, 64)};
  d.selections[3] = {selection(3, 0, 0, {0, 5}, 8), selection(3, 0, 1, {0, 4}, 8), selection(3, 0, -1, {0, 4, 5}, 8)};
  const BlockCounts b = block_counts(d, 3);
  EXPECT_EQ(b.blocks_per_head, 4);
  EXPECT_EQ(b.queries, 2);
  EXPECT_EQ(b.sink_blocks, 1);
  EXPECT_EQ(b.local_blocks, 2);
  ASSERT_EQ(b.grid.cols, 4);
  EXPECT_DOUBLE_EQ(b.grid.at(0, 0), 2);
  EXPECT_DOUBLE_EQ(b.grid.at(0, 1), 1);
  EXPECT_DOUBLE_EQ(b.grid.at(0, 2), 0);
  EXPECT_DOUBLE_EQ(b.grid.at(0, 3), 0);
  EXPECT_TRUE(block_counts(d, 99).grid.values.empty());  // no such round
}

TEST(LayerStats, BlockCountsFallBackToTheWholeTreeRow) {
  SessionData d;
  d.rounds = {round_row(0, 64)};
  d.selections[0] = {selection(0, 0, -1, {1, 2}, 4)};  // 4 blocks of one head
  const BlockCounts b = block_counts(d, 0);
  EXPECT_EQ(b.queries, 1);
  EXPECT_DOUBLE_EQ(b.grid.at(0, 1), 1);
  EXPECT_DOUBLE_EQ(b.grid.at(0, 0), 0);
}

TEST(LayerStats, ScheduleMarksRefreshReuseAndAnchors) {
  SessionData d;
  d.rounds = {round_row(0, 64), round_row(1, 64)};
  for (int64_t r = 0; r < 2; ++r) {
    d.selections[r] = {selection(r, 0, -1, {0}), selection(r, 1, -1, {0}, 16, SelectionMode::kReuse, 0)};
  }
  d.selections[1].push_back(selection(1, 2, -1, {0}));  // layer 2 refreshes in round 1 only
  const Schedule s = layer_schedule(d);
  ASSERT_EQ(s.layers, 3);
  ASSERT_EQ(s.rounds.size(), 2u);
  EXPECT_EQ(s.at(0, 0), LayerMode::kRefresh);
  EXPECT_EQ(s.at(1, 0), LayerMode::kReuse);
  EXPECT_EQ(s.at(2, 0), LayerMode::kNone);
  EXPECT_EQ(s.at(2, 1), LayerMode::kRefresh);
  EXPECT_TRUE(s.anchor[0]);
  EXPECT_FALSE(s.anchor[1]);
  EXPECT_TRUE(s.anchor[2]);
  EXPECT_EQ(s.refresh_count(0), 2);
  EXPECT_EQ(s.refresh_count(1), 0);
}

TEST(LayerStats, ExpertAndFfnAverages) {
  SessionData d;
  d.rounds = {round_row(0, 64), round_row(1, 64)};
  d.moe = {{0, 0, 8, {1, 2}, {3}}, {1, 0, 8, {1, 2, 4, 5}, {}}, {0, 1, 8, {0}, {1, 2}}};
  d.ffn = {{0, 0, 100, 400, false}, {1, 0, 300, 400, false}, {0, 1, 0, 400, true}, {1, 1, 200, 400, false}};
  const auto e = expert_stats(d, std::nullopt);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_DOUBLE_EQ(e[0].routed, 3.0);   // (2 + 4) / 2
  EXPECT_DOUBLE_EQ(e[0].skipped, 0.5);  // (1 + 0) / 2
  EXPECT_EQ(e[0].total, 8);
  EXPECT_DOUBLE_EQ(e[1].routed, 1.0);
  EXPECT_DOUBLE_EQ(e[1].skipped, 2.0);
  const auto e1 = expert_stats(d, 1);
  EXPECT_DOUBLE_EQ(e1[0].routed, 4.0);
  EXPECT_DOUBLE_EQ(e1[1].routed, 0.0);  // layer 1 has no round-1 record
  const auto f = ffn_stats(d, std::nullopt);
  EXPECT_DOUBLE_EQ(f[0].active_ratio, 0.5);   // (0.25 + 0.75) / 2
  EXPECT_DOUBLE_EQ(f[1].active_ratio, 0.25);  // skipped counts as 0 active: (0 + 0.5) / 2
  EXPECT_DOUBLE_EQ(f[1].skipped, 0.5);
  EXPECT_DOUBLE_EQ(ffn_stats(d, 0)[0].active_ratio, 0.25);
}

}  // namespace
}  // namespace specula::ui

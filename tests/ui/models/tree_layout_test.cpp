// The draft tree layout: columns are depths, leaves take consecutive rows, a parent sits at the
// mean of its children, and the accepted path is marked from the root down.
#include "ui/models/tree_layout.h"

#include <gtest/gtest.h>

namespace specula::ui {
namespace {

profiler::DraftNodeRow node(int32_t id, int32_t parent, int32_t depth, bool accepted = false, bool visited = false) {
  profiler::DraftNodeRow n;
  n.node = id;
  n.parent = parent;
  n.depth = depth;
  n.token = 100 + id;
  n.draft_prob = 0.5f;
  n.accepted = accepted;
  n.visited = visited || accepted;
  if (n.visited) n.target_prob = 0.25f;
  return n;
}

TEST(TreeLayout, ChainIsOneRow) {
  const TreeLayout t = layout_draft_tree({node(0, -1, 1, true), node(1, 0, 2, true), node(2, 1, 3)});
  ASSERT_EQ(t.nodes.size(), 4u);
  EXPECT_EQ(t.rows, 1);
  EXPECT_EQ(t.max_depth, 3);
  for (const auto& n : t.nodes) EXPECT_DOUBLE_EQ(n.row, 0.0);
  EXPECT_EQ(t.nodes[3].depth, 3);
  EXPECT_TRUE(t.nodes[2].on_accepted_path);
  EXPECT_FALSE(t.nodes[3].on_accepted_path);
}

TEST(TreeLayout, ParentsCentreOverTheirChildren) {
  // root -> 0 -> {2, 3}, root -> 1 -> 4 -> {5, 6}
  const TreeLayout t = layout_draft_tree(
      {node(0, -1, 1), node(1, -1, 1), node(2, 0, 2), node(3, 0, 2), node(4, 1, 2), node(5, 4, 3), node(6, 4, 3)});
  EXPECT_EQ(t.rows, 4);  // leaves 2, 3, 5, 6
  const auto row_of = [&](int32_t id) {
    for (const auto& n : t.nodes) {
      if (n.node == id) return n.row;
    }
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(row_of(2), 0);
  EXPECT_DOUBLE_EQ(row_of(3), 1);
  EXPECT_DOUBLE_EQ(row_of(5), 2);
  EXPECT_DOUBLE_EQ(row_of(6), 3);
  EXPECT_DOUBLE_EQ(row_of(0), 0.5);
  EXPECT_DOUBLE_EQ(row_of(4), 2.5);
  EXPECT_DOUBLE_EQ(row_of(1), 2.5);
  EXPECT_DOUBLE_EQ(t.nodes[0].row, 1.5);  // the root over 0 and 1
  // No two nodes of one column share a row.
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    for (size_t j = i + 1; j < t.nodes.size(); ++j) {
      if (t.nodes[i].depth == t.nodes[j].depth) {
        EXPECT_NE(t.nodes[i].row, t.nodes[j].row) << i << " " << j;
      }
    }
  }
}

TEST(TreeLayout, AcceptedPathStopsAtTheFirstRejection) {
  // 0 accepted, 1 (child of 0) rejected, 2 (child of 1) marked accepted by a damaged session.
  const TreeLayout t = layout_draft_tree({node(0, -1, 1, true), node(1, 0, 2, false, true), node(2, 1, 3, true)});
  EXPECT_TRUE(t.nodes[1].on_accepted_path);
  EXPECT_FALSE(t.nodes[2].on_accepted_path);
  EXPECT_FALSE(t.nodes[3].on_accepted_path);
  EXPECT_FLOAT_EQ(t.nodes[2].target_prob, 0.25f);
  EXPECT_TRUE(t.nodes[2].visited);
}

TEST(TreeLayout, UnknownParentsHangFromTheRoot) {
  const TreeLayout t = layout_draft_tree({node(0, 42, 5), node(1, 1, 2)});  // 42 missing, 1 is itself
  EXPECT_EQ(t.nodes[1].parent, 0);
  EXPECT_EQ(t.nodes[1].depth, 1);
  EXPECT_EQ(t.nodes[2].parent, 0);
  EXPECT_EQ(t.rows, 2);
}

TEST(TreeLayout, EmptyTreeIsTheRootAlone) {
  const TreeLayout t = layout_draft_tree({});
  ASSERT_EQ(t.nodes.size(), 1u);
  EXPECT_EQ(t.rows, 1);
  EXPECT_EQ(t.max_depth, 0);
}

}  // namespace
}  // namespace specula::ui

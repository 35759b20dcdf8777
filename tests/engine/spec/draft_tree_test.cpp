#include "engine/spec/draft_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace specula {
namespace {

// root ─┬─ 0 (t10) ── 3 (t13) ── 5 (t15)
//       └─ 1 (t11) ── 2 (t12) ── 4 (t14)
// Node 2 hangs under the second root child but has a smaller id than node 3, so BFS and
// position-sorted orders differ.
DraftTree hand_built_tree() {
  DraftTree tree;
  EXPECT_EQ(*tree.add_child(kDraftRoot, 10, 0.5f), 0);
  EXPECT_EQ(*tree.add_child(kDraftRoot, 11, 0.3f), 1);
  EXPECT_EQ(*tree.add_child(1, 12, 0.9f), 2);
  EXPECT_EQ(*tree.add_child(0, 13, 0.8f), 3);
  EXPECT_EQ(*tree.add_child(2, 14, 0.7f), 4);
  EXPECT_EQ(*tree.add_child(3, 15, 0.6f), 5);
  return tree;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DraftTree, DepthsChildrenAndPaths) {
  const DraftTree tree = hand_built_tree();
  ASSERT_EQ(tree.size(), 6);
  const std::vector<int> depths = {1, 1, 2, 2, 3, 3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(tree.node(i).depth, depths[static_cast<size_t>(i)]) << "node " << i;
  EXPECT_EQ(tree.max_depth(), 3);

  auto kids = [&](DraftNodeId id) {
    return std::vector<DraftNodeId>(tree.children(id).begin(), tree.children(id).end());
  };
  EXPECT_EQ(kids(kDraftRoot), (std::vector<DraftNodeId>{0, 1}));
  EXPECT_EQ(kids(0), (std::vector<DraftNodeId>{3}));
  EXPECT_EQ(kids(1), (std::vector<DraftNodeId>{2}));
  EXPECT_TRUE(kids(4).empty());
  EXPECT_TRUE(tree.is_leaf(5));
  EXPECT_FALSE(tree.is_leaf(kDraftRoot));

  EXPECT_EQ(tree.path_to(4), (std::vector<DraftNodeId>{1, 2, 4}));
  EXPECT_EQ(tree.path_tokens(5), (std::vector<int32_t>{10, 13, 15}));
  EXPECT_TRUE(tree.path_tokens(kDraftRoot).empty());
  EXPECT_EQ(tree.paths(), (std::vector<std::vector<DraftNodeId>>{{1, 2, 4}, {0, 3, 5}}));
}

TEST(DraftTree, AttentionMaskIsSelfPlusAncestors) {
  const DraftTree tree = hand_built_tree();
  // Row i lists what node i sees.
  const std::vector<std::vector<int>> expected = {
      {1, 0, 0, 0, 0, 0},  // 0
      {0, 1, 0, 0, 0, 0},  // 1
      {0, 1, 1, 0, 0, 0},  // 2: 1, 2
      {1, 0, 0, 1, 0, 0},  // 3: 0, 3
      {0, 1, 1, 0, 1, 0},  // 4: 1, 2, 4
      {1, 0, 0, 1, 0, 1},  // 5: 0, 3, 5
  };
  const std::vector<uint8_t> mask = tree.tree_attention_mask();
  ASSERT_EQ(mask.size(), 36u);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) {
      EXPECT_EQ(mask[static_cast<size_t>(i * 6 + j)], expected[static_cast<size_t>(i)][static_cast<size_t>(j)])
          << "row " << i << " col " << j;
    }
  }
  EXPECT_EQ(tree.ancestor_mask(4), 0b010110u);
}

TEST(DraftTree, PermutedMaskFollowsQueryOrder) {
  const DraftTree tree = hand_built_tree();
  const std::vector<uint8_t> dense = tree.tree_attention_mask();
  for (TraversalOrder order : {TraversalOrder::kBfs, TraversalOrder::kDfs, TraversalOrder::kPositionSorted}) {
    const std::vector<DraftNodeId> ids = tree.traversal(order);
    const std::vector<uint8_t> mask = tree.tree_attention_mask(ids);
    for (size_t r = 0; r < 6; ++r) {
      for (size_t c = 0; c < 6; ++c) {
        EXPECT_EQ(mask[r * 6 + c], dense[static_cast<size_t>(ids[r]) * 6 + static_cast<size_t>(ids[c])]);
        // Every order puts parents first, so the permuted mask stays lower-triangular (causal).
        if (c > r) {
          EXPECT_EQ(mask[r * 6 + c], 0) << to_string(order) << " row " << r << " col " << c;
        }
      }
    }
  }
}

TEST(DraftTree, PositionsStartAtContextLength) {
  const DraftTree tree = hand_built_tree();
  EXPECT_EQ(tree.positions(100), (std::vector<int32_t>{100, 100, 101, 101, 102, 102}));
  EXPECT_EQ(tree.positions(0), (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
}

TEST(DraftTree, TraversalOrders) {
  const DraftTree tree = hand_built_tree();
  EXPECT_EQ(tree.traversal(TraversalOrder::kBfs), (std::vector<DraftNodeId>{0, 1, 3, 2, 5, 4}));
  EXPECT_EQ(tree.traversal(TraversalOrder::kDfs), (std::vector<DraftNodeId>{0, 3, 5, 1, 2, 4}));
  EXPECT_EQ(tree.traversal(TraversalOrder::kPositionSorted), (std::vector<DraftNodeId>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(DraftTree().traversal(TraversalOrder::kDfs).empty());

  EXPECT_EQ(*parse_traversal_order("bfs"), TraversalOrder::kBfs);
  EXPECT_EQ(*parse_traversal_order("dfs"), TraversalOrder::kDfs);
  EXPECT_EQ(*parse_traversal_order("pos"), TraversalOrder::kPositionSorted);
  auto bad = parse_traversal_order("zigzag");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.error().message, "zigzag")) << bad.error().message;
}

TEST(DraftTree, AddNodeRejectsBadNodes) {
  DraftTree tree = hand_built_tree();

  auto missing_parent = tree.add_child(7, 1, 0.5f);
  ASSERT_FALSE(missing_parent.ok());
  EXPECT_TRUE(contains(missing_parent.error().message, "parent 7 does not exist")) << missing_parent.error().message;

  DraftNode self_parent;
  self_parent.parent = 6;  // its own id: a parent must precede the child
  self_parent.depth = 1;
  EXPECT_FALSE(tree.add_node(self_parent).ok());

  DraftNode wrong_depth;
  wrong_depth.parent = 2;
  wrong_depth.depth = 2;
  auto depth_error = tree.add_node(wrong_depth);
  ASSERT_FALSE(depth_error.ok());
  EXPECT_TRUE(contains(depth_error.error().message, "implies depth 3")) << depth_error.error().message;

  EXPECT_FALSE(tree.add_child(0, -3, 0.5f).ok());
  EXPECT_FALSE(tree.add_child(0, 3, 1.5f).ok());
  EXPECT_FALSE(tree.add_child(0, 3, std::nanf("")).ok());

  auto no_dist = tree.add_child(0, 3, 0.5f, nullptr, /*sampled=*/true);
  ASSERT_FALSE(no_dist.ok());
  EXPECT_TRUE(contains(no_dist.error().message, "no draft distribution")) << no_dist.error().message;
  auto dist = std::make_shared<const DraftDistribution>(DraftDistribution{0.5f, 0.5f, 0.0f});
  EXPECT_FALSE(tree.add_child(0, 2, 0.0f, dist, true).ok());  // q(2) = 0: could not have been drawn
  EXPECT_FALSE(tree.add_child(0, 3, 0.0f, dist, true).ok());  // past the restricted support
  EXPECT_TRUE(tree.add_child(0, 1, 0.5f, dist, true).ok());

  EXPECT_EQ(tree.size(), 7);  // the failures left no trace
}

TEST(DraftTree, HoldsAtMost64Nodes) {
  DraftTree tree;
  DraftNodeId parent = kDraftRoot;
  for (int i = 0; i < kMaxDraftNodes; ++i) {
    auto id = tree.add_child(parent, i, 1.0f);
    ASSERT_TRUE(id.ok()) << id.error().message;
    parent = *id;
  }
  EXPECT_EQ(tree.ancestor_mask(63), ~uint64_t{0});
  EXPECT_EQ(tree.positions(5).back(), 5 + 63);
  auto full = tree.add_child(kDraftRoot, 1, 1.0f);
  ASSERT_FALSE(full.ok());
  EXPECT_TRUE(contains(full.error().message, "at most 64")) << full.error().message;
}

// ---- Shape specs --------------------------------------------------------------------------

TEST(TreeShapeSpec, ParsesValidSpecs) {
  auto chain = parse_tree_shape("chain:3");
  ASSERT_TRUE(chain.ok()) << chain.error().message;
  EXPECT_EQ(chain->kind, TreeShape::Kind::kChain);
  EXPECT_EQ(chain->branching, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(chain->max_nodes(), 3);
  EXPECT_EQ(chain->to_string(), "chain:3");

  auto fixed = parse_tree_shape("static:4,2,2,1");
  ASSERT_TRUE(fixed.ok()) << fixed.error().message;
  EXPECT_EQ(fixed->kind, TreeShape::Kind::kStatic);
  EXPECT_EQ(fixed->branching, (std::vector<int>{4, 2, 2, 1}));
  EXPECT_EQ(fixed->max_nodes(), 4 + 8 + 16 + 16);
  EXPECT_EQ(fixed->to_string(), "static:4,2,2,1");

  auto dynamic = parse_tree_shape("dynamic:6,4,60");
  ASSERT_TRUE(dynamic.ok()) << dynamic.error().message;
  EXPECT_EQ(dynamic->kind, TreeShape::Kind::kDynamic);
  EXPECT_EQ(dynamic->depth, 6);
  EXPECT_EQ(dynamic->top_k, 4);
  EXPECT_EQ(dynamic->total, 60);
  EXPECT_EQ(dynamic->to_string(), "dynamic:6,4,60");

  EXPECT_TRUE(parse_tree_shape("chain:64").ok());
  EXPECT_TRUE(parse_tree_shape("static:8,7").ok());  // 8 + 56 = 64
}

TEST(TreeShapeSpec, RejectsBadSpecsWithReasons) {
  const std::map<std::string, std::string> bad = {
      {"", "expected chain:K"},
      {"chain", "expected chain:K"},
      {"chain:", "no numbers"},
      {"chain:0", "expected 1..64"},
      {"chain:65", "expected 1..64"},
      {"chain:-2", "expected 1..64"},
      {"chain:3x", "not a whole number"},
      {"chain:2.5", "not a whole number"},
      {"chain:3,2", "chain takes one length"},
      {"static:4,,2", "item 2 is empty"},
      {"static:4,2,", "item 3 is empty"},
      {"static: 4", "not a whole number"},
      {"static:8,8", "72 nodes"},
      {"static:a", "not a whole number"},
      {"dynamic:5,4", "three numbers"},
      {"dynamic:5,4,32,1", "three numbers"},
      {"dynamic:5,4,100", "expected 1..64"},
      {"tree:3", "unknown kind \"tree\""},
      {"Chain:3", "unknown kind"},
  };
  for (const auto& [spec, reason] : bad) {
    auto shape = parse_tree_shape(spec);
    ASSERT_FALSE(shape.ok()) << "accepted \"" << spec << "\"";
    EXPECT_TRUE(contains(shape.error().message, reason)) << spec << ": " << shape.error().message;
    EXPECT_TRUE(contains(shape.error().message, "\"" + spec + "\"")) << "error does not quote the spec";
  }
}

// ---- Builders -----------------------------------------------------------------------------

// A draft "model" over 4 tokens whose distribution depends on the last token only.
struct MarkovDraft {
  std::vector<DraftDistribution> after_root_and_token;  // [0] root, [1 + t] after token t
  std::vector<std::vector<int32_t>>* calls = nullptr;

  Expected<DraftDistribution> operator()(std::span<const int32_t> prefix) const {
    if (calls) calls->emplace_back(prefix.begin(), prefix.end());
    return after_root_and_token[prefix.empty() ? 0 : static_cast<size_t>(prefix.back() + 1)];
  }
};

MarkovDraft example_draft(std::vector<std::vector<int32_t>>* calls) {
  return MarkovDraft{{
                         {0.5f, 0.25f, 0.15f, 0.1f},    // root
                         {0.1f, 0.6f, 0.2f, 0.1f},      // after 0
                         {0.8f, 0.1f, 0.06f, 0.04f},    // after 1
                         {0.25f, 0.25f, 0.25f, 0.25f},  // after 2
                         {0.4f, 0.3f, 0.2f, 0.1f},      // after 3
                     },
                     calls};
}

TEST(DraftTreeBuilder, ChainFollowsTheDraftArgmax) {
  std::vector<std::vector<int32_t>> calls;
  auto tree = build_draft_tree(*parse_tree_shape("chain:3"), example_draft(&calls), DraftChoice::kTopK);
  ASSERT_TRUE(tree.ok()) << tree.error().message;
  ASSERT_EQ(tree->size(), 3);
  EXPECT_EQ(tree->path_tokens(2), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_FLOAT_EQ(tree->node(1).draft_prob, 0.6f);
  EXPECT_FALSE(tree->node(1).sampled);
  ASSERT_NE(tree->node(1).draft_dist, nullptr);
  EXPECT_EQ((*tree->node(1).draft_dist)[1], 0.6f);
  EXPECT_EQ(calls, (std::vector<std::vector<int32_t>>{{}, {0}, {0, 1}}));
}

TEST(DraftTreeBuilder, StaticTopKBranchesPerDepth) {
  std::vector<std::vector<int32_t>> calls;
  auto tree = build_draft_tree(*parse_tree_shape("static:2,2"), example_draft(&calls), DraftChoice::kTopK);
  ASSERT_TRUE(tree.ok()) << tree.error().message;
  ASSERT_EQ(tree->size(), 6);
  EXPECT_EQ(tree->paths(), (std::vector<std::vector<DraftNodeId>>{{0, 2}, {0, 3}, {1, 4}, {1, 5}}));
  std::vector<int32_t> tokens;
  for (const DraftNode& n : tree->nodes()) tokens.push_back(n.token);
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 1, /*after 0*/ 1, 2, /*after 1*/ 0, 1}));
  // Siblings share one recorded distribution.
  EXPECT_EQ(tree->node(2).draft_dist.get(), tree->node(3).draft_dist.get());
  EXPECT_EQ(calls.size(), 3u);  // root, then the two depth-1 nodes; leaves are not expanded
}

TEST(DraftTreeBuilder, StaticSampledDrawsDistinctSiblingsReproducibly) {
  const MarkovDraft draft = example_draft(nullptr);
  const TreeShape shape = *parse_tree_shape("static:3,2");
  std::mt19937_64 rng_a(42), rng_b(42);
  auto a = build_draft_tree(shape, draft, DraftChoice::kSample, &rng_a);
  auto b = build_draft_tree(shape, draft, DraftChoice::kSample, &rng_b);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->size(), 3 + 6);
  for (DraftNodeId parent = kDraftRoot; parent < a->size(); ++parent) {
    std::set<int32_t> seen;
    for (DraftNodeId c : a->children(parent)) {
      EXPECT_TRUE(seen.insert(a->node(c).token).second) << "duplicate sibling token under " << parent;
      EXPECT_TRUE(a->node(c).sampled);
      EXPECT_EQ(a->node(c).token, b->node(c).token);
    }
  }
  EXPECT_FALSE(build_draft_tree(shape, draft, DraftChoice::kSample, nullptr).ok());  // needs an rng

  // A support smaller than the branching gives fewer children instead of zero-probability ones.
  MarkovDraft narrow{{{0.0f, 1.0f, 0.0f, 0.0f}, {}, {0.7f, 0.0f, 0.3f}, {}, {}}, nullptr};
  std::mt19937_64 rng(1);
  auto small = build_draft_tree(shape, narrow, DraftChoice::kSample, &rng);
  ASSERT_TRUE(small.ok()) << small.error().message;
  EXPECT_EQ(small->size(), 1 + 2);
}

TEST(DraftTreeBuilder, DynamicKeepsTheBestCumulativeProbabilities) {
  // Depth 1: [0] .5, [1] .25; both expanded.
  // Depth 2: [0,1] .3, [0,2] .1, [1,0] .2, [1,1] .025; expand [0,1] and [1,0].
  // Depth 3: [0,1,0] .24, [0,1,1] .03, [1,0,1] .12, [1,0,2] .04.
  // The best 5: [0] .5, [0,1] .3, [1] .25, [0,1,0] .24, [1,0] .2.
  std::vector<std::vector<int32_t>> calls;
  auto tree = build_draft_tree(*parse_tree_shape("dynamic:3,2,5"), example_draft(&calls), DraftChoice::kTopK);
  ASSERT_TRUE(tree.ok()) << tree.error().message;
  ASSERT_EQ(tree->size(), 5);
  std::vector<std::vector<int32_t>> paths;
  for (DraftNodeId id = 0; id < tree->size(); ++id) paths.push_back(tree->path_tokens(id));
  EXPECT_EQ(paths, (std::vector<std::vector<int32_t>>{{0}, {1}, {0, 1}, {1, 0}, {0, 1, 0}}));
  EXPECT_FLOAT_EQ(tree->node(4).draft_prob, 0.8f);
  EXPECT_EQ(calls.size(), 1u + 2u + 2u);

  auto wide = build_draft_tree(*parse_tree_shape("dynamic:3,2,64"), example_draft(nullptr), DraftChoice::kTopK);
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(wide->size(), 2 + 4 + 4);  // every candidate fits the budget

  auto sampled =
      build_draft_tree(*parse_tree_shape("dynamic:3,2,5"), example_draft(nullptr), DraftChoice::kSample, nullptr);
  EXPECT_FALSE(sampled.ok());
}

TEST(DraftTreeBuilder, PropagatesDrafterErrors) {
  DraftDistributionFn failing = [](std::span<const int32_t> prefix) -> Expected<DraftDistribution> {
    if (prefix.size() == 1) return make_error("drafter out of memory");
    return DraftDistribution{0.5f, 0.5f};
  };
  auto tree = build_draft_tree(*parse_tree_shape("chain:3"), failing, DraftChoice::kTopK);
  ASSERT_FALSE(tree.ok());
  EXPECT_TRUE(contains(tree.error().message, "drafter out of memory")) << tree.error().message;
}

}  // namespace
}  // namespace specula

#pragma once
// DraftTree: the candidate continuations one speculative round proposes, as a tree hanging
// off the last committed token. Node ids are dense, 0..size()-1, and every parent precedes
// its children, so id order is already a valid (topological) query order. At most 64 nodes,
// which lets each node's ancestor set be one uint64_t.
//
// Shapes are built by the builders below from a draft-distribution callback, which keeps this
// file model-independent: the drafter (a small model, n-gram table, EAGLE head...) only answers
// "what is the draft distribution after this prefix?".
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/expected.h"

namespace specula {

using DraftNodeId = int32_t;
inline constexpr DraftNodeId kDraftRoot = -1;  // the last committed token (not a node itself)
inline constexpr int kMaxDraftNodes = 64;

// A draft distribution over token ids. Its size may be smaller than the target vocabulary (a
// restricted draft support): ids at or beyond size() have probability 0.
using DraftDistribution = std::vector<float>;

struct DraftNode {
  int32_t token = 0;
  DraftNodeId parent = kDraftRoot;
  int depth = 1;         // 1 = child of the last committed token
  float draft_prob = 0;  // q(token | prefix through parent), as the drafter reported it
  // The draft distribution after the parent, q(. | prefix). Optional: null when the drafter
  // did not keep it. Siblings share one distribution, hence the shared pointer.
  std::shared_ptr<const DraftDistribution> draft_dist;
  // true: token was drawn at random from draft_dist, siblings without replacement in id order
  // (each excluding the tokens of its earlier siblings). false: chosen deterministically
  // (argmax / top-k); lossless verification then treats it as a point mass.
  bool sampled = false;
};

enum class TraversalOrder { kBfs, kDfs, kPositionSorted };

std::string_view to_string(TraversalOrder order);
Expected<TraversalOrder> parse_traversal_order(std::string_view name);  // "bfs" | "dfs" | "pos"

class DraftTree {
 public:
  // Validates and appends; returns the new id. The parent must be kDraftRoot or an existing
  // node, depth must be parent depth + 1, and a sampled node needs its distribution.
  Expected<DraftNodeId> add_node(DraftNode node);
  // Convenience: computes the depth from the parent.
  Expected<DraftNodeId> add_child(DraftNodeId parent, int32_t token, float draft_prob,
                                  std::shared_ptr<const DraftDistribution> draft_dist = nullptr, bool sampled = false);

  int size() const { return static_cast<int>(nodes_.size()); }
  bool empty() const { return nodes_.empty(); }
  const DraftNode& node(DraftNodeId id) const { return nodes_[static_cast<size_t>(id)]; }
  std::span<const DraftNode> nodes() const { return nodes_; }
  int max_depth() const;

  // Children in id order; kDraftRoot gives the first-level nodes.
  std::span<const DraftNodeId> children(DraftNodeId id) const;
  bool is_leaf(DraftNodeId id) const { return children(id).empty(); }

  // Bit j set iff node j is id itself or one of its ancestors.
  uint64_t ancestor_mask(DraftNodeId id) const { return ancestors_[static_cast<size_t>(id)]; }
  // Node ids from the first-level node down to id (inclusive).
  std::vector<DraftNodeId> path_to(DraftNodeId id) const;
  std::vector<int32_t> path_tokens(DraftNodeId id) const;  // kDraftRoot -> empty
  // One root-to-leaf path per leaf, leaves in id order.
  std::vector<std::vector<DraftNodeId>> paths() const;

  // n x n row-major, 1 where query node i may attend to node j (j is i or an ancestor of i).
  std::vector<uint8_t> tree_attention_mask() const;
  // The same mask with rows and columns in the given query order: entry (r, c) is 1 iff node
  // order[c] is order[r] or its ancestor. order must be a permutation of the node ids.
  std::vector<uint8_t> tree_attention_mask(std::span<const DraftNodeId> order) const;
  // Absolute position of each node: the first draft token sits at context_len.
  std::vector<int32_t> positions(int32_t context_len) const;
  // A permutation of the node ids. All three orders put parents before children.
  std::vector<DraftNodeId> traversal(TraversalOrder order) const;

 private:
  std::vector<DraftNode> nodes_;
  std::vector<uint64_t> ancestors_;
  std::vector<std::vector<DraftNodeId>> children_;  // children_[id + 1]; [0] = the root's
};

// ---- Shapes -------------------------------------------------------------------------------

// "chain:K", "static:B1,B2,..." (B_d children per node at depth d-1), "dynamic:DEPTH,TOPK,TOTAL"
// (EAGLE-2 style: expand the TOPK best-scoring nodes per depth, keep the TOTAL best by
// cumulative draft probability).
struct TreeShape {
  enum class Kind { kChain, kStatic, kDynamic };
  Kind kind = Kind::kChain;
  std::vector<int> branching;  // chain: K ones; static: B1..BD
  int depth = 0;               // dynamic only
  int top_k = 0;               // dynamic only
  int total = 0;               // dynamic only: node budget

  std::string to_string() const;
  int max_nodes() const;  // the most nodes a tree of this shape can have
};

Expected<TreeShape> parse_tree_shape(std::string_view spec);

// How builders pick the children of a node from its draft distribution q.
enum class DraftChoice {
  kTopK,    // the most probable tokens (ties: lower id first); verification sees point masses
  kSample,  // draws without replacement from q (chain and static shapes only)
};

// Returns the draft distribution (already through apply_sampling_filters) after the committed
// context followed by draft_prefix (empty for the root). Called once per expanded node, parents
// before children and nodes of one depth consecutively.
using DraftDistributionFn = std::function<Expected<DraftDistribution>(std::span<const int32_t> draft_prefix)>;

// rng is used (and required) only for DraftChoice::kSample.
Expected<DraftTree> build_draft_tree(const TreeShape& shape, const DraftDistributionFn& draft, DraftChoice choice,
                                     std::mt19937_64* rng = nullptr);

}  // namespace specula

#include "engine/spec/draft_tree.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <numeric>

#include "engine/spec/sampling_filters.h"

namespace specula {

namespace {

std::string id_name(DraftNodeId id) { return id == kDraftRoot ? std::string("root") : "node " + std::to_string(id); }

}  // namespace

std::string_view to_string(TraversalOrder order) {
  switch (order) {
    case TraversalOrder::kBfs:
      return "bfs";
    case TraversalOrder::kDfs:
      return "dfs";
    case TraversalOrder::kPositionSorted:
      return "pos";
  }
  return "?";
}

Expected<TraversalOrder> parse_traversal_order(std::string_view name) {
  if (name == "bfs") return TraversalOrder::kBfs;
  if (name == "dfs") return TraversalOrder::kDfs;
  if (name == "pos" || name == "position") return TraversalOrder::kPositionSorted;
  return make_error("traversal order \"" + std::string(name) + "\": expected bfs, dfs or pos");
}

// ---- DraftTree ----------------------------------------------------------------------------

Expected<DraftNodeId> DraftTree::add_node(DraftNode node) {
  const int id = size();
  const std::string where = "draft tree: new node " + std::to_string(id) + ": ";
  if (id >= kMaxDraftNodes) {
    return make_error(where + "tree is full (at most " + std::to_string(kMaxDraftNodes) + " nodes)");
  }
  if (node.parent != kDraftRoot && (node.parent < 0 || node.parent >= id)) {
    return make_error(where + "parent " + std::to_string(node.parent) + " does not exist (nodes 0.." +
                      std::to_string(id - 1) + " do; -1 is the root)");
  }
  const int want_depth = node.parent == kDraftRoot ? 1 : nodes_[static_cast<size_t>(node.parent)].depth + 1;
  if (node.depth != want_depth) {
    return make_error(where + "depth " + std::to_string(node.depth) + " but its parent (" + id_name(node.parent) +
                      ") implies depth " + std::to_string(want_depth));
  }
  if (node.token < 0) return make_error(where + "negative token id " + std::to_string(node.token));
  if (!(node.draft_prob >= 0.0f && node.draft_prob <= 1.0f)) {
    return make_error(where + "draft probability " + std::to_string(node.draft_prob) + " outside [0, 1]");
  }
  if (node.sampled) {
    if (!node.draft_dist) return make_error(where + "sampled but has no draft distribution");
    if (static_cast<size_t>(node.token) >= node.draft_dist->size() ||
        !((*node.draft_dist)[static_cast<size_t>(node.token)] > 0)) {
      return make_error(where + "sampled token " + std::to_string(node.token) +
                        " has no probability under its draft distribution");
    }
  }

  const uint64_t self = uint64_t{1} << id;
  ancestors_.push_back(node.parent == kDraftRoot ? self : ancestors_[static_cast<size_t>(node.parent)] | self);
  if (children_.empty()) children_.emplace_back();  // the root's list
  const int parent_slot = node.parent + 1;          // the root's list is [0]
  children_[static_cast<size_t>(parent_slot)].push_back(id);
  children_.emplace_back();
  nodes_.push_back(std::move(node));
  return id;
}

Expected<DraftNodeId> DraftTree::add_child(DraftNodeId parent, int32_t token, float draft_prob,
                                           std::shared_ptr<const DraftDistribution> draft_dist, bool sampled) {
  DraftNode node;
  node.token = token;
  node.parent = parent;
  node.depth = parent >= 0 && parent < size() ? nodes_[static_cast<size_t>(parent)].depth + 1 : 1;
  node.draft_prob = draft_prob;
  node.draft_dist = std::move(draft_dist);
  node.sampled = sampled;
  return add_node(std::move(node));
}

int DraftTree::max_depth() const {
  int depth = 0;
  for (const DraftNode& n : nodes_) depth = std::max(depth, n.depth);
  return depth;
}

std::span<const DraftNodeId> DraftTree::children(DraftNodeId id) const {
  const int slot = id + 1;  // the root's list is [0]
  if (slot < 0 || static_cast<size_t>(slot) >= children_.size()) return {};
  return children_[static_cast<size_t>(slot)];
}

std::vector<DraftNodeId> DraftTree::path_to(DraftNodeId id) const {
  std::vector<DraftNodeId> path;
  for (DraftNodeId at = id; at != kDraftRoot; at = node(at).parent) path.push_back(at);
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<int32_t> DraftTree::path_tokens(DraftNodeId id) const {
  std::vector<int32_t> tokens;
  for (DraftNodeId at : path_to(id)) tokens.push_back(node(at).token);
  return tokens;
}

std::vector<std::vector<DraftNodeId>> DraftTree::paths() const {
  std::vector<std::vector<DraftNodeId>> out;
  for (DraftNodeId id = 0; id < size(); ++id) {
    if (is_leaf(id)) out.push_back(path_to(id));
  }
  return out;
}

std::vector<uint8_t> DraftTree::tree_attention_mask() const {
  std::vector<DraftNodeId> identity(nodes_.size());
  std::iota(identity.begin(), identity.end(), 0);
  return tree_attention_mask(identity);
}

std::vector<uint8_t> DraftTree::tree_attention_mask(std::span<const DraftNodeId> order) const {
  const size_t n = order.size();
  std::vector<uint8_t> mask(n * n, 0);
  for (size_t r = 0; r < n; ++r) {
    const uint64_t visible = ancestor_mask(order[r]);
    for (size_t c = 0; c < n; ++c) mask[r * n + c] = (visible >> order[c]) & 1u;
  }
  return mask;
}

std::vector<int32_t> DraftTree::positions(int32_t context_len) const {
  std::vector<int32_t> pos(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) pos[i] = context_len + nodes_[i].depth - 1;
  return pos;
}

std::vector<DraftNodeId> DraftTree::traversal(TraversalOrder order) const {
  std::vector<DraftNodeId> out;
  out.reserve(nodes_.size());
  switch (order) {
    case TraversalOrder::kBfs: {
      std::deque<DraftNodeId> queue(children(kDraftRoot).begin(), children(kDraftRoot).end());
      while (!queue.empty()) {
        const DraftNodeId id = queue.front();
        queue.pop_front();
        out.push_back(id);
        for (DraftNodeId c : children(id)) queue.push_back(c);
      }
      break;
    }
    case TraversalOrder::kDfs: {
      // Pre-order, children in id order: push them reversed so the first pops first.
      std::vector<DraftNodeId> stack(children(kDraftRoot).rbegin(), children(kDraftRoot).rend());
      while (!stack.empty()) {
        const DraftNodeId id = stack.back();
        stack.pop_back();
        out.push_back(id);
        for (auto it = children(id).rbegin(); it != children(id).rend(); ++it) stack.push_back(*it);
      }
      break;
    }
    case TraversalOrder::kPositionSorted: {
      out.resize(nodes_.size());
      std::iota(out.begin(), out.end(), 0);
      std::stable_sort(out.begin(), out.end(),
                       [&](DraftNodeId a, DraftNodeId b) { return node(a).depth < node(b).depth; });
      break;
    }
  }
  return out;
}

// ---- Shapes -------------------------------------------------------------------------------

std::string TreeShape::to_string() const {
  auto join = [](std::span<const int> values) {
    std::string s;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) s += ',';
      s += std::to_string(values[i]);
    }
    return s;
  };
  switch (kind) {
    case Kind::kChain:
      return "chain:" + std::to_string(branching.size());
    case Kind::kStatic:
      return "static:" + join(branching);
    case Kind::kDynamic: {
      const int parts[] = {depth, top_k, total};
      return "dynamic:" + join(parts);
    }
  }
  return "?";
}

int TreeShape::max_nodes() const {
  if (kind == Kind::kDynamic) return total;
  long long level = 1, sum = 0;
  for (int b : branching) {
    level *= b;
    sum += level;
    if (sum > (1 << 20)) break;  // far past any budget; avoid overflow
  }
  return static_cast<int>(std::min<long long>(sum, 1 << 20));
}

namespace {

// "4,2,2,1" -> {4, 2, 2, 1}; every item a decimal integer in [1, 64].
Expected<std::vector<int>> parse_counts(std::string_view list, const std::string& where) {
  std::vector<int> values;
  if (list.empty()) return make_error(where + ": no numbers after ':'");
  size_t start = 0;
  for (int item = 1;; ++item) {
    const size_t comma = list.find(',', start);
    const std::string_view text =
        list.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::string label = where + ": item " + std::to_string(item);
    if (text.empty()) return make_error(label + " is empty");
    int value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return make_error(label + " \"" + std::string(text) + "\" is not a whole number");
    }
    if (value < 1 || value > kMaxDraftNodes) {
      return make_error(label + " is " + std::to_string(value) + "; expected 1.." + std::to_string(kMaxDraftNodes));
    }
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return values;
}

}  // namespace

Expected<TreeShape> parse_tree_shape(std::string_view spec) {
  const std::string where = "tree shape \"" + std::string(spec) + "\"";
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) {
    return make_error(where + ": expected chain:K, static:B1,B2,... or dynamic:DEPTH,TOPK,TOTAL");
  }
  const std::string_view kind = spec.substr(0, colon);
  auto counts = parse_counts(spec.substr(colon + 1), where);
  if (!counts) return counts.error();
  const std::string budget = "; a draft tree holds at most " + std::to_string(kMaxDraftNodes) + " nodes";

  TreeShape shape;
  if (kind == "chain") {
    if (counts->size() != 1) return make_error(where + ": chain takes one length, chain:K");
    shape.kind = TreeShape::Kind::kChain;
    shape.branching.assign(static_cast<size_t>((*counts)[0]), 1);
  } else if (kind == "static") {
    shape.kind = TreeShape::Kind::kStatic;
    shape.branching = *counts;
    if (shape.max_nodes() > kMaxDraftNodes) {
      return make_error(where + ": " + std::to_string(shape.max_nodes()) + " nodes" + budget);
    }
  } else if (kind == "dynamic") {
    if (counts->size() != 3) return make_error(where + ": dynamic takes three numbers, dynamic:DEPTH,TOPK,TOTAL");
    shape.kind = TreeShape::Kind::kDynamic;
    shape.depth = (*counts)[0];
    shape.top_k = (*counts)[1];
    shape.total = (*counts)[2];
  } else {
    return make_error(where + ": unknown kind \"" + std::string(kind) + "\"; expected chain, static or dynamic");
  }
  return shape;
}

// ---- Builders -----------------------------------------------------------------------------

namespace {

// Up to `count` distinct tokens with q > 0: the most probable (ties: lower id), or drawn
// without replacement.
std::vector<int32_t> choose_children(const DraftDistribution& q, int count, DraftChoice choice, std::mt19937_64* rng) {
  std::vector<int32_t> chosen;
  if (choice == DraftChoice::kTopK) {
    std::vector<int32_t> order;
    for (size_t i = 0; i < q.size(); ++i) {
      if (q[i] > 0) order.push_back(static_cast<int32_t>(i));
    }
    const size_t take = std::min(order.size(), static_cast<size_t>(count));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take), order.end(),
                      [&](int32_t a, int32_t b) { return q[a] > q[b] || (q[a] == q[b] && a < b); });
    chosen.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take));
  } else {
    std::vector<double> remaining(q.begin(), q.end());
    for (int k = 0; k < count; ++k) {
      const int32_t token = sample_index(std::span<const double>(remaining), *rng);
      if (token < 0) break;
      chosen.push_back(token);
      remaining[static_cast<size_t>(token)] = 0;
    }
  }
  return chosen;
}

Expected<std::shared_ptr<const DraftDistribution>> call_draft(const DraftDistributionFn& draft,
                                                              std::span<const int32_t> prefix) {
  auto q = draft(prefix);
  if (!q)
    return make_error("draft tree: draft distribution after " + std::to_string(prefix.size()) +
                      " draft tokens: " + q.error().message);
  if (q->empty())
    return make_error("draft tree: empty draft distribution after " + std::to_string(prefix.size()) + " draft tokens");
  return std::shared_ptr<const DraftDistribution>(std::make_shared<DraftDistribution>(std::move(*q)));
}

Expected<DraftTree> build_levels(std::span<const int> branching, const DraftDistributionFn& draft, DraftChoice choice,
                                 std::mt19937_64* rng) {
  DraftTree tree;
  std::vector<DraftNodeId> frontier = {kDraftRoot};
  for (int count : branching) {
    std::vector<DraftNodeId> next;
    for (DraftNodeId parent : frontier) {
      auto q = call_draft(draft, tree.path_tokens(parent));
      if (!q) return q.error();
      for (int32_t token : choose_children(**q, count, choice, rng)) {
        auto id = tree.add_child(parent, token, (**q)[static_cast<size_t>(token)], *q, choice == DraftChoice::kSample);
        if (!id) return id.error();
        next.push_back(*id);
      }
    }
    frontier = std::move(next);
  }
  return tree;
}

// EAGLE-2 style: a node's score is its cumulative draft probability (the product of draft_prob
// along its path). Each depth expands only the top_k best-scoring nodes of the previous depth,
// each proposing its top_k children; finally the `total` best-scoring candidates overall form
// the tree. Scores never grow down a path, so the best set is closed under ancestors.
Expected<DraftTree> build_dynamic(const TreeShape& shape, const DraftDistributionFn& draft) {
  struct Candidate {
    int parent;  // index into candidates, -1 = root
    int32_t token;
    float draft_prob;
    double score;
    int depth;
    std::shared_ptr<const DraftDistribution> dist;
    std::vector<int32_t> tokens;  // path from the root, inclusive
  };
  std::vector<Candidate> candidates;
  auto by_score = [&](int a, int b) {
    const Candidate& x = candidates[static_cast<size_t>(a)];
    const Candidate& y = candidates[static_cast<size_t>(b)];
    if (x.score != y.score) return x.score > y.score;
    if (x.depth != y.depth) return x.depth < y.depth;
    return a < b;
  };

  std::vector<int> expand = {-1};
  for (int depth = 1; depth <= shape.depth && !expand.empty(); ++depth) {
    std::vector<int> level;
    for (int parent : expand) {
      const std::vector<int32_t> prefix =
          parent < 0 ? std::vector<int32_t>{} : candidates[static_cast<size_t>(parent)].tokens;
      auto q = call_draft(draft, prefix);
      if (!q) return q.error();
      const double parent_score = parent < 0 ? 1.0 : candidates[static_cast<size_t>(parent)].score;
      for (int32_t token : choose_children(**q, shape.top_k, DraftChoice::kTopK, nullptr)) {
        Candidate c{parent, token, (**q)[static_cast<size_t>(token)], 0, depth, *q, prefix};
        c.score = parent_score * c.draft_prob;
        c.tokens.push_back(token);
        level.push_back(static_cast<int>(candidates.size()));
        candidates.push_back(std::move(c));
      }
    }
    std::sort(level.begin(), level.end(), by_score);
    if (level.size() > static_cast<size_t>(shape.top_k)) level.resize(static_cast<size_t>(shape.top_k));
    expand = std::move(level);
  }

  std::vector<int> ranked(candidates.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  std::sort(ranked.begin(), ranked.end(), by_score);
  std::vector<uint8_t> selected(candidates.size(), 0);
  int kept = 0;
  for (int c : ranked) {
    if (kept >= std::min(shape.total, kMaxDraftNodes)) break;
    const int parent = candidates[static_cast<size_t>(c)].parent;
    if (parent >= 0 && !selected[static_cast<size_t>(parent)]) continue;  // only if q > 1 slipped in
    selected[static_cast<size_t>(c)] = 1;
    ++kept;
  }

  // Candidates were created depth by depth, so index order puts parents first.
  DraftTree tree;
  std::vector<DraftNodeId> node_of(candidates.size(), kDraftRoot);
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (!selected[c]) continue;
    const Candidate& cand = candidates[c];
    const DraftNodeId parent = cand.parent < 0 ? kDraftRoot : node_of[static_cast<size_t>(cand.parent)];
    auto id = tree.add_child(parent, cand.token, cand.draft_prob, cand.dist, false);
    if (!id) return id.error();
    node_of[c] = *id;
  }
  return tree;
}

}  // namespace

Expected<DraftTree> build_draft_tree(const TreeShape& shape, const DraftDistributionFn& draft, DraftChoice choice,
                                     std::mt19937_64* rng) {
  if (choice == DraftChoice::kSample && rng == nullptr) {
    return make_error("draft tree " + shape.to_string() + ": sampled drafting needs a random generator");
  }
  if (shape.max_nodes() > kMaxDraftNodes) {
    return make_error("draft tree " + shape.to_string() + ": up to " + std::to_string(shape.max_nodes()) +
                      " nodes; at most " + std::to_string(kMaxDraftNodes) + " fit");
  }
  switch (shape.kind) {
    case TreeShape::Kind::kChain:
    case TreeShape::Kind::kStatic:
      return build_levels(shape.branching, draft, choice, rng);
    case TreeShape::Kind::kDynamic:
      if (choice == DraftChoice::kSample) {
        // Reranking drops some sampled siblings, and then the survivors were not drawn from the
        // distribution a lossless verifier would assume; dynamic trees are top-k only.
        return make_error("draft tree " + shape.to_string() +
                          ": dynamic trees choose children by top-k; "
                          "sampled drafting works with chain and static shapes");
      }
      if (shape.depth < 1 || shape.top_k < 1 || shape.total < 1) {
        return make_error("draft tree " + shape.to_string() + ": depth, top-k and total must be at least 1");
      }
      return build_dynamic(shape, draft);
  }
  return make_error("draft tree: unknown shape kind");
}

}  // namespace specula

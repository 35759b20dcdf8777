#include "ui/models/tree_layout.h"

#include <algorithm>
#include <unordered_map>

namespace specula::ui {

TreeLayout layout_draft_tree(const std::vector<profiler::DraftNodeRow>& nodes) {
  TreeLayout layout;
  layout.nodes.push_back(TreeNodeLayout{});
  layout.nodes[0].on_accepted_path = true;
  std::unordered_map<int32_t, int32_t> index_of;  // draft node id -> index in layout.nodes
  for (const auto& n : nodes) {
    TreeNodeLayout t;
    t.node = n.node;
    auto parent = index_of.find(n.parent);
    t.parent = parent != index_of.end() ? parent->second : 0;
    t.depth = layout.nodes[static_cast<size_t>(t.parent)].depth + 1;
    t.token = n.token;
    t.draft_prob = n.draft_prob;
    t.target_prob = n.target_prob.value_or(-1.0f);
    t.visited = n.visited;
    t.accepted = n.accepted;
    t.on_accepted_path = n.accepted && layout.nodes[static_cast<size_t>(t.parent)].on_accepted_path;
    index_of[n.node] = static_cast<int32_t>(layout.nodes.size());
    layout.nodes.push_back(t);
    layout.max_depth = std::max(layout.max_depth, t.depth);
  }
  // Children lists in input order, then rows: leaves take the next free row in depth-first
  // order; a parent takes the mean of its children's rows.
  const size_t n = layout.nodes.size();
  std::vector<std::vector<int32_t>> children(n);
  for (size_t i = 1; i < n; ++i) children[static_cast<size_t>(layout.nodes[i].parent)].push_back(static_cast<int32_t>(i));
  int32_t next_row = 0;
  std::vector<std::pair<int32_t, bool>> stack{{0, false}};  // (node, children done)
  while (!stack.empty()) {
    auto [i, done] = stack.back();
    stack.pop_back();
    auto& kids = children[static_cast<size_t>(i)];
    if (kids.empty()) {
      layout.nodes[static_cast<size_t>(i)].row = next_row++;
      continue;
    }
    if (done) {
      double sum = 0;
      for (int32_t k : kids) sum += layout.nodes[static_cast<size_t>(k)].row;
      layout.nodes[static_cast<size_t>(i)].row = sum / static_cast<double>(kids.size());
      continue;
    }
    stack.push_back({i, true});
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.push_back({*it, false});
  }
  layout.rows = std::max(1, next_row);
  return layout;
}

}  // namespace specula::ui

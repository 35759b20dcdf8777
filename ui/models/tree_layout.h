#pragma once
// Layout of one round's draft tree for drawing: depth runs left to right (column = depth), each
// leaf gets its own row, and a parent sits at the mean row of its children (a layered tidy
// layout). The root column (depth 0) is the last committed token, which every depth-1 node hangs
// from. No Qt.
#include <cstdint>
#include <vector>

#include "profiler/session_store.h"

namespace specula::ui {

struct TreeNodeLayout {
  int32_t node = -1;    // draft node id; -1 for the root (the committed token)
  int32_t parent = -1;  // index into TreeLayout::nodes; -1 for the root
  int32_t depth = 0;    // column
  double row = 0;       // vertical slot, in rows
  int32_t token = 0;
  float draft_prob = 0;
  float target_prob = -1;  // -1 when the acceptance rule never looked at the node
  bool visited = false;
  bool accepted = false;
  bool on_accepted_path = false;  // root and the accepted chain below it
};

struct TreeLayout {
  std::vector<TreeNodeLayout> nodes;  // nodes[0] is the root; parents precede children
  int32_t max_depth = 0;
  int32_t rows = 1;  // leaf count (at least 1)
};

// Nodes whose parent is missing or not earlier in the list hang from the root, so a damaged
// session still draws.
TreeLayout layout_draft_tree(const std::vector<profiler::DraftNodeRow>& nodes);

}  // namespace specula::ui

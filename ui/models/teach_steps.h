#pragma once
// Teaching mode's content: one recorded round told in five stages (draft, select blocks,
// verify, accept, commit), each with the round's own numbers and a short explanation. No Qt
// (tests check the text guiless); ui/views/teach_view.h draws it.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ui/models/session_data.h"

namespace specula::ui {

enum class TeachStage : int { kDraft = 0, kSelect = 1, kVerify = 2, kAccept = 3, kCommit = 4 };
inline constexpr int kTeachStageCount = 5;
std::string_view teach_stage_title(TeachStage stage);  // "Draft", "Select blocks", ...

// What the stages talk about, read from one round of a session.
struct TeachFacts {
  bool found = false;             // false: no such round
  int64_t round = -1;
  bool speculative = false;       // false: a plain decode step (no tree)
  std::string drafter;
  int tree_nodes = 0;
  int tree_depth = 0;
  int accepted = 0;               // draft tokens accepted
  int32_t next_token = -1;        // correction, or bonus when `bonus`
  bool bonus = false;
  int64_t context_len = 0;        // committed tokens before the round
  std::vector<int32_t> emitted;   // tokens the round added
  int64_t rollback_tokens = 0;
  int64_t rejected_kv_bytes = 0;
  // Sparse attention in verification, over the layers that recorded a whole-tree selection.
  std::string sparse_preset;      // config "sparse.preset"; "" when the session has none
  int selection_layers = 0;
  int reuse_layers = 0;
  int64_t blocks_per_head = 0;    // of the committed context
  double kept_fraction = 1;       // mean selected / total over those layers
  // The first selecting layer's head-0 choice, for the block strip (block ids within the head).
  int32_t strip_layer = -1;
  std::vector<int32_t> strip_blocks;
  int sink_blocks = 0;
  int local_blocks = 0;
};

TeachFacts teach_facts(const SessionData& data, int64_t round);

// Token text for explanations ("#id" when there is no tokenizer).
using TokenNamer = std::function<std::string(int32_t token)>;
std::string teach_explanation(const TeachFacts& facts, TeachStage stage, const TokenNamer& name);

}  // namespace specula::ui

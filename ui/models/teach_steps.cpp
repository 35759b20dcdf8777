#include "ui/models/teach_steps.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace specula::ui {
namespace {

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * fraction);
  return buf;
}

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string_view teach_stage_title(TeachStage stage) {
  switch (stage) {
    case TeachStage::kDraft: return "Draft";
    case TeachStage::kSelect: return "Select blocks";
    case TeachStage::kVerify: return "Verify";
    case TeachStage::kAccept: return "Accept";
    case TeachStage::kCommit: return "Commit";
  }
  return "";
}

TeachFacts teach_facts(const SessionData& data, int64_t round_id) {
  TeachFacts f;
  const profiler::RoundRow* r = data.round(round_id);
  if (r == nullptr) return f;
  f.found = true;
  f.round = r->round;
  f.speculative = r->speculative && r->tree_nodes > 0;
  f.drafter = r->drafter;
  f.tree_nodes = r->tree_nodes;
  f.tree_depth = r->tree_depth;
  f.accepted = std::max(0, r->accepted_length - 1);
  f.next_token = r->next_token;
  f.bonus = r->bonus;
  f.context_len = r->context_len;
  f.emitted = r->tokens;
  f.rollback_tokens = r->rollback_tokens;
  f.rejected_kv_bytes = r->rejected_kv_bytes;
  f.sink_blocks = data.sparse.sink_blocks;
  f.local_blocks = data.sparse.local_blocks;
  const auto config = nlohmann::json::parse(data.info.config_json, nullptr, false);
  if (config.is_object()) {
    if (auto s = config.find("sparse"); s != config.end() && s->is_object()) f.sparse_preset = s->value("preset", "");
  }
  const int64_t block = std::max(1, data.sparse.block_size);
  f.blocks_per_head = (r->context_len + block - 1) / block;
  double kept = 0;
  if (auto rows = data.selections.find(round_id); rows != data.selections.end()) {
    for (const profiler::LayerSelectionRow& row : rows->second) {
      const LayerSelectionEvent& s = row.selection;
      if (s.query >= 0 || s.group >= 0 || s.total_blocks <= 0) continue;  // whole-tree rows only
      ++f.selection_layers;
      if (s.mode == SelectionMode::kReuse) ++f.reuse_layers;
      kept += static_cast<double>(row.selected_blocks) / static_cast<double>(s.total_blocks);
      if (f.strip_layer < 0) {
        const int64_t nb = data.blocks_per_head(round_id, s.total_blocks);
        f.blocks_per_head = nb;
        f.strip_layer = s.layer;
        for (int32_t b : unpack_block_bits(s.block_bits)) {
          if (b < nb) f.strip_blocks.push_back(b);  // head 0
        }
      }
    }
  }
  if (f.selection_layers > 0) f.kept_fraction = kept / f.selection_layers;
  return f;
}

std::string teach_explanation(const TeachFacts& f, TeachStage stage, const TokenNamer& name) {
  if (!f.found) return "This session has no such round.";
  if (!f.speculative) {
    return "Round " + std::to_string(f.round) +
           " is a plain decode step: no draft was made, so the target computes one token the usual way.";
  }
  const std::string drafter = f.drafter.empty() ? std::string("the drafter") : "the " + f.drafter + " drafter";
  switch (stage) {
    case TeachStage::kDraft:
      return "Round " + std::to_string(f.round) + ": " + drafter + " guesses the next tokens cheaply. It proposes " +
             plural(f.tree_nodes, "token", "tokens") + " as a tree " + plural(f.tree_depth, "level", "levels") +
             " deep; each branch is one possible continuation. Nothing is checked yet.";
    case TeachStage::kSelect:
      if (f.selection_layers == 0 && !f.sparse_preset.empty() && f.sparse_preset != "strict") {
        return "Before verifying, attention may skip parts of the context. Sparse verification (" + f.sparse_preset +
               ") is on, but no layer chose blocks in this round (the " + std::to_string(f.context_len) +
               "-token context is below its dense threshold, or the recording level kept no selections), so all " +
               plural(f.blocks_per_head, "KV block", "KV blocks") + " are read.";
      }
      if (f.selection_layers == 0) {
        return "Before verifying, attention may skip parts of the context. This run is strict: every layer reads all " +
               plural(f.blocks_per_head, "KV block", "KV blocks") + " of the " + std::to_string(f.context_len) +
               "-token context.";
      }
      return "Sparse verification (" + (f.sparse_preset.empty() ? std::string("sparse") : f.sparse_preset) +
             "): each layer keeps only the KV blocks that matter for the draft's queries, plus the sink and the "
             "most recent blocks. On average " + percent(f.kept_fraction) + " of " +
             plural(f.blocks_per_head, "block", "blocks") + " per head are read; " +
             std::to_string(f.reuse_layers) + " of " + std::to_string(f.selection_layers) +
             " layers reuse an earlier layer's choice instead of computing their own.";
    case TeachStage::kVerify:
      return "The big model checks every drafted token in one forward pass: all " +
             plural(f.tree_nodes, "node", "nodes") +
             " go through together, and a tree mask lets each one see only its own branch. One pass costs about "
             "as much as generating a single token.";
    case TeachStage::kAccept: {
      std::string text = "Walking down the tree, the target agrees with " + plural(f.accepted, "drafted token", "drafted tokens") + ". ";
      if (f.bonus) {
        text += "The whole branch was right, so the target's next prediction " + name(f.next_token) + " comes free as a bonus token.";
      } else {
        text += "At the first disagreement the target's own token " + name(f.next_token) +
                " replaces the draft (a correction); the rest of that branch is thrown away.";
      }
      return text;
    }
    case TeachStage::kCommit:
      return plural(static_cast<int64_t>(f.emitted.size()), "token is", "tokens are") +
             " added to the output for one target pass (plain decoding would add 1). The KV rows of " +
             plural(f.rollback_tokens, "rejected node", "rejected nodes") + " (" + std::to_string(f.rejected_kv_bytes) +
             " bytes) are rolled back, and the next round starts from the new context of " +
             std::to_string(f.context_len + static_cast<int64_t>(f.emitted.size())) + " tokens.";
  }
  return "";
}

}  // namespace specula::ui

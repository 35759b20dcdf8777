#pragma once
// A recorded session read into memory for the views: one read of every table the views draw,
// so widgets never touch SQLite. No Qt here (tests drive it guiless).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/expected.h"
#include "profiler/session_store.h"

namespace specula::ui {

struct SparseLayout {
  int block_size = 16;   // tokens per KV block (config "kv_block_size")
  int sink_blocks = 0;   // first blocks every selection keeps (config "sparse.sink_blocks")
  int local_blocks = 0;  // last blocks every selection keeps (config "sparse.local_blocks")
  std::vector<int> anchors;  // configured anchor layers, if any
};

struct SessionData {
  std::string path;
  profiler::SessionInfo info;
  SparseLayout sparse;
  std::vector<profiler::RoundRow> rounds;                                  // by round
  std::map<int64_t, std::vector<profiler::DraftNodeRow>> draft_nodes;      // round -> nodes
  std::map<int64_t, std::vector<profiler::LayerSelectionRow>> selections;  // round -> rows
  std::vector<FfnStatsEvent> ffn;
  std::vector<MoeStatsEvent> moe;
  std::vector<profiler::NvtxRange> nvtx;
  std::vector<profiler::KernelRow> kernels;
  std::vector<std::pair<std::string, double>> metrics;

  int layer_count() const;  // 1 + the highest layer seen in selections, FFN or MoE stats
  const profiler::RoundRow* round(int64_t round) const;
  // Blocks per KV head of a round's selections: ceil(context / block size), when it divides the
  // recorded total (block id = head * blocks + block); else the total itself (one flat head).
  int64_t blocks_per_head(int64_t round, int64_t total_blocks) const;
};

// Reads the session at path (validated by the profiler's reader). Errors name the file.
Expected<SessionData> load_session_data(const std::string& path);

}  // namespace specula::ui

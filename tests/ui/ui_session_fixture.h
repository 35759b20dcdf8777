#pragma once
// Small sessions with known contents for the UI tests, written through the SessionStore API:
// 8 rounds of a branching draft tree (root children 0 and 1; 0 -> 2 -> 4, 1 -> 3), 6 layers
// with anchors 0 and 3 (the others reuse), per-query block selections over 2 KV heads, FFN and
// MoE statistics, NVTX phases and kernels on two streams. The committed copies in
// tests/data/sessions/ are checked against this generator (ui_fixture_test.cpp), and
// SPECULA_REGENERATE_FIXTURES=1 rewrites them.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "profiler/session_store.h"

namespace specula::testing {

inline constexpr int kFixtureRounds = 8;
inline constexpr int kFixtureLayers = 6;
inline constexpr int kFixtureHeads = 2;
inline constexpr int kFixtureBlockSize = 16;
inline constexpr int kFixtureSink = 1;
inline constexpr int kFixtureLocal = 2;
inline constexpr int kFixtureKernelsPerLayer = 3;

struct FixtureNode {
  int32_t parent;
  int32_t depth;
};
// node -> (parent, depth); -1 hangs from the committed token.
inline const std::vector<FixtureNode>& fixture_tree() {
  static const std::vector<FixtureNode> tree = {{-1, 1}, {-1, 1}, {0, 2}, {1, 2}, {2, 3}};
  return tree;
}
inline int fixture_accepted(int64_t round) { return static_cast<int>(round % 4); }  // 0..3 along 0 -> 2 -> 4
inline bool fixture_on_path(int node) { return node == 0 || node == 2 || node == 4; }
inline int64_t fixture_context(int64_t round) { return 200 + 8 * round; }
inline int64_t fixture_blocks(int64_t round) {
  return (fixture_context(round) + kFixtureBlockSize - 1) / kFixtureBlockSize;
}
inline int fixture_anchor(int layer) { return layer < 3 ? 0 : 3; }

// Blocks (within one head) the query of `node` reads at an anchor layer: sink, local, and three
// middle blocks that drift with the node's depth, so overlap falls with tree distance.
inline std::vector<int32_t> fixture_blocks_for(int64_t round, int anchor_layer, int depth) {
  const int64_t nb = fixture_blocks(round);
  std::set<int32_t> blocks = {0, static_cast<int32_t>(nb - 2), static_cast<int32_t>(nb - 1)};
  const int64_t middle = nb - kFixtureSink - kFixtureLocal;
  for (int i = 0; i < 3; ++i) {
    blocks.insert(static_cast<int32_t>(kFixtureSink + (anchor_layer * 2 + depth + i) % middle));
  }
  return {blocks.begin(), blocks.end()};
}

inline std::vector<uint8_t> fixture_bits(const std::vector<int32_t>& per_head, int64_t nb) {
  std::vector<int32_t> ids;
  for (int h = 0; h < kFixtureHeads; ++h) {
    for (int32_t b : per_head) ids.push_back(static_cast<int32_t>(h * nb + b));
  }
  return pack_block_bits(ids, static_cast<int32_t>(kFixtureHeads * nb));
}

inline std::string fixture_kernel_name(int k) {
  static const char* names[] = {"void gemv_q4<128>(const block_q4_1*, const float*, float*, int)",
                                "void tree_attention<64, 8>(const __nv_bfloat16*, int)", "rms_norm_kernel"};
  return names[k % 3];
}

// Writes the fixture to path; returns an error message or "".
inline std::string write_fixture_session(const std::string& path, bool with_kernels = true) {
  auto created = profiler::SessionStore::create(path, {.overwrite = true});
  if (!created) return created.error().message;
  profiler::SessionStore& store = *created;
  profiler::SessionInfo info;
  info.start_ns = 1'000'000'000;
  info.wall_start_ns = 1'700'000'000'000'000'000;
  info.config_json = R"({"command":"generate","drafter":"ngram","tree":"static:2,1,1","kv_block_size":16,)"
                     R"("sparse":{"preset":"sa-reuse","attention":true,"sink_blocks":1,"local_blocks":2,)"
                     R"("anchors":[0,3],"query_mode":"per-query"}})";
  info.model_name = "fixture-llama";
  info.model_sha256 = std::string(64, 'f');
  info.architecture = "llama";
  info.backend = with_kernels ? "cuda" : "cpu";
  info.device = with_kernels ? "NVIDIA H100 80GB HBM3" : "cpu";
  info.version = "0.1.0";
  info.level = "full";
  if (Status s = store.write_session(info); !s) return s.error().message;
  int64_t t = info.start_ns + 100'000;
  std::vector<profiler::KernelActivity> kernels;
  std::vector<std::string> kernel_names;  // KernelActivity holds views
  kernel_names.reserve(kFixtureRounds * kFixtureLayers * kFixtureKernelsPerLayer);
  int64_t correlation = 1;
  for (int64_t round = 0; round < kFixtureRounds; ++round) {
    profiler::SessionBatch batch;
    const int accepted = fixture_accepted(round);
    const int64_t nb = fixture_blocks(round);
    profiler::RoundRow r;
    r.round = round;
    r.start_ns = t;
    r.speculative = true;
    r.context_len = fixture_context(round);
    r.drafter = "ngram";
    r.tree_nodes = static_cast<int32_t>(fixture_tree().size());
    r.tree_depth = 3;
    r.accepted_length = accepted + 1;
    r.next_token = 7;
    r.emitted = accepted + 1;
    for (int i = 0; i < accepted; ++i) r.tokens.push_back(100 + 2 * i);
    r.tokens.push_back(7);
    r.rollback_tokens = r.tree_nodes - accepted;
    r.rejected_kv_bytes = r.rollback_tokens * 4096;
    for (size_t n = 0; n < fixture_tree().size(); ++n) {
      const auto& node = fixture_tree()[n];
      profiler::DraftNodeRow d;
      d.round = round;
      d.node = static_cast<int32_t>(n);
      d.token = static_cast<int32_t>(100 + n);
      d.parent = node.parent;
      d.depth = node.depth;
      d.draft_prob = 0.9f - 0.15f * static_cast<float>(n);
      const int path_index = n == 0 ? 0 : n == 2 ? 1 : n == 4 ? 2 : -1;
      d.visited = path_index >= 0 ? path_index <= accepted : node.depth == 1 && accepted == 0;
      d.accepted = path_index >= 0 && path_index < accepted;
      if (d.visited) d.target_prob = d.accepted ? 0.8f : 0.1f;
      batch.draft_nodes.push_back(d);
    }
    int64_t lt = t + 20'000;
    for (int layer = 0; layer < kFixtureLayers; ++layer) {
      const bool reuse = fixture_anchor(layer) != layer;
      LayerSelectionEvent whole;
      whole.round = round;
      whole.layer = layer;
      whole.mode = reuse ? SelectionMode::kReuse : SelectionMode::kRefresh;
      whole.anchor_layer = reuse ? fixture_anchor(layer) : -1;
      whole.total_blocks = static_cast<int32_t>(kFixtureHeads * nb);
      std::set<int32_t> all;
      for (size_t n = 0; n < fixture_tree().size(); ++n) {
        const auto blocks = fixture_blocks_for(round, fixture_anchor(layer), fixture_tree()[n].depth);
        all.insert(blocks.begin(), blocks.end());
        profiler::LayerSelectionRow q{whole, 0, std::nullopt, std::nullopt};
        q.selection.query = static_cast<int32_t>(n);
        q.selection.block_bits = fixture_bits(blocks, nb);
        q.selected_blocks = count_block_bits(q.selection.block_bits);
        batch.selections.push_back(q);
      }
      whole.block_bits = fixture_bits({all.begin(), all.end()}, nb);
      batch.selections.push_back({whole, count_block_bits(whole.block_bits), std::nullopt, std::nullopt});
      batch.ffn_stats.push_back({round, layer, 512 + 256 * (layer % 3) - static_cast<int32_t>(round * 16), 2048,
                                 layer == 5 && round % 2 == 1});
      batch.moe_stats.push_back({round, layer, 8, {0, 2, 5, 7}, layer % 2 == 0 ? std::vector<int32_t>{3} : std::vector<int32_t>{}});
      batch.nvtx.push_back({lt, lt + 9'000, "layer/L" + std::to_string(layer), 1, round});
      if (with_kernels) {
        for (int k = 0; k < kFixtureKernelsPerLayer; ++k) {
          kernel_names.push_back(fixture_kernel_name(k));
          profiler::KernelActivity a;
          a.start = lt + 500 + k * 2'800;
          a.end = a.start + 1'000 + 600 * k;
          a.stream_id = k == 1 ? 13 : 7;
          a.correlation_id = correlation++;
          a.demangled_name = kernel_names.back();
          a.grid[0] = 132;
          a.block[0] = 128 * (k + 1);
          a.registers_per_thread = 32 + 8 * k;
          a.static_shared_memory = 1024 * k;
          a.dynamic_shared_memory = 16384 * k;
          kernels.push_back(a);
        }
      }
      lt += 10'000;
    }
    batch.nvtx.push_back({t, t + 15'000, "draft", 1, round});
    batch.nvtx.push_back({t + 18'000, lt + 2'000, "verify", 1, round});
    batch.nvtx.push_back({lt + 3'000, lt + 6'000, "accept", 1, round});
    batch.nvtx.push_back({lt + 7'000, lt + 9'000, "commit", 1, round});
    r.end_ns = lt + 10'000;
    batch.round = r;
    if (Status s = store.write_batch(batch); !s) return s.error().message;
    t = r.end_ns + 5'000;
  }
  if (with_kernels) {
    if (Status s = store.write_kernels(kernels); !s) return s.error().message;
  }
  if (Status s = store.finish_session(t, R"({"tokens_per_s": 12.5, "mean_accepted_length": 2.5})"); !s) {
    return s.error().message;
  }
  if (Status s = store.close(); !s) return s.error().message;
  return {};
}

}  // namespace specula::testing

#include "ui/models/session_data.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace specula::ui {
namespace {

SparseLayout sparse_layout_from(const std::string& config_json) {
  SparseLayout layout;
  const auto config = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return layout;
  if (auto it = config.find("kv_block_size"); it != config.end() && it->is_number_integer()) {
    layout.block_size = std::max(1, it->get<int>());
  }
  if (auto sparse = config.find("sparse"); sparse != config.end() && sparse->is_object()) {
    if (!sparse->value("attention", false)) return layout;
    layout.sink_blocks = std::max(0, sparse->value("sink_blocks", 0));
    layout.local_blocks = std::max(0, sparse->value("local_blocks", 0));
    if (auto a = sparse->find("anchors"); a != sparse->end() && a->is_array()) {
      for (const auto& v : *a) {
        if (v.is_number_integer()) layout.anchors.push_back(v.get<int>());
      }
    }
  }
  return layout;
}

template <class T>
Status take(Expected<T> value, T& into, const std::string& path, const char* what) {
  if (!value) return make_error(path + ": reading " + what + ": " + value.error().message);
  into = std::move(*value);
  return {};
}

}  // namespace

int SessionData::layer_count() const {
  int32_t top = -1;
  for (const auto& [round, rows] : selections) {
    for (const auto& r : rows) top = std::max(top, r.selection.layer);
  }
  for (const auto& f : ffn) top = std::max(top, f.layer);
  for (const auto& m : moe) top = std::max(top, m.layer);
  return top + 1;
}

const profiler::RoundRow* SessionData::round(int64_t round) const {
  auto it = std::lower_bound(rounds.begin(), rounds.end(), round,
                             [](const profiler::RoundRow& r, int64_t value) { return r.round < value; });
  return it != rounds.end() && it->round == round ? &*it : nullptr;
}

int64_t SessionData::blocks_per_head(int64_t round_id, int64_t total_blocks) const {
  const profiler::RoundRow* r = round(round_id);
  if (r == nullptr || total_blocks <= 0) return total_blocks;
  const int64_t per_head = (r->context_len + sparse.block_size - 1) / sparse.block_size;
  if (per_head <= 0 || total_blocks % per_head != 0) return total_blocks;
  return per_head;
}

Expected<SessionData> load_session_data(const std::string& path) {
  auto store = profiler::open_session(path);
  if (!store) return store.error();
  SessionData data;
  data.path = path;
  if (Status s = take(store->read_session(), data.info, path, "the session row"); !s) return s.error();
  if (Status s = take(store->read_rounds(), data.rounds, path, "rounds"); !s) return s.error();
  for (const auto& r : data.rounds) {
    auto nodes = store->read_draft_nodes(r.round);
    if (!nodes) return make_error(path + ": reading draft nodes of round " + std::to_string(r.round) + ": " +
                                  nodes.error().message);
    if (!nodes->empty()) data.draft_nodes[r.round] = std::move(*nodes);
    auto rows = store->read_layer_selections(r.round);
    if (!rows) return make_error(path + ": reading selections of round " + std::to_string(r.round) + ": " +
                                 rows.error().message);
    if (!rows->empty()) data.selections[r.round] = std::move(*rows);
  }
  if (Status s = take(store->read_ffn_stats(), data.ffn, path, "FFN statistics"); !s) return s.error();
  if (Status s = take(store->read_moe_stats(), data.moe, path, "MoE statistics"); !s) return s.error();
  if (Status s = take(store->read_nvtx(), data.nvtx, path, "NVTX ranges"); !s) return s.error();
  if (Status s = take(store->read_kernels(), data.kernels, path, "kernels"); !s) return s.error();
  if (Status s = take(store->read_metrics(), data.metrics, path, "metrics"); !s) return s.error();
  data.sparse = sparse_layout_from(data.info.config_json);
  return data;
}

}  // namespace specula::ui

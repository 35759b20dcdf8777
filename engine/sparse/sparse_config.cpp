#include "engine/sparse/sparse_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

namespace specula {

std::string_view to_string(QueryMode mode) {
  switch (mode) {
    case QueryMode::kFirst: return "first";
    case QueryMode::kPerQuery: return "per-query";
    case QueryMode::kGroupUnion: return "group-union";
    case QueryMode::kGroupShared: return "group-shared";
  }
  return "first";
}

Expected<QueryMode> parse_query_mode(std::string_view name) {
  for (QueryMode m : {QueryMode::kFirst, QueryMode::kPerQuery, QueryMode::kGroupUnion, QueryMode::kGroupShared}) {
    if (name == to_string(m)) return m;
  }
  return make_error("unknown query mode '" + std::string(name) + "' (first, per-query, group-union, group-shared)");
}

bool SparseConfig::reuses(int layer) const {
  if (anchors.empty() || layer == 0) return false;
  return std::find(anchors.begin(), anchors.end(), layer) == anchors.end();
}

int SparseConfig::anchor_for(int layer) const {
  int best = 0;
  for (int a : anchors) {
    if (a <= layer && a > best) best = a;
  }
  return reuses(layer) ? best : layer;
}

nlohmann::json SparseConfig::to_json() const {
  return {{"preset", preset},
          {"attention", attention},
          {"dense_below", dense_below},
          {"eta", eta},
          {"sink_blocks", sink_blocks},
          {"local_blocks", local_blocks},
          {"query_mode", std::string(to_string(query_mode))},
          {"order", std::string(specula::to_string(order))},
          {"group_size", group_size},
          {"scoring", scoring},
          {"group_score", group_score},
          {"dense_layers", dense_layers},
          {"successor_blocks", successor_blocks},
          {"anchors", anchors},
          {"calibration", calibration},
          {"ffn", ffn},
          {"ffn_threshold", ffn_threshold},
          {"ffn_union", ffn_union},
          {"moe", moe},
          {"moe_skip_budget", moe_skip_budget},
          {"moe_calibration", moe_calibration}};
}

Expected<SparseConfig> sparse_preset(std::string_view name) {
  SparseConfig c;
  c.preset = std::string(name);
  if (name == "strict") return c;
  if (name == "sa" || name == "sa-reuse" || name == "hybrid" || name == "ssv-exact" || name == "ssv-approx") {
    c.attention = true;
  }
  if (name == "sa-reuse" || name == "hybrid") {
    // Every other layer refreshes until a calibration file names the anchors.
    for (int l = 0; l < 256; l += 2) c.anchors.push_back(l);
  }
  if (name == "ssv-exact") c.query_mode = QueryMode::kGroupUnion;
  if (name == "ssv-approx") c.query_mode = QueryMode::kGroupShared;
  if (name == "sffn" || name == "hybrid") c.ffn = true;
  if (name == "smoe" || name == "hybrid") {
    c.moe = name == "smoe";
    c.moe_skip_budget = name == "smoe" ? 1 : 0;
  }
  if (c.strict() && name != "strict") {
    return make_error("unknown sparse preset '" + std::string(name) +
                      "' (strict, sa, sa-reuse, sffn, smoe, hybrid, ssv-exact, ssv-approx)");
  }
  return c;
}

Expected<SparseConfig> sparse_config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("sparse config: expected a JSON object");
  auto c = sparse_preset(j.value("preset", std::string("strict")));
  if (!c) return c.error();
  static const std::set<std::string> known = {"preset", "attention", "dense_below", "eta", "sink_blocks",
                                              "local_blocks", "query_mode", "order", "group_size", "scoring", "group_score", "dense_layers", "successor_blocks",
                                              "anchors",
                                              "calibration", "ffn", "ffn_threshold", "ffn_union", "moe",
                                              "moe_skip_budget", "moe_calibration"};
  try {
    for (const auto& [key, value] : j.items()) {
      if (!known.count(key)) return make_error("sparse config: unknown key '" + key + "'");
    }
    c->attention = j.value("attention", c->attention);
    c->dense_below = j.value("dense_below", c->dense_below);
    c->eta = j.value("eta", c->eta);
    c->sink_blocks = j.value("sink_blocks", c->sink_blocks);
    c->local_blocks = j.value("local_blocks", c->local_blocks);
    if (j.contains("query_mode")) {
      auto m = parse_query_mode(j["query_mode"].get<std::string>());
      if (!m) return make_error("sparse config: " + m.error().message);
      c->query_mode = *m;
    }
    if (j.contains("order")) {
      auto o = parse_traversal_order(j["order"].get<std::string>());
      if (!o) return make_error("sparse config: " + o.error().message);
      c->order = *o;
    }
    c->group_size = j.value("group_size", c->group_size);
    c->scoring = j.value("scoring", c->scoring);
    if (c->scoring != "quest" && c->scoring != "exact") {
      return make_error("sparse config: scoring must be \"quest\" or \"exact\", not \"" + c->scoring + "\"");
    }
    c->group_score = j.value("group_score", c->group_score);
    if (c->group_score != "logit-sum" && c->group_score != "prob-sum" && c->group_score != "prob-max") {
      return make_error("sparse config: group_score must be \"logit-sum\", \"prob-sum\" or \"prob-max\", not \"" +
                        c->group_score + "\"");
    }
    c->dense_layers = j.value("dense_layers", c->dense_layers);
    c->successor_blocks = j.value("successor_blocks", c->successor_blocks);
    if (j.contains("anchors")) c->anchors = j["anchors"].get<std::vector<int>>();
    c->calibration = j.value("calibration", c->calibration);
    c->ffn = j.value("ffn", c->ffn);
    c->ffn_threshold = j.value("ffn_threshold", c->ffn_threshold);
    c->ffn_union = j.value("ffn_union", c->ffn_union);
    c->moe = j.value("moe", c->moe);
    c->moe_skip_budget = j.value("moe_skip_budget", c->moe_skip_budget);
    c->moe_calibration = j.value("moe_calibration", c->moe_calibration);
  } catch (const nlohmann::json::exception& e) {
    return make_error(std::string("sparse config: ") + e.what());
  }
  return c;
}

Expected<SparseConfig> load_sparse_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error(path + ": cannot open the sparse config");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return make_error(path + ": not valid JSON");
  auto c = sparse_config_from_json(j);
  if (!c) return make_error(path + ": " + c.error().message);
  return c;
}

Status validate(const SparseConfig& c, int n_layers, bool moe_model) {
  const auto bad = [](const std::string& what) { return make_error("sparse config: " + what); };
  if (!(c.eta > 0.0 && c.eta <= 1.0)) return bad("eta " + std::to_string(c.eta) + " is outside (0, 1]");
  if (c.dense_below < 0) return bad("dense_below must be >= 0 tokens");
  if (c.sink_blocks < 0 || c.local_blocks < 1) return bad("sink_blocks must be >= 0 and local_blocks >= 1");
  if (c.group_size < 1 || c.group_size > 64) return bad("group_size must be in 1..64");
  if (c.successor_blocks < 0 || c.successor_blocks > 8) return bad("successor_blocks must be in 0..8");
  if (c.dense_layers < 0 || c.dense_layers > n_layers) {
    return bad("dense_layers " + std::to_string(c.dense_layers) + " is outside 0.." + std::to_string(n_layers));
  }
  if (!(c.ffn_threshold >= 0.0) || c.ffn_threshold > 100.0) return bad("ffn_threshold must be in [0, 100]");
  for (int a : c.anchors) {
    if (a < 0 || a >= n_layers) {
      // Presets list anchors for up to 256 layers; only explicit ones outside the model are errors.
      if (c.calibration.empty() && (c.preset == "sa-reuse" || c.preset == "hybrid") && a >= n_layers) continue;
      return bad("anchor layer " + std::to_string(a) + " is outside the model's " + std::to_string(n_layers) + " layers");
    }
  }
  if ((c.moe || c.moe_skip_budget > 0) && !moe_model) {
    return bad("MoE expert skipping was asked for, but this model has no MoE layers");
  }
  if (c.moe_skip_budget < 0) return bad("moe_skip_budget must be >= 0");
  if (c.moe && c.moe_skip_budget > 0 && c.moe_thresholds.empty()) {
    return bad("MoE expert skipping needs per-layer thresholds: run specula-cli calibrate-moe and name its file "
               "as moe_calibration in --sparse-config");
  }
  return {};
}

int64_t kept_blocks(const SparseConfig& c, int64_t context_len, int block_size) {
  const int64_t B = block_size;
  const int64_t total = (context_len + B - 1) / B;
  if (!c.attention || context_len < c.dense_below) return total;
  const double kept_tokens =
      static_cast<double>(c.dense_below) + c.eta * static_cast<double>(context_len - c.dense_below);
  const auto k = static_cast<int64_t>(std::ceil(kept_tokens / static_cast<double>(B)));
  return std::min(total, std::max<int64_t>(k, int64_t{c.sink_blocks} + c.local_blocks));
}

}  // namespace specula

#include "engine/model/moe_calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>

namespace specula {

namespace {
constexpr const char* kKind = "specula-moe-thresholds";
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

MoeRatioCollector::MoeRatioCollector(int n_layers, int experts_per_token)
    : k_(experts_per_token),
      ratios_(static_cast<size_t>(n_layers),
              std::vector<std::vector<double>>(static_cast<size_t>(std::max(experts_per_token - 1, 0)))) {}

void MoeRatioCollector::add(const MoeLayerStats& layer) {
  if (layer.layer < 0 || static_cast<size_t>(layer.layer) >= ratios_.size()) return;
  auto& rows = ratios_[static_cast<size_t>(layer.layer)];
  for (const MoeTokenRouting& t : layer.tokens) {
    if (static_cast<int>(t.weights.size()) != k_) continue;
    for (int s = 1; s < k_; ++s) rows[static_cast<size_t>(s - 1)].push_back(skip_ratio(t.weights, s));
    ++tokens_;
  }
}

void MoeRatioCollector::add(const MoeForwardStats& forward) {
  for (const MoeLayerStats& layer : forward.layers) add(layer);
}

std::vector<std::vector<double>> MoeRatioCollector::medians() const {
  std::vector<std::vector<double>> out(ratios_.size());
  for (size_t l = 0; l < ratios_.size(); ++l) {
    if (ratios_[l].empty() || ratios_[l][0].empty()) continue;
    for (const auto& values : ratios_[l]) out[l].push_back(median(values));
  }
  return out;
}

nlohmann::json MoeThresholds::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : thresholds) rows.push_back(row.empty() ? nlohmann::json(nullptr) : nlohmann::json(row));
  return {
      {"kind", kKind},
      {"version", 1},
      {"model_name", model_name},
      {"model_sha256", model_sha256},
      {"n_layers", n_layers},
      {"n_experts", n_experts},
      {"experts_per_token", experts_per_token},
      {"tokens", tokens},
      {"ratio", "skipped routing mass / kept routing mass, the s lowest-weight experts skipped (engine/model/moe.h)"},
      {"thresholds", rows},
      {"settings", settings}};
}

Expected<MoeThresholds> calibrate_moe(CpuTransformer& transformer, std::span<const std::vector<int32_t>> sequences,
                                      int64_t chunk) {
  const ModelConfig& c = transformer.config();
  if (!c.is_moe()) return make_error("calibrate-moe: " + c.name + " has no MoE layers");
  if (chunk <= 0) return make_error("calibrate-moe: chunk must be positive");
  const int k = static_cast<int>(c.n_experts_used);
  if (k < 2)
    return make_error("calibrate-moe: " + c.name + " routes each token to one expert: there is nothing to skip");
  MoeRatioCollector collector(static_cast<int>(c.n_layers), k);
  MoeForwardStats stats;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  int64_t total = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto& tokens = sequences[i];
    if (tokens.empty()) continue;
    if (static_cast<int64_t>(tokens.size()) > c.context_length) {
      return make_error("calibrate-moe: sequence " + std::to_string(i + 1) + " has " + std::to_string(tokens.size()) +
                        " tokens, more than the context length " + std::to_string(c.context_length));
    }
    auto kv = transformer.make_kv_cache(16, static_cast<int64_t>(tokens.size()));
    if (!kv) return kv.error();
    for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(chunk)) {
      const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(chunk));
      std::vector<int32_t> positions(n);
      std::iota(positions.begin(), positions.end(), static_cast<int32_t>(begin));
      stats.clear();
      const ForwardContext context{nullptr, -1, nullptr, {}, nullptr, &stats};
      if (Status s = transformer.forward(std::span(tokens).subspan(begin, n), positions, nullptr, *kv, logits,
                                         LogitRows::Last, &context);
          !s) {
        return make_error("calibrate-moe: sequence " + std::to_string(i + 1) + ": " + s.error().message);
      }
      kv->commit_all();
      collector.add(stats);
    }
    total += static_cast<int64_t>(tokens.size());
  }
  if (total == 0) return make_error("calibrate-moe: no calibration tokens");
  MoeThresholds t;
  t.model_name = c.name;
  t.n_layers = static_cast<int>(c.n_layers);
  t.n_experts = static_cast<int>(c.n_experts);
  t.experts_per_token = k;
  t.tokens = total;
  t.thresholds = collector.medians();
  return t;
}

Status save_moe_thresholds(const MoeThresholds& t, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return make_error(path + ": cannot write the MoE thresholds file");
  out << t.to_json().dump(2) << "\n";
  if (!out) return make_error(path + ": write failed");
  return {};
}

Expected<MoeThresholds> load_moe_thresholds(const std::string& path, const std::string& model_sha256,
                                            const ModelConfig& config) {
  std::ifstream in(path);
  if (!in) return make_error(path + ": cannot open the MoE thresholds file");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != kKind) {
    return make_error(path + ": not a Specula MoE thresholds file (from specula-cli calibrate-moe)");
  }
  MoeThresholds t;
  try {
    if (j.at("version").get<int>() != 1) return make_error(path + ": unsupported version " + j.at("version").dump());
    t.model_name = j.at("model_name").get<std::string>();
    t.model_sha256 = j.at("model_sha256").get<std::string>();
    t.n_layers = j.at("n_layers").get<int>();
    t.n_experts = j.at("n_experts").get<int>();
    t.experts_per_token = j.at("experts_per_token").get<int>();
    t.tokens = j.at("tokens").get<int64_t>();
    t.settings = j.value("settings", nlohmann::json::object());
    const auto& rows = j.at("thresholds");
    if (!rows.is_array()) return make_error(path + ": thresholds is not an array");
    for (const auto& row : rows) {
      t.thresholds.push_back(row.is_null() ? std::vector<double>{} : row.get<std::vector<double>>());
    }
  } catch (const nlohmann::json::exception& e) {
    return make_error(path + ": " + e.what());
  }
  if (t.model_sha256 != model_sha256 || t.n_layers != config.n_layers || t.n_experts != config.n_experts ||
      t.experts_per_token != config.n_experts_used) {
    return make_error(path + ": calibrated for another model (" + t.model_name + ", sha256 " +
                      t.model_sha256.substr(0, 12) + "..., " + std::to_string(t.n_layers) + " layers, " +
                      std::to_string(t.n_experts) + " experts, top-" + std::to_string(t.experts_per_token) +
                      "); recalibrate with specula-cli calibrate-moe");
  }
  if (static_cast<int>(t.thresholds.size()) != t.n_layers) {
    return make_error(path + ": " + std::to_string(t.thresholds.size()) + " threshold rows for " +
                      std::to_string(t.n_layers) + " layers");
  }
  for (size_t l = 0; l < t.thresholds.size(); ++l) {
    const auto& row = t.thresholds[l];
    if (row.size() != static_cast<size_t>(t.experts_per_token - 1)) {
      return make_error(path + ": layer " + std::to_string(l) + " has " + std::to_string(row.size()) +
                        " thresholds, expected " + std::to_string(t.experts_per_token - 1) + " (one per skip count)");
    }
    for (double tau : row) {
      if (!std::isfinite(tau) || tau < 0) {
        return make_error(path + ": layer " + std::to_string(l) + ": threshold " + std::to_string(tau) +
                          " is not a finite non-negative number");
      }
    }
  }
  return t;
}

}  // namespace specula

#pragma once
// Sparse-MoE calibration (seed 000, section 3.5; the skip rule is in engine/model/moe.h): route
// calibration tokens through the model, collect r_s for every MoE layer and every s = 1..k-1,
// and keep the median as tau_{l,s}. The result is a JSON file bound to the model by its sha256
// (engine/model/model_identity.h):
//   {"kind": "specula-moe-thresholds", "version": 1, "model_name": ..., "model_sha256": ...,
//    "n_layers": L, "n_experts": E, "experts_per_token": k, "tokens": N,
//    "ratio": "skipped routing mass / kept routing mass (engine/model/moe.h)",
//    "thresholds": [[tau_1, ..., tau_{k-1}] for an MoE layer, null for a dense one; L entries],
//    "settings": {how it was measured}}
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "engine/core/expected.h"
#include "engine/model/cpu_transformer.h"
#include "engine/model/moe.h"

namespace specula {

// Median of `values` (the mean of the two middle ones for an even count); NaN when empty.
double median(std::vector<double> values);

// Accumulates r_s of every routed token, per layer and skip size.
class MoeRatioCollector {
 public:
  MoeRatioCollector(int n_layers, int experts_per_token);
  void add(const MoeLayerStats& layer);
  void add(const MoeForwardStats& forward);
  // tau[layer][s - 1]; an empty row for a layer no token was routed in.
  std::vector<std::vector<double>> medians() const;
  int64_t tokens() const { return tokens_; }  // tokens seen, summed over layers

 private:
  int k_;
  std::vector<std::vector<std::vector<double>>> ratios_;  // [layer][s - 1][token]
  int64_t tokens_ = 0;
};

struct MoeThresholds {
  std::string model_name;
  std::string model_sha256;
  int n_layers = 0;
  int n_experts = 0;
  int experts_per_token = 0;
  int64_t tokens = 0;                           // calibration tokens per MoE layer
  std::vector<std::vector<double>> thresholds;  // [layer][s - 1]; empty rows for dense layers
  nlohmann::json settings = nlohmann::json::object();
  nlohmann::json to_json() const;
};

// Runs each token sequence as a prefill (chunks of at most `chunk` tokens; a sequence longer
// than the model's context is refused) and collects the thresholds. The model must be MoE.
Expected<MoeThresholds> calibrate_moe(CpuTransformer& transformer, std::span<const std::vector<int32_t>> sequences,
                                      int64_t chunk = 256);

Status save_moe_thresholds(const MoeThresholds& thresholds, const std::string& path);
// Reads a thresholds file and checks it was made for this model (sha256, layers, experts, k)
// and that every MoE layer has k - 1 finite, non-negative thresholds.
Expected<MoeThresholds> load_moe_thresholds(const std::string& path, const std::string& model_sha256,
                                            const ModelConfig& config);

}  // namespace specula

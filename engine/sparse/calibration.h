#pragma once
// Inter-layer reuse calibration (seed 000, section 3.3): run calibration prompts with sparse
// attention refreshing at every layer, record each layer's whole-tree block selection per round,
// and measure the Jaccard similarity of every layer's selection with the previous layer's. The
// anchors are layer 0 plus the N - 1 layers least similar to the layer before them; the others
// reuse the nearest earlier anchor. The result is a JSON file bound to the model by its sha256.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/expected.h"
#include "engine/observer/observer.h"

namespace specula {

// Collects whole-tree selections (query -1, group -1) and averages adjacent-layer Jaccard.
class LayerSimilarity final : public Observer {
 public:
  explicit LayerSimilarity(int n_layers) : sum_(static_cast<size_t>(n_layers), 0.0), count_(static_cast<size_t>(n_layers), 0) {}
  ObserveLevel level() const override { return ObserveLevel::kSummary; }
  void on_event(const Event& event) override;
  // Mean Jaccard of layer l with layer l - 1 (entry 0 is 0: layer 0 has no predecessor);
  // -1 where no round compared the pair.
  std::vector<double> mean_jaccard_prev() const;
  int64_t rounds() const { return rounds_; }

 private:
  std::vector<double> sum_;
  std::vector<int64_t> count_;
  int64_t round_ = -1;
  int64_t rounds_ = 0;
  int32_t prev_layer_ = -1;
  std::vector<uint8_t> prev_bits_;
};

// Layer 0 and the n_anchors - 1 layers with the lowest mean Jaccard to their predecessor
// (layers never compared count as dissimilar), ascending.
std::vector<int> pick_anchors(const std::vector<double>& jaccard_prev, int n_anchors);

struct Calibration {
  std::string model_name;
  std::string model_sha256;
  int n_layers = 0;
  std::vector<double> jaccard_prev;
  std::vector<int> anchors;
  nlohmann::json settings;  // how it was measured (prompts, eta, block size)
  nlohmann::json to_json() const;
};

struct Model;

struct CalibrationOptions {
  int anchors = 15;        // anchor layers to pick, layer 0 included
  double eta = 0.2;        // kept fraction of blocks while measuring
  int max_tokens = 32;     // generated per prompt
  int kv_block_size = 16;  // tokens per KV block
  int threads = 0;         // CPU threads (0 = all cores)
};

// Runs every prompt (user text, chat template applied) with SA refreshing at every layer and an
// n-gram drafter, then picks the anchors. `progress(done, total)` follows each finished prompt;
// `keep_going` is asked at every generated token, and false stops the run with an error that
// says it was cancelled. settings gets prompts, rounds, eta, kv_block_size and max_tokens.
Expected<Calibration> run_calibration(const Model& model, const std::string& model_sha256,
                                      std::span<const std::string> prompts, const CalibrationOptions& options,
                                      const std::function<void(int done, int total)>& progress = {},
                                      const std::function<bool()>& keep_going = {});

Status save_calibration(const Calibration& c, const std::string& path);
// Reads a calibration file and checks it was made for this model (sha256 and layer count).
Expected<Calibration> load_calibration(const std::string& path, const std::string& model_sha256, int n_layers);

}  // namespace specula

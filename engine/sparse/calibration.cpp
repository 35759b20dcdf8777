#include "engine/sparse/calibration.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "engine/model/loader.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"

namespace specula {

void LayerSimilarity::on_event(const Event& event) {
  const auto* s = std::get_if<LayerSelectionEvent>(&event);
  if (!s || s->query >= 0 || s->group >= 0) return;
  if (s->round != round_) {
    round_ = s->round;
    ++rounds_;
    prev_layer_ = -1;
  }
  if (prev_layer_ == s->layer - 1 && s->layer < static_cast<int32_t>(sum_.size()) && prev_bits_.size() == s->block_bits.size()) {
    int64_t inter = 0, uni = 0;
    for (size_t i = 0; i < prev_bits_.size(); ++i) {
      inter += __builtin_popcount(prev_bits_[i] & s->block_bits[i]);
      uni += __builtin_popcount(prev_bits_[i] | s->block_bits[i]);
    }
    if (uni > 0) {
      sum_[static_cast<size_t>(s->layer)] += static_cast<double>(inter) / static_cast<double>(uni);
      ++count_[static_cast<size_t>(s->layer)];
    }
  }
  prev_layer_ = s->layer;
  prev_bits_ = s->block_bits;
}

std::vector<double> LayerSimilarity::mean_jaccard_prev() const {
  std::vector<double> out(sum_.size(), -1.0);
  if (!out.empty()) out[0] = 0.0;
  for (size_t l = 1; l < sum_.size(); ++l) {
    if (count_[l] > 0) out[l] = sum_[l] / static_cast<double>(count_[l]);
  }
  return out;
}

std::vector<int> pick_anchors(const std::vector<double>& jaccard_prev, int n_anchors) {
  const int n = static_cast<int>(jaccard_prev.size());
  std::vector<int> rest;
  for (int l = 1; l < n; ++l) rest.push_back(l);
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return jaccard_prev[a] < jaccard_prev[b]; });
  std::vector<int> anchors = {0};
  for (int i = 0; i < n_anchors - 1 && i < static_cast<int>(rest.size()); ++i) anchors.push_back(rest[static_cast<size_t>(i)]);
  std::sort(anchors.begin(), anchors.end());
  return anchors;
}

Expected<Calibration> run_calibration(const Model& model, const std::string& model_sha256,
                                      std::span<const std::string> prompts, const CalibrationOptions& options,
                                      const std::function<void(int done, int total)>& progress,
                                      const std::function<bool()>& keep_going) {
  const int n_layers = static_cast<int>(model.config.n_layers);
  if (options.anchors < 1 || options.anchors > n_layers) {
    return make_error("calibration: " + std::to_string(options.anchors) + " anchors for a model of " +
                      std::to_string(n_layers) + " layers");
  }
  if (prompts.empty()) return make_error("calibration: no prompts");
  // Every layer refreshes; sparsity is on from the first token so short prompts select too.
  SpeculativeOptions run_options;
  run_options.max_tokens = options.max_tokens;
  run_options.kv_block_size = options.kv_block_size;
  run_options.controller.enabled = false;
  run_options.sparse = *sparse_preset("sa");
  run_options.sparse.dense_below = 0;
  run_options.sparse.eta = options.eta;
  LayerSimilarity similarity(n_layers);
  run_options.observer = &similarity;
  SpeculativeEngine engine(model, options.threads);
  auto drafter = make_ngram_drafter();
  TokenCallback on_token;
  if (keep_going) on_token = [&keep_going](int32_t, std::string_view) { return keep_going(); };
  const int total = static_cast<int>(prompts.size());
  for (int i = 0; i < total; ++i) {
    if (keep_going && !keep_going()) {
      return make_error("calibration cancelled after " + std::to_string(i) + " of " + std::to_string(total) + " prompts");
    }
    const auto prompt = model.tokenizer.encode_prompt(prompts[static_cast<size_t>(i)], /*chat=*/true);
    auto run = engine.generate(prompt, drafter.get(), run_options, on_token);
    if (!run) return make_error("calibration prompt " + std::to_string(i + 1) + ": " + run.error().message);
    // A stopped prompt measured fewer rounds than asked: the whole result would be off.
    if (keep_going && !keep_going()) {
      return make_error("calibration cancelled after " + std::to_string(i) + " of " + std::to_string(total) + " prompts");
    }
    if (progress) progress(i + 1, total);
  }
  Calibration c;
  c.model_name = model.config.name;
  c.model_sha256 = model_sha256;
  c.n_layers = n_layers;
  c.jaccard_prev = similarity.mean_jaccard_prev();
  // Anchors picked from layers that were never compared would be noise: refuse instead.
  for (int l = 1; l < n_layers; ++l) {
    if (c.jaccard_prev[static_cast<size_t>(l)] < 0) {
      return make_error("layer " + std::to_string(l) + " never dropped a block (the contexts are too short for " +
                        "the budget: more than " + std::to_string(3 * options.kv_block_size) +
                        " tokens are needed); use longer prompts");
    }
  }
  c.anchors = pick_anchors(c.jaccard_prev, options.anchors);
  c.settings = {{"prompts", prompts.size()}, {"rounds", similarity.rounds()}, {"eta", options.eta},
                {"kv_block_size", options.kv_block_size}, {"max_tokens", options.max_tokens}};
  return c;
}

nlohmann::json Calibration::to_json() const {
  return {{"kind", "specula sparse calibration"}, {"version", 1},     {"model_name", model_name},
          {"model_sha256", model_sha256},         {"n_layers", n_layers}, {"jaccard_prev", jaccard_prev},
          {"anchors", anchors},                   {"settings", settings}};
}

Status save_calibration(const Calibration& c, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return make_error(path + ": cannot write the calibration file");
  out << c.to_json().dump(2) << "\n";
  if (!out) return make_error(path + ": write failed");
  return {};
}

Expected<Calibration> load_calibration(const std::string& path, const std::string& model_sha256, int n_layers) {
  std::ifstream in(path);
  if (!in) return make_error(path + ": cannot open the calibration file");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || j.value("kind", "") != "specula sparse calibration") {
    return make_error(path + ": not a Specula calibration file");
  }
  Calibration c;
  try {
    c.model_name = j.at("model_name").get<std::string>();
    c.model_sha256 = j.at("model_sha256").get<std::string>();
    c.n_layers = j.at("n_layers").get<int>();
    c.jaccard_prev = j.at("jaccard_prev").get<std::vector<double>>();
    c.anchors = j.at("anchors").get<std::vector<int>>();
    c.settings = j.value("settings", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    return make_error(path + ": " + e.what());
  }
  if (c.model_sha256 != model_sha256 || c.n_layers != n_layers) {
    return make_error(path + ": calibrated for another model (" + c.model_name + ", sha256 " + c.model_sha256.substr(0, 12) +
                      "..., " + std::to_string(c.n_layers) + " layers); recalibrate with specula-cli calibrate");
  }
  for (int a : c.anchors) {
    if (a < 0 || a >= n_layers) return make_error(path + ": anchor layer " + std::to_string(a) + " is outside the model");
  }
  return c;
}

}  // namespace specula

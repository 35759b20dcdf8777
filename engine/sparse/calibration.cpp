#include "engine/sparse/calibration.h"

#include <algorithm>
#include <fstream>
#include <numeric>

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

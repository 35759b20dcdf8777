#pragma once
// Shared by cpu_transformer_test.cpp and cpu_transformer_slow_test.cpp: the default model,
// the transformers goldens (tools/reference/make_logit_goldens.py) and logit comparisons.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"

namespace specula::testing {

struct GoldenCase {
  std::string name;
  bool long_prompt = false;
  std::vector<int32_t> tokens;
  std::vector<int32_t> greedy;
  std::vector<float> logits;  // (vocab)
};

inline std::filesystem::path default_model_path() { return resolve_model_path("default"); }

inline std::vector<GoldenCase> load_goldens() {
  const std::filesystem::path dir = std::filesystem::path(SPECULA_TEST_DATA_DIR) / "reference";
  std::ifstream json_in(dir / "smollm2_logits.json");
  EXPECT_TRUE(json_in) << "missing " << (dir / "smollm2_logits.json");
  nlohmann::json doc = nlohmann::json::parse(json_in);
  const int64_t vocab = doc["vocab"].get<int64_t>();
  std::ifstream bin(dir / "smollm2_logits.f32", std::ios::binary);
  std::vector<GoldenCase> cases;
  for (const auto& c : doc["cases"]) {
    GoldenCase g;
    g.name = c["name"].get<std::string>();
    g.long_prompt = c["long"].get<bool>();
    g.tokens = c["tokens"].get<std::vector<int32_t>>();
    g.greedy = c["greedy"].get<std::vector<int32_t>>();
    g.logits.resize(static_cast<size_t>(vocab));
    bin.read(reinterpret_cast<char*>(g.logits.data()), static_cast<std::streamsize>(vocab * sizeof(float)));
    EXPECT_TRUE(bin) << "smollm2_logits.f32 too short for case " << g.name;
    cases.push_back(std::move(g));
  }
  return cases;
}

// ||a - b|| / ||b||
inline double relative_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Last-position logits of a causal prefill of `tokens`.
inline std::vector<float> prefill_logits(CpuTransformer& transformer, std::span<const int32_t> tokens) {
  auto kv = transformer.make_kv_cache(16, static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(kv.ok()) << (kv ? "" : kv.error().message);
  std::vector<int32_t> positions(tokens.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<size_t>(transformer.config().vocab_size));
  auto status = transformer.forward(tokens, positions, nullptr, *kv, logits, LogitRows::Last);
  EXPECT_TRUE(status.ok()) << (status ? "" : status.error().message);
  return logits;
}

// The default model, loaded once per test binary; nullptr when it is not downloaded.
inline const Model* default_model() {
  static std::unique_ptr<Model> model = []() -> std::unique_ptr<Model> {
    if (!std::filesystem::exists(default_model_path())) return nullptr;
    auto loaded = load_model(default_model_path());
    EXPECT_TRUE(loaded.ok()) << (loaded ? "" : loaded.error().message);
    return loaded ? std::make_unique<Model>(std::move(*loaded)) : nullptr;
  }();
  return model.get();
}

#define SPECULA_REQUIRE_DEFAULT_MODEL()                                              \
  const ::specula::Model* model_ptr = ::specula::testing::default_model();           \
  if (model_ptr == nullptr) GTEST_SKIP() << "skipped: default model not downloaded"; \
  const ::specula::Model& model = *model_ptr

}  // namespace specula::testing

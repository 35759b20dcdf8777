#pragma once
// What the MoE tests share (tests/engine/model/moe_test.cpp on the CPU, tests/engine/cuda/
// cuda_moe_test.cpp on the GPU): the transformers references of tools/reference/
// make_moe_fixtures.py and a CPU prefill with every row's logits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "engine/model/cpu_transformer.h"

namespace specula::testing {

inline const std::filesystem::path kMoeDir = std::filesystem::path(SPECULA_TEST_DATA_DIR) / "moe";

struct MoeRefCase {
  std::vector<int32_t> tokens;
  std::vector<float> logits;                               // (T, vocab), transformers f32 over the F16 weights
  std::vector<std::vector<std::vector<int32_t>>> experts;  // [layer][token][k], descending weight
  std::vector<std::vector<std::vector<float>>> weights;    // [layer][token][k]
};

inline std::vector<MoeRefCase> load_moe_reference(const std::string& stem) {
  std::ifstream json_in(kMoeDir / (stem + ".reference.json"));
  EXPECT_TRUE(json_in) << stem;
  const auto doc = nlohmann::json::parse(json_in);
  const auto vocab = doc["vocab"].get<size_t>();
  std::ifstream bin(kMoeDir / (stem + ".reference.f32"), std::ios::binary);
  std::vector<MoeRefCase> cases;
  for (const auto& c : doc["cases"]) {
    MoeRefCase r;
    r.tokens = c["tokens"].get<std::vector<int32_t>>();
    r.logits.resize(r.tokens.size() * vocab);
    bin.read(reinterpret_cast<char*>(r.logits.data()), static_cast<std::streamsize>(r.logits.size() * sizeof(float)));
    EXPECT_TRUE(bin) << stem << ".reference.f32 too short";
    for (const auto& layer : c["routing"]) {
      r.experts.push_back(layer["experts"].get<std::vector<std::vector<int32_t>>>());
      r.weights.push_back(layer["weights"].get<std::vector<std::vector<float>>>());
    }
    cases.push_back(std::move(r));
  }
  return cases;
}

inline std::vector<int32_t> positions_for(size_t n, int32_t first = 0) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

// One prefill of `tokens` on the CPU with every row's logits.
inline std::vector<float> cpu_prefill(CpuTransformer& t, const std::vector<int32_t>& tokens,
                                      const ForwardContext* context = nullptr) {
  auto kv = t.make_kv_cache(16, 64);
  EXPECT_TRUE(kv);
  std::vector<float> logits(tokens.size() * static_cast<size_t>(t.config().vocab_size));
  const Status s = t.forward(tokens, positions_for(tokens.size()), nullptr, *kv, logits, LogitRows::All, context);
  EXPECT_TRUE(s) << (s ? "" : s.error().message);
  return logits;
}

}  // namespace specula::testing

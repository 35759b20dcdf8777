// The trained draft head (resources/draft_heads/smollm2-135m-instruct.head.safetensors) on the
// default model against the trainer's own PyTorch forward: tests/data/draft_head_reference.json
// holds four (feature, token) pairs taken from the target's float32 rows on Spec-Bench answers,
// and what scripts/draft_head/train_draft_head.py's float32 forward of the exported bf16 weights
// gives for them (f', the top-8 logits, a greedy chain of 4 drafts).
//
// Bounds: the engine quantizes the head's matrices to Q8_0 at load (about 0.4% relative error a
// weight), so f' and the logits sit ~1e-2 (relative L2) from PyTorch; a drafted token must
// agree wherever the reference's top two logits are further apart than that error can move them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/model/loader.h"
#include "engine/spec/head_drafter.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

size_t argmax(const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); }

// How far apart the two largest values are.
float top2_margin(std::vector<float> v) {
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
  return v[0] - v[1];
}

TEST(HeadDrafterReference, TrainedHeadMatchesItsPyTorchForward) {
  const auto model_path = resolve_model_path("default");
  const fs::path head_path = fs::path(SPECULA_TEST_DATA_DIR) / ".." / ".." / "resources" / "draft_heads" /
                             "smollm2-135m-instruct.head.safetensors";
  const fs::path ref_path = fs::path(SPECULA_TEST_DATA_DIR) / "draft_head_reference.json";
  if (!fs::exists(model_path)) GTEST_SKIP() << "skipped: default model not downloaded";
  ASSERT_TRUE(fs::exists(head_path)) << head_path;
  auto model = load_model(model_path);
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto head = DraftHead::load(*model, head_path, {.threads = 1, .pool = nullptr, .int8_activations = false});
  ASSERT_TRUE(head.ok()) << head.error().message;
  const auto& ids = (*head)->vocab_ids();
  const int64_t H = (*head)->hidden_size();

  std::ifstream in(ref_path);
  ASSERT_TRUE(in) << ref_path;
  const auto doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["cases"].size(), 4u);
  int chain_tokens_checked = 0;
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE("Spec-Bench item " + std::to_string(c["item"].get<int>()));
    const auto feature = c["feature"].get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(feature.size()), H);
    std::vector<float> next(H), logits(ids.size());
    ASSERT_TRUE((*head)->step(feature, c["token"].get<int32_t>(), next, logits).ok());
    const double next_error = relative_l2(next, c["next_feature"].get<std::vector<float>>());
    EXPECT_LE(next_error, 2e-2);

    // The reference's top-8 logits, read from ours by id.
    const auto top_ids = c["top_ids"].get<std::vector<int32_t>>();
    std::vector<float> ours;
    for (int32_t id : top_ids) {
      const auto at = std::find(ids.begin(), ids.end(), id);
      ASSERT_NE(at, ids.end()) << "reference top id " << id << " is not in the head's vocab_ids";
      ours.push_back(logits[at - ids.begin()]);
    }
    const auto top_logits = c["top_logits"].get<std::vector<float>>();
    const double logits_error = relative_l2(ours, top_logits);
    EXPECT_LE(logits_error, 2e-2);
    std::printf("item %d: f' relative L2 %.2e, top-8 logits %.2e\n", c["item"].get<int>(), next_error, logits_error);
    if (top_logits[0] - top_logits[1] > 0.25f) {
      EXPECT_EQ(ids[argmax(logits)], top_ids[0]);
    }

    // The chain of 4, as far as each step's decision is clear of the quantization error.
    const auto chain = c["chain4"].get<std::vector<int32_t>>();
    std::vector<float> f = feature;
    int32_t token = c["token"].get<int32_t>();
    for (int32_t expected : chain) {
      ASSERT_TRUE((*head)->step(f, token, next, logits).ok());
      if (top2_margin(logits) < 0.25f) break;
      token = ids[argmax(logits)];
      EXPECT_EQ(token, expected);
      ++chain_tokens_checked;
      f = next;
    }
  }
  EXPECT_GE(chain_tokens_checked, 8) << "too few clear chain steps to compare";
}

}  // namespace
}  // namespace specula

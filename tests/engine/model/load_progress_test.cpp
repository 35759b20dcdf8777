// Model-load progress: the callback sees the fraction of tensor bytes read rise to exactly 1 on
// the default GGUF model and on a sharded HF directory, and returning false cancels the load.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "engine/model/loader.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

const fs::path kDefaultModel = fs::path(SPECULA_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";

void expect_rising_to_one(const std::vector<double>& fractions) {
  ASSERT_FALSE(fractions.empty());
  for (size_t i = 0; i < fractions.size(); ++i) {
    EXPECT_GT(fractions[i], 0.0) << "call " << i;
    EXPECT_LE(fractions[i], 1.0) << "call " << i;
    if (i > 0) {
      EXPECT_GT(fractions[i], fractions[i - 1]) << "call " << i;
    }
  }
  EXPECT_EQ(fractions.back(), 1.0);
}

TEST(LoadProgress, DefaultModelReportsRisingFractionsEndingAtOne) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "skipped: default model not downloaded";
  std::vector<double> fractions;
  auto model = load_model(kDefaultModel, [&](double f) {
    fractions.push_back(f);
    return true;
  });
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->config.n_layers, 30);
  // 272 tensors, about 98 MB: at least one call per tensor.
  EXPECT_GE(fractions.size(), 272u);
  expect_rising_to_one(fractions);
  // Roughly uniform in bytes: about half the calls are past half way, not all at the end.
  const auto past_half = std::count_if(fractions.begin(), fractions.end(), [](double f) { return f > 0.5; });
  EXPECT_GT(past_half, 10);
  EXPECT_LT(static_cast<size_t>(past_half), fractions.size() - 10);
}

TEST(LoadProgress, ShardedHfDirectoryEndsAtOne) {
  std::vector<double> fractions;
  auto model = load_model(fs::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f32-sharded", [&](double f) {
    fractions.push_back(f);
    return true;
  });
  ASSERT_TRUE(model) << model.error().message;
  expect_rising_to_one(fractions);
}

TEST(LoadProgress, ReturningFalseCancelsTheLoad) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "skipped: default model not downloaded";
  std::vector<double> fractions;
  auto model = load_model(kDefaultModel, [&](double f) {
    fractions.push_back(f);
    return f < 0.5;
  });
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("loading cancelled"), std::string::npos) << model.error().message;
  ASSERT_GE(fractions.size(), 2u);
  EXPECT_GE(fractions.back(), 0.5);
  EXPECT_LT(fractions.back(), 1.0) << "no call after the one that said stop";
  EXPECT_LT(fractions[fractions.size() - 2], 0.5);
}

TEST(LoadProgress, NoCallbackLoadsAsBefore) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "skipped: default model not downloaded";
  auto model = load_model(kDefaultModel);
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->config.n_layers, 30);
}

}  // namespace
}  // namespace specula

// run_calibration on the default model: progress after each prompt, anchors of the asked count
// bound to the model, and keep_going stopping the run with a "cancelled" error.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/loader.h"
#include "engine/sparse/calibration.h"

namespace specula {
namespace {

// ~150 tokens each: long enough that eta 0.2 drops blocks at every layer.
std::vector<std::string> long_prompts(int n) {
  std::vector<std::string> prompts;
  for (int p = 0; p < n; ++p) {
    std::string text = "Summarise this story. ";
    for (int i = 0; i < 12; ++i) text += "Ship " + std::to_string(p * 100 + i) + " left the harbour before the storm. ";
    prompts.push_back(text);
  }
  return prompts;
}

class RunCalibration : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = resolve_model_path("default");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not downloaded";
    auto loaded = load_model(path);
    ASSERT_TRUE(loaded) << loaded.error().message;
    model_ = std::make_unique<Model>(std::move(loaded).value());
  }
  std::unique_ptr<Model> model_;
  const std::string sha_ = std::string(64, 'c');
};

TEST_F(RunCalibration, ReportsEachPromptAndPicksTheAskedAnchors) {
  CalibrationOptions options;
  options.anchors = 5;
  options.max_tokens = 6;
  std::vector<std::pair<int, int>> steps;
  const auto prompts = long_prompts(2);
  auto c =
      run_calibration(*model_, sha_, prompts, options, [&](int done, int total) { steps.emplace_back(done, total); });
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(steps, (std::vector<std::pair<int, int>>{{1, 2}, {2, 2}}));
  EXPECT_EQ(c->model_sha256, sha_);
  EXPECT_EQ(c->n_layers, 30);
  ASSERT_EQ(c->anchors.size(), 5u);
  EXPECT_EQ(c->anchors.front(), 0);
  EXPECT_EQ(c->anchors, pick_anchors(c->jaccard_prev, 5));
  EXPECT_EQ(c->settings["prompts"], 2);
  EXPECT_GT(c->settings["rounds"].get<int>(), 2);
}

TEST_F(RunCalibration, KeepGoingFalseCancels) {
  CalibrationOptions options;
  options.anchors = 5;
  options.max_tokens = 64;
  int progress_calls = 0;
  int asked_in_second = 0;
  const auto prompts = long_prompts(3);
  // Stop three tokens into the second prompt: the run ends there, not after all 64 tokens.
  auto c = run_calibration(
      *model_, sha_, prompts, options, [&](int, int) { ++progress_calls; },
      [&] { return progress_calls == 0 || ++asked_in_second < 4; });
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("cancelled after 1 of 3 prompts"), std::string::npos) << c.error().message;
  EXPECT_EQ(progress_calls, 1);
  EXPECT_EQ(asked_in_second, 5) << "asked before the prompt, at its first three tokens, and after it stopped";
}

TEST_F(RunCalibration, RefusesMoreAnchorsThanLayers) {
  CalibrationOptions options;
  options.anchors = 31;
  auto c = run_calibration(*model_, sha_, long_prompts(1), options);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("31 anchors for a model of 30 layers"), std::string::npos) << c.error().message;
}

}  // namespace
}  // namespace specula

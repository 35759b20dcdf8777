// diff_sessions on two synthetic sessions that differ in configuration, rounds and kernel times.
#include "profiler/session_diff.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "session_fixture.h"

namespace specula::profiler {
namespace {

namespace fs = std::filesystem;
using namespace specula::testing;

TEST(SessionDiff, ReportsConfigSpeedAcceptanceKvAndKernels) {
  const fs::path dir = fs::temp_directory_path() / ("specula_diff_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto a = record_synthetic((dir / "a.sqlite").string(), ObserveLevel::kSummary, 3,
                                  R"({"tree":"chain:4","accept":"greedy","ngram":{"n":3}})");
  const auto b = record_synthetic((dir / "b.sqlite").string(), ObserveLevel::kSummary, 6,
                                  R"({"tree":"chain:2","accept":"greedy","ngram":{"n":3,"min":2}})");
  add_gpu_activity(a, 1);
  add_gpu_activity(b, 2);  // gemm kernels take twice as long in B
  auto sa = open_session(a);
  auto sb = open_session(b);
  ASSERT_TRUE(sa && sb);
  auto diff = diff_sessions(*sa, *sb, DiffOptions{2});
  ASSERT_TRUE(diff) << diff.error().message;

  std::map<std::string, nlohmann::json> config;
  for (const auto& c : (*diff)["config"]) config[c["key"]] = c;
  ASSERT_EQ(config.size(), 2u) << (*diff)["config"].dump();
  EXPECT_EQ(config["tree"]["a"], "chain:4");
  EXPECT_EQ(config["tree"]["b"], "chain:2");
  EXPECT_TRUE(config["ngram.min"]["a"].is_null());
  EXPECT_EQ(config["ngram.min"]["b"], 2);

  // Rounds 0..2 accept 0, 1, 2 drafts; B adds rounds 3..5 (0, 1, 2 again).
  const auto& acc_a = (*diff)["acceptance"]["a"];
  const auto& acc_b = (*diff)["acceptance"]["b"];
  EXPECT_EQ(acc_a["speculative_rounds"], 3);
  EXPECT_DOUBLE_EQ(acc_a["mean"].get<double>(), 2.0);
  EXPECT_EQ(acc_b["histogram"]["3"], 2);
  EXPECT_EQ(acc_b["p90"], 3.0);

  // Layer l selects 4 of 16 blocks in every round.
  ASSERT_EQ((*diff)["kv"].size(), static_cast<size_t>(kSyntheticLayers));
  EXPECT_EQ((*diff)["kv"][0]["a_blocks_read"], 12);
  EXPECT_EQ((*diff)["kv"][0]["b_blocks_read"], 24);
  EXPECT_DOUBLE_EQ((*diff)["kv"][1]["b_fraction"].get<double>(), 0.25);

  const auto& kernels = (*diff)["kernels"];
  ASSERT_GE(kernels.size(), 2u);
  EXPECT_EQ(kernels[0]["name"], "gemm_bf16");
  EXPECT_EQ(kernels[0]["a_count"], 3);
  EXPECT_EQ(kernels[0]["a_total_ns"], 6000);
  EXPECT_EQ(kernels[0]["b_total_ns"], 12000);
  EXPECT_DOUBLE_EQ(kernels[0]["b_over_a_total"].get<double>(), 2.0);

  const std::string text = format_diff(*diff);
  EXPECT_NE(text.find("tree: \"chain:4\" -> \"chain:2\""), std::string::npos) << text;
  EXPECT_NE(text.find("gemm_bf16"), std::string::npos);
  fs::remove_all(dir);
}

TEST(SessionDiff, FlattenJsonNamesEveryLeaf) {
  std::map<std::string, nlohmann::json> flat;
  flatten_json(nlohmann::json::parse(R"({"a":1,"b":{"c":[10,{"d":true}]},"e":{}})"), "", flat);
  EXPECT_EQ(flat.size(), 4u);
  EXPECT_EQ(flat["a"], 1);
  EXPECT_EQ(flat["b.c[0]"], 10);
  EXPECT_EQ(flat["b.c[1].d"], true);
  EXPECT_TRUE(flat["e"].is_object());
}

}  // namespace
}  // namespace specula::profiler

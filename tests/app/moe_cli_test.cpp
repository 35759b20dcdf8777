// specula-cli on MoE models: calibrate-moe, then speculative generation with expert skipping;
// and the refusals (dense model, missing or foreign thresholds).
#include <nlohmann/json.hpp>

#include "tests/app/cli_runner.h"

namespace specula::cli_test {
namespace {

const fs::path kMoe = fs::path(SPECULA_TEST_DATA_DIR) / "moe";
const fs::path kDense = fs::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f16";

fs::path calibration_text() {
  const fs::path path = scratch("moe_calibration.txt");
  std::ofstream(path) << "the quick brown fox jumps over the lazy dog\n\n"
                      << "the cat sat on the mat and then the dog ran in the rain\n"
                      << "speculative decoding verifies the draft tokens in one pass\n";
  return path;
}

TEST(MoeCli, CalibrateThenGenerateWithExpertSkipping) {
  const fs::path thresholds = scratch("qwen3moe_thresholds.json");
  const CliRun cal = run_cli("calibrate-moe --model " + quote(kMoe / "qwen3moe.gguf") + " --data " +
                             quote(calibration_text()) + " --out " + quote(thresholds));
  ASSERT_EQ(cal.exit_code, 0) << cal.err;
  EXPECT_THAT(cal.err, ::testing::HasSubstr("2 layers x 3 skip counts"));
  const auto file = nlohmann::json::parse(slurp(thresholds));
  EXPECT_EQ(file["kind"], "specula-moe-thresholds");
  EXPECT_EQ(file["experts_per_token"], 4);
  ASSERT_EQ(file["thresholds"].size(), 2u);
  for (const auto& row : file["thresholds"]) {
    ASSERT_EQ(row.size(), 3u);
    // Medians of r_1 < r_2 < r_3 (each ratio grows with s for every token).
    EXPECT_LT(row[0].get<double>(), row[1].get<double>());
    EXPECT_LT(row[1].get<double>(), row[2].get<double>());
  }

  const fs::path config = scratch("smoe.json");
  std::ofstream(config) << nlohmann::json{
      {"preset", "smoe"},
      {"moe_calibration", thresholds.string()},
      {"moe_skip_budget", 2}}.dump();
  const std::string common =
      "generate --model " + quote(kMoe / "qwen3moe.gguf") +
      " -p 'the cat sat on the mat' -n 16 --temperature 0 --drafter ngram --no-controller --json";
  const CliRun strict = run_cli(common);
  ASSERT_EQ(strict.exit_code, 0) << strict.err;
  EXPECT_EQ(nlohmann::json::parse(strict.out)["metrics"]["moe_experts_run_ratio"], 1.0);
  const CliRun sparse = run_cli(common + " --sparse-config " + quote(config));
  ASSERT_EQ(sparse.exit_code, 0) << sparse.err;
  const auto out = nlohmann::json::parse(sparse.out);
  ASSERT_GT(out["metrics"]["speculative_rounds"].get<int>(), 0);
  const double ratio = out["metrics"]["moe_experts_run_ratio"].get<double>();
  EXPECT_LT(ratio, 1.0);
  EXPECT_GE(ratio, 0.5);  // budget 2 of 4: at most half the routed experts skipped
  EXPECT_EQ(out["sparse"]["moe_skip_budget"], 2);

  // The same thresholds on another MoE model are refused.
  expect_clean_failure(
      run_cli("generate --model " + quote(kMoe / "olmoe.gguf") + " -p hi -n 2 --sparse-config " + quote(config)),
      "calibrated for another model");
}

TEST(MoeCli, RefusesDenseModelsAndSkippingWithoutThresholds) {
  expect_clean_failure(run_cli("calibrate-moe --model " + quote(kDense) + " --data " + quote(calibration_text()) +
                               " --out " + quote(scratch("dense.json"))),
                       "has no MoE layers");
  expect_clean_failure(run_cli("generate --model " + quote(kDense) + " -p hi -n 2 --sparse smoe"), "no MoE layers");
  const fs::path config = scratch("dense_moe.json");
  std::ofstream(config) << R"({"moe_calibration": "x.json"})";
  expect_clean_failure(run_cli("generate --model " + quote(kDense) + " -p hi -n 2 --sparse-config " + quote(config)),
                       "this model has no MoE layers");
  expect_clean_failure(run_cli("generate --model " + quote(kMoe / "mixtral") + " -p hi -n 2 --sparse smoe"),
                       "run specula-cli calibrate-moe");
  expect_clean_failure(run_cli("calibrate-moe --model " + quote(kMoe / "mixtral") + " --data " +
                               quote(scratch("missing.txt")) + " --out " + quote(scratch("x.json"))),
                       "cannot open the calibration data");
}

}  // namespace
}  // namespace specula::cli_test

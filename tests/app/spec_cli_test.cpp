// specula-cli's speculative decoding: generate with every drafter (metrics, shadow), specbench,
// and every kind of bad speculation input answered with one clear line and a non-zero exit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backend/cuda_backend.h"
#include "engine/model/loader.h"
#include "tests/app/cli_runner.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace specula::cli_test;  // run_cli, scratch, expect_clean_failure, ...

namespace {

const fs::path kTiny = fs::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f16";

const char* const kMetricKeys[] = {"mean_accepted_length",
                                   "accepted_length_p50",
                                   "accepted_length_p90",
                                   "acceptance_by_depth",
                                   "target_passes_per_token",
                                   "draft_ms",
                                   "verify_ms",
                                   "tpot_ms",
                                   "tokens_per_s",
                                   "rollback_tokens",
                                   "rejected_kv_bytes",
                                   "controller_fallbacks"};

TEST(SpecCli, EveryDrafterMatchesPlainGreedyWithMetricsAndShadow) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const std::string base =
      "generate --model default --chat --prompt 'List the days of the week, then list them again.' --max-tokens 24 "
      "--json";
  const auto plain = run_cli(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto p = nlohmann::json::parse(plain.out);
  for (const char* key : kMetricKeys) EXPECT_TRUE(p["metrics"].contains(key)) << key;
  EXPECT_DOUBLE_EQ(p["metrics"]["target_passes_per_token"].get<double>(), 1.0);
  const std::string model = specula::resolve_model_path("default").string();
  for (const std::string& flags : std::vector<std::string>{
           "--drafter ngram --tree static:2,2,1", "--drafter layerskip --layers first:12 --tree dynamic:3,2,6",
           "--drafter model --draft-model '" + model + "' --tree chain:3 --no-controller"}) {
    const auto r = run_cli(base + " --shadow " + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"], p["tokens"]) << flags;
    for (const char* key : kMetricKeys) EXPECT_TRUE(j["metrics"].contains(key)) << key;
    EXPECT_GE(j["metrics"]["mean_accepted_length"].get<double>(), 1.0);
    EXPECT_FALSE(j["shadow"]["diverged"].get<bool>()) << flags;
    EXPECT_TRUE(j["speculative"]["lossless"].get<bool>());
  }
}

TEST(SpecCli, TextModeReportsMetricsAndCascadeIsLabelledLossy) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const auto r = run_cli(
      "generate --model default --prompt 'one two three one two three one two' --max-tokens 12 "
      "--drafter ngram --accept cascade:0.5 --shadow");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("mean accepted length"));
  EXPECT_THAT(r.err, HasSubstr("LOSSY"));
  EXPECT_THAT(r.err, HasSubstr("shadow:"));
}

TEST(SpecCli, SpecbenchReportsCategoriesAndSpeedup) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path data = scratch("bench.jsonl");
  std::ofstream(data) << R"({"question_id": 1, "category": "writing", "turns": ["Say hello twice."]})"
                      << "\n"
                      << R"({"question_id": 2, "category": "roleplay", "turns": ["Pretend to be a cat."]})"
                      << "\n"
                      << R"({"question_id": 3, "category": "qa", "turns": ["What is 2+2?"]})"
                      << "\n"
                      << R"({"question_id": 4, "category": "qa", "turns": ["What colour is the sky?"]})"
                      << "\n";
  const fs::path out = scratch("bench.json");
  const auto r = run_cli("specbench --model default --data '" + data.string() +
                         "' --drafter ngram --limit 1 "
                         "--max-tokens 8 --out '" +
                         out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("mt_bench"));
  EXPECT_THAT(r.out, HasSubstr("speedup"));
  const auto j = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(j["categories"]["mt_bench"]["items"].get<int>(), 1);  // writing and roleplay are one category, limit 1
  EXPECT_EQ(j["categories"]["qa"]["items"].get<int>(), 1);
  EXPECT_EQ(j["overall"]["items"].get<int>(), 2);
  EXPECT_GT(j["overall"]["speedup"].get<double>(), 0.0);
  EXPECT_GE(j["overall"]["mean_accepted_length"].get<double>(), 1.0);
  EXPECT_EQ(j["overall"]["output_mismatches"].get<int>(), 0);
}

TEST(SpecCliBadInput, SpeculationFlags) {
  const std::string base = "generate --model " + kTiny.string() + " --prompt hi ";
  expect_clean_failure(run_cli(base + "--drafter eagle"), "unknown drafter \"eagle\"");
  expect_clean_failure(run_cli(base + "--drafter ngram --tree chain"), "--tree");
  expect_clean_failure(run_cli(base + "--drafter ngram --tree pyramid:3"), "unknown kind");
  expect_clean_failure(run_cli(base + "--drafter ngram --tree static:8,8"), "64");
  expect_clean_failure(run_cli(base + "--drafter ngram --accept cascade:2"), "--accept");
  expect_clean_failure(run_cli(base + "--drafter model"), "--draft-model");
  expect_clean_failure(run_cli(base + "--drafter layerskip --layers first:9"), "--layers");
  expect_clean_failure(run_cli(base + "--drafter model --draft-model /no/such/draft.gguf"), "/no/such/draft.gguf");
  expect_clean_failure(run_cli("specbench --model default --data /no/such.jsonl --drafter ngram"), "/no/such.jsonl");
  expect_clean_failure(run_cli(base + "--drafter layerskip --draft-backend tpu"), "--draft-backend");
  expect_clean_failure(run_cli(base + "--drafter ngram --backend cuda --precision int8"), "--precision int8");
}

// Without a GPU, a speculative run or a draft placed on the CUDA backend is refused by name, and
// --backend auto speculates on the CPU.
TEST(SpecCliBadInput, CudaWithoutAGpu) {
  if (specula::cuda_gpu_available()) GTEST_SKIP() << "a GPU is present (tests/engine/cuda covers the CUDA runs)";
  // The default model, which the CUDA backend can run (the tiny fixture's shapes it refuses).
  if (!fs::exists(specula::resolve_model_path("default"))) GTEST_SKIP() << "skipped: default model not downloaded";
  const std::string base = "generate --model default --prompt hi --max-tokens 4 ";
  expect_clean_failure(run_cli(base + "--drafter ngram --backend cuda"), "no CUDA GPU found");
  expect_clean_failure(run_cli(base + "--drafter layerskip --layers first:1 --draft-backend cuda"),
                       "drafter layerskip:first:1 on the cuda backend");
  const auto r = run_cli(base + "--drafter layerskip --layers first:1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["backend"]["name"], "cpu");
}

TEST(SpecCliBadInput, ModelLargerThanTheGpu) {
  if (!specula::cuda_gpu_available()) {
    std::puts("skipped: no GPU");
    GTEST_SKIP() << "skipped: no GPU";
  }
  if (!fs::exists(specula::resolve_model_path("default"))) GTEST_SKIP() << "skipped: default model not downloaded";
  // The default model is there for its tokenizer; the weights are 811 GB of synthetic bf16.
  expect_clean_failure(run_cli("generate --model default --prompt hi --max-tokens 2 --synthetic llama-3.1-405b"),
                       "of GPU memory, but only");
}

TEST(SpecCliBadInput, DraftModelWithAnotherTokenizer) {
  const fs::path dir = scratch("other_tokenizer");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(kTiny / f, dir / f, fs::copy_options::overwrite_existing);
  auto tok = nlohmann::json::parse(std::ifstream(kTiny / "tokenizer.json"));
  auto& vocab = tok["model"]["vocab"];
  const auto a = vocab["a"].get<int>();
  vocab["a"] = vocab["b"].get<int>();
  vocab["b"] = a;
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  expect_clean_failure(run_cli("generate --model " + kTiny.string() + " --prompt hi --drafter model --draft-model '" +
                               dir.string() + "'"),
                       "different tokenizers");
}

TEST(SpecCliBadInput, TreeLargerThanTheContextLeft) {
  // The tiny model's context is 256 tokens; a ~250-token prompt leaves no room for 20 nodes.
  const fs::path p = scratch("long.txt");
  std::string text;
  for (int i = 0; i < 250; ++i) text += " a";
  std::ofstream(p) << text;
  expect_clean_failure(run_cli("generate --model " + kTiny.string() + " --prompt-file '" + p.string() +
                               "' --drafter ngram --tree static:4,4"),
                       "larger than the context left");
}

TEST(SpecCliHelp, DescribesSpeculationFlags) {
  const auto r = run_cli("generate --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--drafter", "--draft-model", "--tree", "--accept", "--shadow", "--layers", "--ngram-n"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  const auto s = run_cli("specbench --help");
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_THAT(s.out, HasSubstr("--limit"));
}

}  // namespace

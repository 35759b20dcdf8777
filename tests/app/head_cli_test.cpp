// specula-cli's head drafter (--drafter head --draft-head FILE): a run with a head file written
// here (random weights) on the default model, and every kind of bad head input answered with one
// clear line and a non-zero exit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/app/cli_runner.h"
#include "tests/engine/spec/draft_head_file.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace specula::cli_test;  // run_cli, scratch, expect_clean_failure, ...

namespace {

const fs::path kTiny = fs::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f16";
const std::string kPrompt = "-p 'The quick brown fox jumps over the lazy dog. The quick brown' -n 12 --temperature 0 ";

fs::path head_file(const std::string& name, int64_t hidden) {
  const fs::path path = scratch(name);
  specula::testing::HeadFile::random(hidden, 64, 512, 49152).write(path);
  return path;
}

TEST(HeadCli, GeneratesAndSpecbenchesWithAHeadFile) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path head = head_file("head.safetensors", 576);
  const auto r = run_cli("generate --model default " + kPrompt + "--drafter head --draft-head " + quote(head) +
                         " --tree static:2,2 --head-min-confidence 0 --no-controller --shadow --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["speculative"]["drafter"].get<std::string>(), "head:head.safetensors");
  EXPECT_EQ(j["backend"]["name"].get<std::string>(), "cpu");
  EXPECT_GT(j["metrics"]["speculative_rounds"].get<int>(), 0);
  // Greedy speculation with any head gives the plain greedy tokens.
  EXPECT_FALSE(j["shadow"]["diverged"].get<bool>()) << j["shadow"].dump();

  // The shipped head behind ngram, at the default confidence cut.
  const fs::path shipped = fs::path(SPECULA_TEST_DATA_DIR) / ".." / ".." / "resources" / "draft_heads" /
                           "smollm2-135m-instruct.head.safetensors";
  const auto h = run_cli("generate --model default " + kPrompt + "--drafter ngram+head --draft-head " + quote(shipped) +
                         " --tree chain:8 --no-controller --shadow --json");
  ASSERT_EQ(h.exit_code, 0) << h.err;
  const auto hj = nlohmann::json::parse(h.out);
  EXPECT_NE(hj["speculative"]["drafter"].get<std::string>().find("|head:smollm2-135m-instruct"), std::string::npos)
      << hj["speculative"]["drafter"];
  EXPECT_FALSE(hj["shadow"]["diverged"].get<bool>()) << hj["shadow"].dump();

  const fs::path data = scratch("items.jsonl");
  std::ofstream(data) << R"({"category": "qa", "turns": ["Name a color."]})"
                      << "\n";
  const auto bench = run_cli("specbench --model default --data " + quote(data) + " --max-tokens 8 --drafter head " +
                             "--draft-head " + quote(head) + " --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(nlohmann::json::parse(bench.out)["overall"]["output_mismatches"].get<int>(), 0);
}

TEST(HeadCliBadInput, HeadFlags) {
  const std::string base = "generate --model " + kTiny.string() + " --prompt hi ";
  expect_clean_failure(run_cli(base + "--drafter head"), "--drafter head needs --draft-head FILE");
  expect_clean_failure(run_cli(base + "--drafter ngram --draft-head x.safetensors"),
                       "--draft-head is only used with --drafter head");
  expect_clean_failure(run_cli(base + "--drafter eagle"), "expected none, ngram, layerskip, model, head or ngram+head");
  expect_clean_failure(run_cli(base + "--drafter ngram+head"), "--drafter ngram+head needs --draft-head FILE");
  expect_clean_failure(run_cli(base + "--drafter head --draft-head x.safetensors --head-min-confidence 1.5"),
                       "--head-min-confidence");
  expect_clean_failure(run_cli("specbench --model default --data /no/such.jsonl --drafter head"),
                       "--drafter head needs --draft-head FILE");
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const std::string real = "generate --model default --prompt hi -n 4 ";
  expect_clean_failure(run_cli(real + "--drafter head --draft-head /no/such/head.safetensors"),
                       "/no/such/head.safetensors");
  const fs::path corrupt = scratch("corrupt.safetensors");
  std::ofstream(corrupt) << "not a safetensors file at all";
  expect_clean_failure(run_cli(real + "--drafter head --draft-head " + quote(corrupt)), corrupt.string());
  const fs::path wide = head_file("wide.safetensors", 960);
  expect_clean_failure(run_cli(real + "--drafter head --draft-head " + quote(wide)), "hidden_size 960 does not match");
  const fs::path fits = head_file("fits.safetensors", 576);
  expect_clean_failure(run_cli(real + "--drafter head --draft-head " + quote(fits) + " --backend cuda"),
                       "the head drafter runs on the CPU backend");
  const fs::path data = scratch("bench.jsonl");
  std::ofstream(data) << R"({"category": "qa", "turns": ["hi"]})"
                      << "\n";
  expect_clean_failure(
      run_cli("specbench --model default --data " + quote(data) + " --drafter head --draft-head " + quote(wide)),
      "hidden_size 960 does not match");
  expect_clean_failure(run_cli("specbench --model default --data " + quote(data) + " --drafter head --draft-head " +
                               quote(fits) + " --backend cuda"),
                       "the head drafter runs on the CPU backend");
}

}  // namespace

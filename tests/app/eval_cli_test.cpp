// specula-cli eval: bad input answered with one clear line and a non-zero exit, and tiny real
// runs (short passkey and LCC contexts) whose JSON report carries every figure.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/app/cli_runner.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace specula::cli_test;  // run_cli, scratch, expect_clean_failure, ...

namespace {

const fs::path kData = fs::path(SPECULA_SHARED_DIR) / "data";

TEST(EvalCli, BadInput) {
  expect_clean_failure(run_cli("eval --task mmlu --model default"), "unknown task \"mmlu\"");
  expect_clean_failure(run_cli("eval --model default"), "--task is required");
  expect_clean_failure(run_cli("eval --task gsm8k --model default"), "needs --data FILE");
  expect_clean_failure(run_cli("eval --task specbench --data /nonexistent/sb.jsonl"), "/nonexistent/sb.jsonl: no such data file");
  expect_clean_failure(run_cli("eval --task passkey --limit 0"), "--limit");
  expect_clean_failure(run_cli("eval --task passkey --limit -3"), "--limit");
  expect_clean_failure(run_cli("eval --task passkey --context 10"), "--context");
  expect_clean_failure(run_cli("eval --task passkey --data " + quote(kData / "gsm8k-dev.jsonl")), "drop --data");
  expect_clean_failure(run_cli("eval --task passkey --sparse nonsense"), "unknown sparse preset 'nonsense'");
  expect_clean_failure(run_cli("eval --task passkey --drafter bogus"), "unknown drafter");
  expect_clean_failure(run_cli("eval --task passkey --model /nonexistent/model.gguf --limit 1"), "/nonexistent/model.gguf");
  expect_clean_failure(run_cli("eval --task passkey --few-shot"), "--few-shot is for --task gsm8k");
  expect_clean_failure(run_cli("eval --task passkey --sweep /nonexistent/a.json"), "/nonexistent/a.json");
  const fs::path config = scratch("sweep_sa.json");
  std::ofstream(config) << "{\"preset\": \"sa\"}";
  expect_clean_failure(run_cli("eval --task passkey --sparse sa --sweep " + quote(config)), "drop --sparse");
  expect_clean_failure(run_cli("eval --task passkey --first -1"), "--first");
}

TEST(EvalCli, BadDataFiles) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path junk = scratch("junk.jsonl");
  std::ofstream(junk) << "{\"question\": \"2+2?\", \"answer\": \"#### 4\"}\nnot json\n";
  expect_clean_failure(run_cli("eval --task gsm8k --data " + quote(junk)), junk.string() + ":2: not a JSON object");
  const fs::path templates = scratch("templates.json");
  std::ofstream(templates) << "{\"gov_report\": \"{context}\"}";
  expect_clean_failure(run_cli("eval --task lcc --data " + quote(templates)), "no template for \"lcc\"");
  const fs::path bad_config = scratch("sweep_bad.json");
  std::ofstream(bad_config) << "{\"preset\": \"sa\", \"group_score\": \"mean\"}";
  expect_clean_failure(run_cli("eval --task passkey --limit 1 --context 256 --sweep " + quote(bad_config)),
                       "--sparse-config: " + bad_config.string() + ": sparse config: group_score must be");
  expect_clean_failure(run_cli("eval --task lcc --data " + quote(kData / "longbench-dataset2prompt.json") +
                               " --context 256 --first 99"),
                       "eval --first 99: the task has only");
  // A context the model cannot hold fails on the item, naming it.
  expect_clean_failure(run_cli("eval --task passkey --limit 1 --context 9000"), "passkey:0 (strict run)");
}

TEST(EvalCli, PasskeyRunReportsEveryFigure) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path out = scratch("passkey.json");
  const auto r = run_cli("eval --task passkey --limit 2 --context 256 --seed 3 --json --out " + quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["task"], "passkey");
  EXPECT_EQ(j["items"], 2);
  EXPECT_EQ(j["sparse"]["preset"], "strict");
  EXPECT_EQ(j["seed"], 3);
  EXPECT_EQ(j["controller"], false);  // timing-driven fallbacks would make the two runs differ
  EXPECT_NEAR(j["mean_prompt_tokens"].get<double>(), 256, 40);
  // Strict against strict: the same greedy tokens, so full agreement and equal figures.
  EXPECT_DOUBLE_EQ(j["agreement"]["token_agreement"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["agreement"]["rouge_l"].get<double>(), 1.0);
  EXPECT_EQ(j["agreement"]["identical_outputs"], 2);
  EXPECT_EQ(j["score"]["strict"], j["score"]["configured"]);
  EXPECT_GE(j["score"]["strict"].get<double>(), 0.0);
  EXPECT_EQ(j["mean_accepted_length"]["strict"], j["mean_accepted_length"]["configured"]);
  EXPECT_GE(j["mean_accepted_length"]["strict"].get<double>(), 1.0);
  EXPECT_GT(j["kv_bytes_read"]["strict"].get<int64_t>(), 0);
  EXPECT_EQ(j["kv_bytes_read"]["strict"], j["kv_bytes_read"]["configured"]);
  EXPECT_TRUE(j["goals"]["token_agreement_ge_95pct"].get<bool>());
  EXPECT_FALSE(j.contains("per_item"));
  // --out holds the same report with per-item rows.
  const auto file = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(file["score"], j["score"]);
  ASSERT_EQ(file["per_item"].size(), 2u);
  EXPECT_EQ(file["per_item"][0]["id"], "passkey:0");
  EXPECT_EQ(file["per_item"][0]["strict_text"], file["per_item"][0]["configured_text"]);
}

TEST(EvalCli, SweepComparesEveryConfigWithOneStrictRun) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  const fs::path a = scratch("sweep_a.json"), b = scratch("sweep_b.json"), out = scratch("sweep.json");
  std::ofstream(a) << "{\"preset\": \"sa\", \"dense_below\": 0, \"eta\": 0.2}";
  std::ofstream(b) << "{\"preset\": \"strict\"}";
  const auto r = run_cli("eval --task passkey --limit 2 --context 256 --sweep " + quote(a) + " " + quote(b) +
                         " --json --out " + quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["sweep"].size(), 2u);
  EXPECT_EQ(j["sweep"][0]["name"], "sweep_a");
  EXPECT_EQ(j["sweep"][0]["sparse"]["preset"], "sa");
  EXPECT_EQ(j["sweep"][1]["sparse"]["preset"], "strict");
  EXPECT_EQ(j["sweep"][0]["items"], 2);
  // One strict run per item serves both reports; strict against strict agrees fully.
  EXPECT_EQ(j["sweep"][0]["score"]["strict"], j["sweep"][1]["score"]["strict"]);
  EXPECT_EQ(j["sweep"][0]["kv_bytes_read"]["strict"], j["sweep"][1]["kv_bytes_read"]["strict"]);
  EXPECT_DOUBLE_EQ(j["sweep"][1]["agreement"]["token_agreement"].get<double>(), 1.0);
  EXPECT_LT(j["sweep"][0]["kv_bytes_read"]["configured"].get<int64_t>(),
            j["sweep"][0]["kv_bytes_read"]["strict"].get<int64_t>()) << "20% of the blocks after the prefill";
  // --first 1 --limit 1 is the second item alone, with the same outputs.
  const fs::path one = scratch("sweep_one.json");
  const auto r1 = run_cli("eval --task passkey --first 1 --limit 1 --context 256 --sweep " + quote(a) + " --json --out " +
                          quote(one));
  ASSERT_EQ(r1.exit_code, 0) << r1.err;
  const auto all = nlohmann::json::parse(slurp(out)), single = nlohmann::json::parse(slurp(one));
  ASSERT_EQ(single["sweep"][0]["per_item"].size(), 1u);
  EXPECT_EQ(single["sweep"][0]["first_item"], 1);
  EXPECT_EQ(single["sweep"][0]["per_item"][0]["id"], "passkey:1");
  EXPECT_EQ(single["sweep"][0]["per_item"][0]["strict_text"], all["sweep"][0]["per_item"][1]["strict_text"]);
  EXPECT_EQ(single["sweep"][0]["per_item"][0]["configured_text"], all["sweep"][0]["per_item"][1]["configured_text"]);
}

TEST(EvalCli, LccTableRun) {
  if (!have_default_model()) GTEST_SKIP() << "skipped: default model not downloaded";
  if (!fs::exists(kData / "longbench-dataset2prompt.json")) GTEST_SKIP() << "skipped: LongBench templates not present";
  const auto r = run_cli("eval --task lcc --data " + quote(kData / "longbench-dataset2prompt.json") +
                         " --limit 1 --context 256 --max-tokens 12");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("eval lcc: 1 items"));
  EXPECT_THAT(r.out, HasSubstr("(edit_similarity)"));
  EXPECT_THAT(r.out, HasSubstr("agreement with strict: 100.00% of tokens"));
}

}  // namespace

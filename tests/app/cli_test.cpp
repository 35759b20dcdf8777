// specula-cli as a user meets it: real runs on the default model, and every kind of bad input
// answered with one clear line on stderr and a non-zero exit (never a crash or a hang).
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/model/loader.h"
#include "tests/app/cli_runner.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace specula::cli_test;  // run_cli, scratch, expect_clean_failure, ...

namespace {

void write_bytes(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

TEST(CliGenerate, CapitalOfFranceGreedy) {
  if (!have_default_model()) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const auto r = run_cli("generate --model default --prompt 'The capital of France is' --max-tokens 16 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Paris"));
  EXPECT_THAT(r.err, HasSubstr("decode"));
  EXPECT_THAT(r.err, HasSubstr("tokens/s"));
}

TEST(CliGenerate, JsonHasTextTokensAndTimings) {
  if (!have_default_model()) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const auto r = run_cli("generate --model default --prompt 'Hello' --max-tokens 8 --temperature 0.7 --seed 7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["text"].is_string());
  ASSERT_TRUE(j["tokens"].is_array());
  EXPECT_GE(j["tokens"].size(), 1u);
  EXPECT_LE(j["tokens"].size(), 8u);
  EXPECT_GT(j["timings"]["prefill_tokens_per_s"].get<double>(), 0.0);
  if (j["tokens"].size() > 1) {
    EXPECT_GT(j["timings"]["decode_tokens_per_s"].get<double>(), 0.0);
  }
  // Same seed, same tokens.
  const auto again = nlohmann::json::parse(
      run_cli("generate --model default --prompt 'Hello' --max-tokens 8 --temperature 0.7 --seed 7 --json").out);
  EXPECT_EQ(j["tokens"], again["tokens"]);
}

TEST(CliGenerate, ChatTemplateAnswers) {
  if (!have_default_model()) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const auto r = run_cli("generate --model default --chat --prompt 'What is the capital of France?' --max-tokens 24 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(nlohmann::json::parse(r.out)["text"].get<std::string>(), HasSubstr("Paris"));
}

TEST(CliInspect, PrintsArchitectureHyperParametersTokenizerAndTensors) {
  if (!have_default_model()) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const auto r = run_cli("inspect default");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("llama"));
  EXPECT_THAT(r.out, HasSubstr("576"));
  EXPECT_THAT(r.out, HasSubstr("blk.29.ffn_down.weight"));
  EXPECT_THAT(r.out, HasSubstr("Q4_1"));
  EXPECT_THAT(r.out, HasSubstr("49152"));
}

TEST(CliBadInput, MissingFile) {
  expect_clean_failure(run_cli("generate --model /no/such/model.gguf --prompt hi"), "/no/such/model.gguf");
}

TEST(CliBadInput, DirectoryWithoutModel) {
  const fs::path dir = scratch("empty_dir");
  fs::create_directories(dir);
  expect_clean_failure(run_cli("generate --model " + quote(dir) + " --prompt hi"), dir.filename().string());
}

TEST(CliBadInput, ZeroLengthGguf) {
  const fs::path p = scratch("empty.gguf");
  write_bytes(p, "");
  expect_clean_failure(run_cli("generate --model " + quote(p) + " --prompt hi"), "empty.gguf");
  expect_clean_failure(run_cli("inspect " + quote(p)), "empty.gguf");
}

TEST(CliBadInput, BadMagic) {
  const fs::path p = scratch("bad_magic.gguf");
  write_bytes(p, std::string("NOPE") + std::string(60, '\0'));
  expect_clean_failure(run_cli("inspect " + quote(p)), "magic");
}

TEST(CliBadInput, WrongVersion) {
  const fs::path p = scratch("v9.gguf");
  std::string bytes(24, '\0');  // magic, then version 9 (little-endian), then zero counts
  bytes.replace(0, 4, "GGUF");
  bytes[4] = '\x09';
  write_bytes(p, bytes);
  expect_clean_failure(run_cli("inspect " + quote(p)), "version");
}

TEST(CliBadInput, TruncatedRealModel) {
  if (!have_default_model()) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const fs::path p = scratch("truncated.gguf");
  std::ifstream in(specula::resolve_model_path("default"), std::ios::binary);
  std::string head(1 << 20, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  write_bytes(p, head);
  expect_clean_failure(run_cli("generate --model " + quote(p) + " --prompt hi"), "truncated.gguf");
}

TEST(CliBadInput, PromptLongerThanContext) {
  if (!have_default_model()) {
    GTEST_SKIP() << "skipped: default model not downloaded";
  }
  const fs::path p = scratch("long_prompt.txt");
  std::string text;
  for (int i = 0; i < 9000; ++i) text += "word" + std::to_string(i) + " ";
  write_bytes(p, text);
  expect_clean_failure(run_cli("generate --model default --prompt-file " + quote(p) + " --max-tokens 4"), "context");
}

TEST(CliBadInput, InvalidFlagValues) {
  expect_clean_failure(run_cli("generate --model default --prompt hi --max-tokens -3"), "max-tokens");
  expect_clean_failure(run_cli("generate --model default --prompt hi --temperature banana"), "temperature");
  expect_clean_failure(run_cli("generate --model default --prompt hi --top-p 1.5"), "top-p");
  expect_clean_failure(run_cli("generate --model default --prompt hi --kv-block-size 4"), "kv-block-size");
  expect_clean_failure(run_cli("generate --model default"), "--prompt");
  expect_clean_failure(run_cli("generate --model default --prompt a --prompt-file b"), "prompt");
  expect_clean_failure(run_cli("frobnicate"), "subcommand");
}

TEST(CliBadInput, MissingPromptFile) {
  expect_clean_failure(run_cli("generate --model default --prompt-file /no/such/prompt.txt"), "/no/such/prompt.txt");
}

TEST(CliHelp, DescribesEveryGenerateFlag) {
  const auto r = run_cli("generate --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--model", "--prompt", "--prompt-file", "--chat", "--max-tokens", "--temperature", "--top-k",
                           "--top-p", "--seed", "--json"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

}  // namespace

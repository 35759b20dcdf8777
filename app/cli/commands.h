#pragma once
// specula-cli subcommands. Each returns the process exit code and prints its own errors as
// one line on stderr: "specula-cli: <what failed, and where>".
#include <cstdint>
#include <optional>
#include <string>

namespace specula::cli {

struct GenerateArgs {
  std::string model = "default";
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_file;
  bool chat = false;
  int max_tokens = 128;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  int kv_block_size = 16;
  bool json = false;
};

int run_generate(const GenerateArgs& args);
int run_inspect(const std::string& model);
int run_tokenize(const std::string& model, const std::string& text, bool parse_special);

}  // namespace specula::cli

#pragma once
// specula-cli subcommands. Each returns the process exit code and prints its own errors as
// one line on stderr: "specula-cli: <what failed, and where>".
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/core/expected.h"
#include "engine/model/loader.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"

namespace specula::cli {

// Speculative decoding flags, shared by generate and specbench.
struct SpeculationArgs {
  std::string drafter = "none";          // none | ngram | layerskip | model
  std::optional<std::string> draft_model;
  std::string tree = "chain:4";          // chain:K | static:B1,B2,... | dynamic:DEPTH,TOPK,TOTAL
  std::optional<std::string> accept;     // greedy | sample | cascade:TAU (default: greedy at
                                         // temperature 0, else sample)
  std::string layers = "every-other";    // layerskip subset
  int ngram_n = 3;
  int ngram_min = 1;
  int ngram_max_length = 0;
  bool no_controller = false;
};

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
  SpeculationArgs spec;
  bool shadow = false;
};

struct SpecbenchArgs {
  std::string model = "default";
  std::string data;
  int limit = 0;  // items per category, 0 = all
  int max_tokens = 64;
  int threads = 0;
  int kv_block_size = 16;
  bool json = false;
  std::optional<std::string> out;  // also write the JSON report here
  SpeculationArgs spec;
};

// Shared by the subcommand files (eval_commands.cpp, ...).
// A model argument: a path, or "default" (with a hint when it is not downloaded).
Expected<Model> load(const std::string& spec);
// Everything about the speculation flags that can be checked before a model is loaded.
Status check_speculation_flags(const SpeculationArgs& spec, float temperature);
// nullptr for --drafter none.
Expected<std::unique_ptr<Drafter>> make_drafter(const SpeculationArgs& spec, const Model& target, int threads,
                                                int kv_block_size);
SpeculativeOptions speculative_options(const SpeculationArgs& spec, int max_tokens, const SamplingParams& sampling,
                                       int kv_block_size);

int run_generate(const GenerateArgs& args);
int run_specbench(const SpecbenchArgs& args);
int run_inspect(const std::string& model);
int run_tokenize(const std::string& model, const std::string& text, bool parse_special);

}  // namespace specula::cli

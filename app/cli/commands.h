#pragma once
// specula-cli subcommands. Each returns the process exit code and prints its own errors as
// one line on stderr: "specula-cli: <what failed, and where>".
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/expected.h"
#include "engine/model/loader.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"

namespace specula::cli {

// Speculative decoding flags, shared by generate and specbench.
struct SpeculationArgs {
  std::string drafter = "none";  // none | ngram | layerskip | model | head | ngram+head
  std::optional<std::string> draft_model;
  std::optional<std::string> draft_head;  // --drafter head / ngram+head: the head file (engine/spec/head_drafter.h)
  std::string tree = "chain:4";           // chain:K | static:B1,B2,... | dynamic:DEPTH,TOPK,TOTAL
  std::optional<std::string> accept;      // greedy | sample | cascade:TAU (default: greedy at
                                          // temperature 0, else sample)
  std::string layers = "every-other";     // layerskip subset
  std::string draft_backend = "auto";     // layerskip/model drafts: auto (the target's backend) | cpu | cuda
  int ngram_n = 3;
  int ngram_min = 1;
  int ngram_max_length = 0;
  double ngram_min_confidence = 0.2;  // NgramOptions::min_confidence (0 = fill the tree shape)
  double head_min_confidence = 0.5;   // DraftHeadOptions::min_confidence (0 = fill the tree shape)
  int ngram_history = 0;              // NgramOptions::history_tokens (0 = this sequence only)
  bool no_controller = false;
  std::string sparse = "strict";             // strict | sa | sa-reuse | sffn | smoe | hybrid | ssv-exact | ssv-approx
  std::optional<std::string> sparse_config;  // JSON file: every sparse parameter (overrides --sparse)
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
  std::optional<std::string> record;     // session database to write
  std::string record_level = "summary";  // summary | full
  bool overwrite = false;                // replace an existing session file
  std::string precision = "f32";         // f32 | int8 (activations of the target's matmuls)
  std::string backend = "auto";          // auto | cpu | cuda (auto: cuda when a GPU is present)
  std::optional<std::string> synthetic;  // random weights of a known shape, e.g. llama-3.1-8b
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
  std::string precision = "f32";
  std::string backend = "auto";  // auto | cpu | cuda, as generate's
};

// A Spec-Bench style JSONL file's first turns (limit: items per category, 0 = all); the eight
// MT-bench categories count as one, "mt_bench".
struct BenchItem {
  std::string category;
  std::string prompt;
};
Expected<std::vector<BenchItem>> read_specbench(const std::string& path, int limit);
// Prints "specula-cli: <message>" as one line on stderr and returns the exit code 1.
int fail(const std::string& message);
// A model by path, HF directory or "default".
Expected<Model> load(const std::string& spec);
// Everything about the speculation flags that can be checked before a model is loaded.
Status check_speculation_flags(const SpeculationArgs& spec, float temperature);
// The target's backend for --backend `kind` under these flags: the head drafter needs the CPU
// backend's features, so with it auto means cpu and cuda is refused.
Expected<std::string> target_backend_kind(const SpeculationArgs& spec, const std::string& kind);
// nullptr for --drafter none. target_backend: the backend the target runs on ("cpu" | "cuda"),
// where --draft-backend auto puts a layerskip or model drafter.
// target_pool: the CPU target's threads, which a head drafter then shares (null: its own).
Expected<std::unique_ptr<Drafter>> make_drafter(const SpeculationArgs& spec, const Model& target, int threads,
                                                int kv_block_size, const std::string& target_backend = "cpu",
                                                ThreadPool* target_pool = nullptr);
SpeculativeOptions speculative_options(const SpeculationArgs& spec, int max_tokens, const SamplingParams& sampling,
                                       int kv_block_size);
// --sparse / --sparse-config, checked against the model (calibration files included).
Expected<SparseConfig> sparse_config(const SpeculationArgs& spec, const Model& model);

int run_generate(const GenerateArgs& args);
int run_specbench(const SpecbenchArgs& args);
int run_inspect(const std::string& model);
int run_tokenize(const std::string& model, const std::string& text, bool parse_special);

}  // namespace specula::cli

#pragma once
// specula-cli eval: task scores of strict verification and of a verification configuration,
// their agreement, mean accepted lengths and KV bytes read (engine/eval/runner.h).
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/cli/commands.h"

namespace specula::cli {

struct EvalArgs {
  std::string task;
  std::string model = "default";
  std::optional<std::string> data;
  std::optional<int> limit;        // items; unset = all (passkey: 20)
  int64_t context = 4096;          // lcc and passkey prompt size in tokens
  uint64_t seed = 0;               // passkey keys and depths
  std::optional<int> max_tokens;   // per item; unset = the task's own
  int threads = 0;
  int kv_block_size = 16;
  bool json = false;
  bool per_item = false;
  std::optional<std::string> out;
  bool few_shot = false;           // gsm8k: solved examples up to `context` tokens
  int first = 0;                   // items skipped at the start (to split a task across processes)
  std::vector<std::string> sweep;  // sparse config files, each compared with one shared strict run
  SpeculationArgs spec;
};

using SpeculationFlagAdder = void (*)(CLI::App*, SpeculationArgs&);

// Adds `eval` to the CLI. The handle holds the parsed flags; after parsing, run it when chosen().
class EvalCommand {
 public:
  EvalCommand(CLI::App& app, SpeculationFlagAdder add_speculation_flags);
  bool chosen() const { return command_->parsed(); }
  int run() const;

 private:
  std::unique_ptr<EvalArgs> args_;  // stable address for CLI11's bindings
  CLI::App* command_ = nullptr;
};

int run_eval(const EvalArgs& args);

}  // namespace specula::cli

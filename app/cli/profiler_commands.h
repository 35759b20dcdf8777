#pragma once
// specula-cli export / import-nsys / diff: the session database's way out to other tools.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace specula::cli {

class ProfilerCommands {
 public:
  explicit ProfilerCommands(CLI::App& app);
  // The exit code when one of these subcommands was chosen, nullopt otherwise.
  std::optional<int> run() const;

 private:
  CLI::App* export_ = nullptr;
  CLI::App* import_ = nullptr;
  CLI::App* diff_ = nullptr;
  std::string session_, format_ = "perfetto", out_;
  std::string capture_, import_out_;
  bool overwrite_ = false;
  std::string diff_a_, diff_b_;
  bool diff_json_ = false;
  int top_kernels_ = 10;
};

}  // namespace specula::cli

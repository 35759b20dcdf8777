#pragma once
// specula-cli calibrate-moe: per-layer expert-skip thresholds for sparse MoE verification
// (engine/model/moe_calibration.h).
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace specula::cli {

class MoeCommands {
 public:
  explicit MoeCommands(CLI::App& app);
  std::optional<int> run() const;  // nullopt when calibrate-moe was not chosen

 private:
  CLI::App* calibrate_ = nullptr;
  std::string model_ = "default", data_, out_;
  int limit_ = 0, max_tokens_ = 512, threads_ = 0;
};

}  // namespace specula::cli

#pragma once
// specula-cli calibrate: inter-layer reuse calibration for sparse verification.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace specula::cli {

class SparseCommands {
 public:
  explicit SparseCommands(CLI::App& app);
  std::optional<int> run() const;

 private:
  CLI::App* calibrate_ = nullptr;
  std::string model_ = "default", data_, out_;
  int limit_ = 2, anchors_ = 15, max_tokens_ = 32, threads_ = 0, block_size_ = 16;
  double eta_ = 0.2;
};

}  // namespace specula::cli

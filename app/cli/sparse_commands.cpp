#include "app/cli/sparse_commands.h"

#include <cstdio>

#include "app/cli/commands.h"
#include "engine/model/model_identity.h"
#include "engine/sparse/calibration.h"

namespace specula::cli {
SparseCommands::SparseCommands(CLI::App& app) {
  calibrate_ = app.add_subcommand("calibrate", "Pick sparse-verification anchor layers from calibration prompts");
  calibrate_->add_option("--model,-m", model_, "Model (GGUF, HF directory or 'default')")->capture_default_str();
  calibrate_->add_option("--data", data_, "Calibration prompts, Spec-Bench JSONL")->required();
  calibrate_->add_option("--limit", limit_, "Prompts per category (0 = all)")->check(CLI::Range(0, 100000))->capture_default_str();
  calibrate_->add_option("--anchors", anchors_, "Anchor layers to pick (layer 0 included)")->check(CLI::Range(1, 1024))->capture_default_str();
  calibrate_->add_option("--eta", eta_, "Kept fraction of blocks while measuring")->check(CLI::Range(0.01, 1.0))->capture_default_str();
  calibrate_->add_option("--max-tokens", max_tokens_, "Tokens generated per prompt")->check(CLI::Range(1, 4096))->capture_default_str();
  calibrate_->add_option("--kv-block-size", block_size_, "Tokens per KV block")->check(CLI::Range(8, 128))->capture_default_str();
  calibrate_->add_option("--threads", threads_, "CPU threads (0 = all cores)")->capture_default_str();
  calibrate_->add_option("--out", out_, "Calibration file to write (JSON)")->required();
}

std::optional<int> SparseCommands::run() const {
  if (!*calibrate_) return std::nullopt;
  auto items = read_specbench(data_, limit_);
  if (!items) return fail(items.error().message);
  auto model = load(model_);
  if (!model) return fail(model.error().message);
  const int n_layers = static_cast<int>(model->config.n_layers);
  if (anchors_ > n_layers) return fail("--anchors " + std::to_string(anchors_) + " exceeds the model's " + std::to_string(n_layers) + " layers");
  auto sha = model_sha256(model->path);
  if (!sha) return fail(sha.error().message);

  std::vector<std::string> prompts;
  for (const auto& item : *items) prompts.push_back(item.prompt);
  CalibrationOptions options;
  options.anchors = anchors_;
  options.eta = eta_;
  options.max_tokens = max_tokens_;
  options.kv_block_size = block_size_;
  options.threads = threads_;
  auto calibrated = run_calibration(*model, *sha, prompts, options, [](int done, int total) {
    std::fprintf(stderr, "\rcalibrating: %d/%d prompts", done, total);
    std::fflush(stderr);
  });
  std::fputc('\n', stderr);
  if (!calibrated) {  // prompt failures name themselves; the layer check reads as calibrate's
    const std::string& message = calibrated.error().message;
    return fail(message.rfind("calibration", 0) == 0 ? message : "calibrate: " + message);
  }
  Calibration& c = *calibrated;
  c.settings["data"] = data_;
  if (Status s = save_calibration(c, out_); !s) return fail(s.error().message);
  std::string anchors;
  for (int a : c.anchors) anchors += (anchors.empty() ? "" : ",") + std::to_string(a);
  std::fprintf(stderr, "anchors (%d of %d layers): %s; written to %s\n", anchors_, n_layers, anchors.c_str(), out_.c_str());
  return 0;
}

}  // namespace specula::cli

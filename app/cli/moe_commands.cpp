#include "app/cli/moe_commands.h"

#include <cstdio>
#include <fstream>

#include "app/cli/commands.h"
#include "engine/model/model_identity.h"
#include "engine/model/moe_calibration.h"

namespace specula::cli {
namespace {

// Prompts from a Spec-Bench JSONL file (first turns), or else one per non-empty line of text.
Expected<std::vector<std::string>> read_prompts(const std::string& path, int limit) {
  if (path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0) {
    auto items = read_specbench(path, limit);
    if (!items) return items.error();
    std::vector<std::string> prompts;
    for (auto& item : *items) prompts.push_back(std::move(item.prompt));
    return prompts;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path + ": cannot open the calibration data");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    prompts.push_back(line);
    if (limit > 0 && static_cast<int>(prompts.size()) >= limit) break;
  }
  if (prompts.empty()) return make_error(path + ": no calibration text");
  return prompts;
}

}  // namespace

MoeCommands::MoeCommands(CLI::App& app) {
  calibrate_ = app.add_subcommand("calibrate-moe", "Per-layer expert-skip thresholds for sparse MoE verification");
  calibrate_->add_option("--model,-m", model_, "MoE model (GGUF or HF directory)")->capture_default_str();
  calibrate_->add_option("--data", data_, "Calibration prompts: Spec-Bench JSONL (*.jsonl) or text, one prompt a line")
      ->required();
  calibrate_->add_option("--limit", limit_, "Prompts to use (JSONL: per category; 0 = all)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  calibrate_->add_option("--max-tokens", max_tokens_, "Tokens kept per prompt (longer prompts are cut)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  calibrate_->add_option("--threads", threads_, "CPU threads (0 = all cores)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  calibrate_->add_option("--out", out_, "Thresholds file to write (JSON)")->required();
}

std::optional<int> MoeCommands::run() const {
  if (!*calibrate_) return std::nullopt;
  auto prompts = read_prompts(data_, limit_);
  if (!prompts) return fail(prompts.error().message);
  auto model = load(model_);
  if (!model) return fail(model.error().message);
  if (!model->config.is_moe()) {
    return fail("calibrate-moe: " + model->path.string() + " (" + model->config.architecture +
                ") has no MoE layers; expert skipping applies to MoE models only");
  }
  auto sha = model_sha256(model->path);
  if (!sha) return fail(sha.error().message);

  const int64_t cap = std::min<int64_t>(max_tokens_, model->config.context_length);
  std::vector<std::vector<int32_t>> sequences;
  for (const std::string& prompt : *prompts) {
    std::vector<int32_t> tokens;
    if (model->tokenizer.add_bos() && model->tokenizer.bos_id() >= 0) tokens.push_back(model->tokenizer.bos_id());
    const auto ids = model->tokenizer.encode(prompt, false);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    if (static_cast<int64_t>(tokens.size()) > cap) tokens.resize(static_cast<size_t>(cap));
    if (!tokens.empty()) sequences.push_back(std::move(tokens));
  }
  CpuTransformer transformer(*model, {threads_, Precision::Default});
  auto thresholds = calibrate_moe(transformer, sequences);
  if (!thresholds) return fail(thresholds.error().message);
  thresholds->model_sha256 = *sha;
  thresholds->settings = {{"data", data_}, {"prompts", sequences.size()}, {"max_tokens", max_tokens_}};
  if (Status s = save_moe_thresholds(*thresholds, out_); !s) return fail(s.error().message);
  std::fprintf(stderr, "calibrate-moe: %lld tokens over %zu prompts, %d layers x %d skip counts; written to %s\n",
               static_cast<long long>(thresholds->tokens), sequences.size(), thresholds->n_layers,
               thresholds->experts_per_token - 1, out_.c_str());
  return 0;
}

}  // namespace specula::cli

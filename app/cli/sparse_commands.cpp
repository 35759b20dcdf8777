#include "app/cli/sparse_commands.h"

#include <cstdio>

#include "app/cli/commands.h"
#include "engine/model/model_identity.h"
#include "engine/sparse/calibration.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"

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

  // Every layer refreshes; sparsity is on from the first token so short prompts select too.
  SpeculativeOptions options;
  options.max_tokens = max_tokens_;
  options.kv_block_size = block_size_;
  options.controller.enabled = false;
  options.sparse = *sparse_preset("sa");
  options.sparse.dense_below = 0;
  options.sparse.eta = eta_;
  LayerSimilarity similarity(n_layers);
  options.observer = &similarity;
  SpeculativeEngine engine(*model, threads_);
  auto drafter = make_ngram_drafter();
  for (size_t i = 0; i < items->size(); ++i) {
    const ChatMessage user{"user", (*items)[i].prompt};
    const std::string text = model->tokenizer.apply_chat_template(std::span(&user, 1), true);
    std::vector<int32_t> prompt;
    if (model->tokenizer.add_bos() && model->tokenizer.bos_id() >= 0) prompt.push_back(model->tokenizer.bos_id());
    const auto ids = model->tokenizer.encode(text, true);
    prompt.insert(prompt.end(), ids.begin(), ids.end());
    auto run = engine.generate(prompt, drafter.get(), options, nullptr);
    if (!run) return fail("calibration prompt " + std::to_string(i + 1) + ": " + run.error().message);
    std::fprintf(stderr, "\rcalibrating: %zu/%zu prompts", i + 1, items->size());
    std::fflush(stderr);
  }
  std::fputc('\n', stderr);
  Calibration c;
  c.model_name = model->config.name;
  c.model_sha256 = *sha;
  c.n_layers = n_layers;
  c.jaccard_prev = similarity.mean_jaccard_prev();
  // Anchors picked from layers that were never compared would be noise: refuse instead.
  for (int l = 1; l < n_layers; ++l) {
    if (c.jaccard_prev[static_cast<size_t>(l)] < 0) {
      return fail("calibrate: layer " + std::to_string(l) + " never dropped a block (the contexts are too short for " +
                  "the budget: more than " + std::to_string(3 * block_size_) + " tokens are needed); use longer prompts");
    }
  }
  c.anchors = pick_anchors(c.jaccard_prev, anchors_);
  c.settings = {{"data", data_}, {"prompts", items->size()}, {"rounds", similarity.rounds()},
                {"eta", eta_}, {"kv_block_size", block_size_}, {"max_tokens", max_tokens_}};
  if (Status s = save_calibration(c, out_); !s) return fail(s.error().message);
  std::string anchors;
  for (int a : c.anchors) anchors += (anchors.empty() ? "" : ",") + std::to_string(a);
  std::fprintf(stderr, "anchors (%d of %d layers): %s; written to %s\n", anchors_, n_layers, anchors.c_str(), out_.c_str());
  return 0;
}

}  // namespace specula::cli

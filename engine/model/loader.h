#pragma once
// Loads a model from a GGUF file or a Hugging Face directory (config.json + safetensors +
// tokenizer.json) into ModelConfig + ModelWeights + Tokenizer, validating every shape.
#include <filesystem>
#include <functional>
#include <string>

#include "engine/core/expected.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"

namespace specula {

struct Model {
  ModelConfig config;
  ModelWeights weights;
  Tokenizer tokenizer;
  std::filesystem::path path;
  std::string format;  // "gguf" | "safetensors"
};

// "default" -> $SPECULA_MODELS_DIR or <source>/models/SmolLM2-135M-Instruct.Q4_1.gguf.
std::filesystem::path resolve_model_path(const std::string& spec);
// Load progress: the fraction in (0, 1] of the model's tensor bytes read so far, rising to
// exactly 1 at the end; returning false cancels the load (load_model then fails with
// "...: loading cancelled" and nothing stays mapped).
using LoadProgress = std::function<bool(double fraction)>;
// With a progress callback the loader also reads every tensor's pages in file order, so the
// fraction measures real I/O and a cold load can be cancelled; without one it only maps the
// files and the pages arrive on the first forward.
Expected<Model> load_model(const std::filesystem::path& path, const LoadProgress& progress = {});
// Human-readable architecture, hyper-parameters, tokenizer summary and tensor table.
Expected<std::string> describe_model_file(const std::filesystem::path& path);

}  // namespace specula

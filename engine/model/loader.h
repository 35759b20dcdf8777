#pragma once
// Loads a model from a GGUF file or a Hugging Face directory (config.json + safetensors +
// tokenizer.json) into ModelConfig + ModelWeights + Tokenizer, validating every shape.
#include <filesystem>
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
Expected<Model> load_model(const std::filesystem::path& path);
// Human-readable architecture, hyper-parameters, tokenizer summary and tensor table.
Expected<std::string> describe_model_file(const std::filesystem::path& path);

}  // namespace specula

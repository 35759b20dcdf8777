#pragma once
// A model's identity for sessions and calibration files: the SHA-256 of its weights.
//   GGUF file:     sha256 of the file's bytes (the value `sha256sum` prints).
//   HF directory:  sha256 over the lines "<file name>  <sha256 of the file>\n" of config.json,
//                  tokenizer.json and every *.safetensors file, sorted by name, so re-sharding
//                  the same bytes under other names changes it, and nothing else does.
#include <filesystem>
#include <span>
#include <string>

#include "engine/core/expected.h"

namespace specula {

std::string sha256_hex(std::span<const std::byte> bytes);
Expected<std::string> file_sha256(const std::filesystem::path& path);
Expected<std::string> model_sha256(const std::filesystem::path& path);

}  // namespace specula

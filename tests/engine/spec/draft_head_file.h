#pragma once
// Writes draft-head files (engine/spec/head_drafter.h) for tests: random weights of a given
// size, every tensor and metadata field editable, so a test can make the valid file or any
// malformed variant of it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/dequant.h"

namespace specula::testing {

struct HeadTensor {
  std::string dtype;  // "F32", "BF16" or "I32"
  std::vector<int64_t> shape;
  std::vector<float> values;  // F32 / BF16 (BF16 values are already bf16-rounded)
  std::vector<int32_t> ids;   // I32
};

struct HeadFile {
  std::map<std::string, std::string> metadata;
  std::map<std::string, HeadTensor> tensors;

  // Random weights (fixed seed): matrices ~ N(0, 1/fan_in), biases ~ N(0, 0.1), norms ~
  // 1 + N(0, 0.1); vocab_ids = V distinct ids of [0, vocab) in random order. dtype "BF16" rounds.
  static HeadFile random(int64_t H, int64_t F, int64_t V, int64_t vocab, const std::string& dtype = "BF16",
                         uint64_t seed = 7) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    HeadFile f;
    f.metadata = {{"format", "specula-draft-head"},
                  {"version", "1"},
                  {"hidden_size", std::to_string(H)},
                  {"ffn_size", std::to_string(F)},
                  {"vocab_size", std::to_string(vocab)},
                  {"rms_eps", "1e-05"},
                  {"target", "SmolLM2-135M-Instruct.Q4_1.gguf"},
                  {"target_sha256", "test"},
                  {"training", "random weights written by a test"}};
    auto make = [&](std::vector<int64_t> shape, float scale, float offset) {
      HeadTensor t{dtype, shape, {}, {}};
      const auto n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
      t.values.resize(static_cast<size_t>(n));
      for (float& v : t.values) {
        v = offset + scale * normal(rng);
        if (dtype == "BF16") v = round_to_bf16(v);
      }
      return t;
    };
    f.tensors["fc.weight"] = make({H, 2 * H}, 1.0f / std::sqrt(static_cast<float>(2 * H)), 0.0f);
    f.tensors["fc.bias"] = make({H}, 0.1f, 0.0f);
    f.tensors["ffn_norm.weight"] = make({H}, 0.1f, 1.0f);
    f.tensors["ffn_gate.weight"] = make({F, H}, 1.0f / std::sqrt(static_cast<float>(H)), 0.0f);
    f.tensors["ffn_up.weight"] = make({F, H}, 1.0f / std::sqrt(static_cast<float>(H)), 0.0f);
    f.tensors["ffn_down.weight"] = make({H, F}, 1.0f / std::sqrt(static_cast<float>(F)), 0.0f);
    f.tensors["out_norm.weight"] = make({H}, 0.1f, 1.0f);
    std::vector<int32_t> all(static_cast<size_t>(vocab));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(static_cast<size_t>(V));
    f.tensors["vocab_ids"] = HeadTensor{"I32", {V}, {}, all};
    return f;
  }

  // safetensors: 8-byte header length, JSON header, data (tensors in name order).
  void write(const std::filesystem::path& path) const {
    nlohmann::json header;
    header["__metadata__"] = metadata;
    std::vector<char> data;
    for (const auto& [name, t] : tensors) {
      const size_t begin = data.size();
      if (t.dtype == "I32") {
        const auto* p = reinterpret_cast<const char*>(t.ids.data());
        data.insert(data.end(), p, p + t.ids.size() * 4);
      } else if (t.dtype == "F32") {
        const auto* p = reinterpret_cast<const char*>(t.values.data());
        data.insert(data.end(), p, p + t.values.size() * 4);
      } else {  // BF16: the upper half of each (already rounded) f32
        for (float v : t.values) {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          const auto hi = static_cast<uint16_t>(bits >> 16);
          data.push_back(static_cast<char>(hi & 0xFF));
          data.push_back(static_cast<char>(hi >> 8));
        }
      }
      header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    const std::string text = header.dump();
    const uint64_t length = text.size();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
};

}  // namespace specula::testing

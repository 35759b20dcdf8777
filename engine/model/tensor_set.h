#pragma once
// The tensors of one model file (or HF shard set) by their GGUF-style name, and the checked
// lookup every loader path uses (shared by loader.cpp and moe_loader.cpp).
#include <map>
#include <string>
#include <vector>

#include "engine/core/expected.h"
#include "engine/model/weights.h"

namespace specula {

struct TensorSet {
  std::map<std::string, TensorRef> by_name;
  std::map<std::string, std::string> source_name;  // GGUF name -> name in the file, for messages
  bool has(const std::string& name) const { return by_name.count(name) != 0; }
};

// "tensor 'x'" or "tensor 'model.layers.0...' (blk.0...)" when the file names it differently.
std::string describe_tensor_name(const TensorSet& set, const std::string& name);

// Looks up `name`, checks its shape (ggml order) and that its type can be dequantized.
Expected<TensorRef> take_tensor(const TensorSet& set, const std::string& name, const std::vector<int64_t>& expected,
                                const char* shape_meaning, const std::string& origin);

}  // namespace specula

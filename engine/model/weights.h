#pragma once
// Model weights as typed views, named with GGUF's llama tensor names whatever the source
// (the HF loader maps model.layers.N.self_attn.q_proj.weight -> blk.N.attn_q.weight).
// Views point into an mmap'ed GGUF/safetensors file, kept alive by `storage`.
#include <any>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/formats/tensor_type.h"
#include "engine/model/model_config.h"

namespace specula {

struct TensorRef {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> shape;       // ggml order: shape[0] = row length (input features)
  std::span<const std::byte> data;  // raw bytes in `type`'s layout
  int64_t rows() const { return shape.size() > 1 ? shape[1] : 1; }
  int64_t cols() const { return shape.empty() ? 0 : shape[0]; }
};

struct LayerWeights {
  TensorRef attn_norm;    // (dim) f32
  TensorRef wq;           // (n_heads * head_dim, dim)      ggml shape [dim, n_heads*head_dim]
  TensorRef wk;           // (n_kv_heads * head_dim, dim)
  TensorRef wv;           // (n_kv_heads * head_dim, dim)
  TensorRef wo;           // (dim, n_heads * head_dim)
  TensorRef ffn_norm;     // (dim)
  TensorRef w_gate;       // (ffn_dim, dim)
  TensorRef w_up;         // (ffn_dim, dim)
  TensorRef w_down;       // (dim, ffn_dim)
};

struct ModelWeights {
  TensorRef token_embd;   // (vocab, dim)
  TensorRef output_norm;  // (dim)
  TensorRef output;       // (vocab, dim); same view as token_embd when tied
  std::vector<LayerWeights> layers;
  std::vector<std::shared_ptr<const void>> storage;  // mappings / owned buffers behind the views
};

}  // namespace specula

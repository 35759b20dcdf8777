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

// One SwiGLU expert: down · (silu(gate · x) ⊙ (up · x)).
struct ExpertWeights {
  TensorRef gate;         // (ffn, dim)
  TensorRef up;           // (ffn, dim)
  TensorRef down;         // (dim, ffn)
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
  // Optional (data empty when absent).
  TensorRef bq, bk, bv;   // q/k/v projection biases: (n_heads*head_dim), (n_kv_heads*head_dim) x2
  TensorRef bo;           // output projection bias (dim)
  TensorRef q_norm;       // QkNorm::PerHead: (head_dim); QkNorm::Full: (n_heads*head_dim)
  TensorRef k_norm;       // QkNorm::PerHead: (head_dim); QkNorm::Full: (n_kv_heads*head_dim)
  // MoE layers have a router and no w_gate/w_up/w_down. Expert views may slice one stacked
  // 3D tensor (GGUF's ffn_*_exps) or be separate tensors (HF's mlp.experts.N.*).
  TensorRef router;                   // (n_experts, dim)
  std::vector<ExpertWeights> experts; // n_experts, each expert_ffn_dim wide
  ExpertWeights shared_expert;        // shared_expert_ffn_dim wide (Qwen2-MoE); empty otherwise
  TensorRef shared_expert_gate;       // (1, dim): sigmoid(shared_expert_gate · x) scales the shared expert
  bool is_moe() const { return !router.data.empty(); }
};

struct ModelWeights {
  TensorRef token_embd;   // (vocab, dim)
  TensorRef output_norm;  // (dim)
  TensorRef output;       // (vocab, dim); same view as token_embd when tied
  std::vector<LayerWeights> layers;
  std::vector<std::shared_ptr<const void>> storage;  // mappings / owned buffers behind the views
};

}  // namespace specula

#pragma once
// Hyper-parameters of a loaded model, whatever file it came from.
#include <cstdint>
#include <string>

namespace specula {

// How RoPE pairs dimensions. GGUF's llama converter permutes the rows of Q and K so that
// rotation pairs are adjacent (ggml "normal" mode); Hugging Face checkpoints keep the
// original order, where dimension i pairs with i + head_dim/2 (rotate_half, "NeoX" mode).
enum class RopeStyle { AdjacentPairs, HalfSplit };

// RMSNorm of q and k after their projections, before RoPE (each with its own weight).
enum class QkNorm {
  None,
  PerHead,  // over each head's head_dim values (Qwen3-MoE): weight (head_dim)
  Full,     // over the whole projection (OLMoE): weights (n_heads*head_dim) and (n_kv_heads*head_dim)
};

struct ModelConfig {
  std::string architecture;     // "llama" (Llama, SmolLM2, Mistral-dense) | "mixtral" | "qwen2_moe" | "qwen3_moe" | "olmoe"
  std::string name;             // general.name or the directory name
  int64_t n_layers = 0;
  int64_t dim = 0;              // hidden size
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;         // dim / n_heads unless the file says otherwise
  int64_t ffn_dim = 0;          // SwiGLU intermediate size
  int64_t vocab_size = 0;
  int64_t context_length = 0;   // trained context; prompts longer than this are refused
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false; // output projection reuses token_embd
  RopeStyle rope_style = RopeStyle::AdjacentPairs;
  QkNorm qk_norm = QkNorm::None;
  bool qkv_bias = false;        // q/k/v projections add a bias (Qwen2-MoE; attention_bias in Qwen3-MoE/OLMoE)
  bool output_bias = false;     // the output projection adds a bias (attention_bias in Qwen3-MoE/OLMoE)
  float clip_qkv = 0.0f;        // OLMoE: q, k, v clamped to [-clip, clip] after the q/k norms; 0 = off

  // Mixture of experts (engine/model/moe.h). n_experts == 0: every layer has the dense FFN.
  int64_t n_experts = 0;             // routed experts per MoE layer
  int64_t n_experts_used = 0;        // top-k experts per token
  int64_t expert_ffn_dim = 0;        // SwiGLU intermediate size of one routed expert
  int64_t shared_expert_ffn_dim = 0; // Qwen2-MoE's sigmoid-gated shared expert; 0 = none
  bool norm_topk_prob = false;       // top-k routing weights renormalized to sum 1 (Mixtral, Qwen3-MoE)
  bool is_moe() const { return n_experts > 0; }
};

}  // namespace specula

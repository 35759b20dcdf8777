#pragma once
// Hyper-parameters of a loaded model, whatever file it came from.
#include <cstdint>
#include <string>

namespace specula {

// How RoPE pairs dimensions. GGUF's llama converter permutes the rows of Q and K so that
// rotation pairs are adjacent (ggml "normal" mode); Hugging Face checkpoints keep the
// original order, where dimension i pairs with i + head_dim/2 (rotate_half, "NeoX" mode).
enum class RopeStyle { AdjacentPairs, HalfSplit };

struct ModelConfig {
  std::string architecture;     // "llama" (the llama family: Llama, SmolLM2, Mistral-dense)
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
};

}  // namespace specula

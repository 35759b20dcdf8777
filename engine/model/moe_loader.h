#pragma once
// What the MoE architectures add to the llama loader: their configuration (GGUF keys and
// config.json fields), their tensor names, and the per-layer tensors beyond llama's (attention
// biases, q/k norms, router, routed experts, shared expert). Supported layouts:
//   Mixtral     GGUF arch "llama" with <arch>.expert_count > 0 (Q/K rows permuted for
//               adjacent-pair RoPE), HF model_type "mixtral"; softmax top-k renormalized
//   Qwen2-MoE   GGUF "qwen2moe", HF "qwen2_moe"; q/k/v biases, sigmoid-gated shared expert
//   Qwen3-MoE   GGUF "qwen3moe", HF "qwen3_moe"; per-head q/k RMSNorm, top-k renormalized
//   OLMoE       GGUF "olmoe", HF "olmoe"; q/k RMSNorm over the whole projection, optional clip
// Anything else with experts (DeepSeek, Phi-MoE, DBRX, Granite-MoE, sigmoid gating, expert
// groups, mixed dense/MoE layer schedules, transformers' fused in-memory expert tensors) is
// refused with a message naming what is not supported.
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/expected.h"
#include "engine/formats/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/tensor_set.h"
#include "engine/model/weights.h"

namespace specula {

// general.architecture values the loader reads (llama's keys, under this prefix).
bool is_supported_gguf_arch(const std::string& arch);
inline constexpr const char* kSupportedGgufArchs = "llama, mixtral (llama with experts), qwen2moe, qwen3moe, olmoe";
// After the llama keys: experts, q/k norms, biases, RoPE pairing and the per-architecture
// routing facts llama.cpp hard-codes (top-k renormalization: Mixtral and Qwen3-MoE yes,
// Qwen2-MoE and OLMoE no; <arch>.expert_weights_norm overrides when present).
Status read_gguf_arch_extras(const GgufFile& gguf, const std::string& arch, ModelConfig& config,
                             const std::string& origin);

// config.json model_type values handled here.
bool is_moe_hf_model_type(const std::string& model_type);
inline constexpr const char* kSupportedHfModelTypes = "llama, mistral, mixtral, qwen2_moe, qwen3_moe, olmoe";
Status read_hf_moe_config(const nlohmann::json& doc, const std::string& model_type, ModelConfig& config,
                          const std::string& origin);

// HF parameter name after "model.layers.N." -> this loader's name after "blk.N." for the
// tensors above (experts become "expert.E.ffn_{gate,up,down}.weight"); empty when not one of them.
std::string hf_moe_layer_name(const std::string& suffix);

// Fills the layer's biases, q/k norms and (MoE models) router, experts and shared expert.
Status assemble_layer_extras(const ModelConfig& config, const TensorSet& set, int64_t layer, LayerWeights& out,
                             const std::string& origin);

}  // namespace specula

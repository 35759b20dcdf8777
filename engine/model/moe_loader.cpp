#include "engine/model/moe_loader.h"

#include <map>
#include <optional>
#include <set>

namespace specula {
namespace {

using nlohmann::json;

std::string in_quotes(const std::string& text) { return "'" + text + "'"; }

Status check_moe_counts(const ModelConfig& c, const std::string& origin) {
  if (c.n_experts <= 0)
    return make_error(origin + ": expert count is " + std::to_string(c.n_experts) + ", must be > 0");
  if (c.n_experts_used <= 0 || c.n_experts_used > c.n_experts) {
    return make_error(origin + ": experts per token is " + std::to_string(c.n_experts_used) + ", must be in 1.." +
                      std::to_string(c.n_experts));
  }
  if (c.expert_ffn_dim <= 0) {
    return make_error(origin + ": expert feed-forward size is " + std::to_string(c.expert_ffn_dim) + ", must be > 0");
  }
  if (c.shared_expert_ffn_dim < 0) return make_error(origin + ": shared expert feed-forward size is negative");
  if (c.clip_qkv < 0) return make_error(origin + ": clip_qkv is negative");
  return {};
}

// ---- GGUF ----------------------------------------------------------------------------------

struct GgufReader {
  const GgufFile& gguf;
  std::string prefix;  // "<arch>."
  std::optional<Error> error;

  int64_t integer(const std::string& key, std::optional<int64_t> fallback) {
    if (!gguf.find(prefix + key)) {
      if (!fallback && !error) error = make_error("missing key " + in_quotes(prefix + key));
      return fallback.value_or(0);
    }
    auto value = gguf.get_int(prefix + key);
    if (!value && !error) error = value.error();
    return value ? *value : 0;
  }
  float number(const std::string& key, float fallback) {
    if (!gguf.find(prefix + key)) return fallback;
    auto value = gguf.get_float(prefix + key);
    if (!value && !error) error = value.error();
    return value ? static_cast<float>(*value) : fallback;
  }
  std::optional<bool> flag(const std::string& key) {
    const GgufValue* value = gguf.find(prefix + key);
    if (!value) return std::nullopt;
    auto b = value->as_bool();
    if (!b && !error) error = make_error(in_quotes(prefix + key) + " is not a bool");
    return b;
  }
};

}  // namespace

bool is_supported_gguf_arch(const std::string& arch) {
  return arch == "llama" || arch == "qwen2moe" || arch == "qwen3moe" || arch == "olmoe";
}

Status read_gguf_arch_extras(const GgufFile& gguf, const std::string& arch, ModelConfig& config,
                             const std::string& origin) {
  GgufReader r{gguf, arch + ".", std::nullopt};
  config.n_experts = r.integer("expert_count", arch == "llama" ? std::optional<int64_t>(0) : std::nullopt);
  if (r.error) return make_error(origin + ": " + r.error->message);
  config.rope_style = arch == "llama" ? RopeStyle::AdjacentPairs : RopeStyle::HalfSplit;
  config.qkv_bias = gguf.find_tensor("blk.0.attn_q.bias") != nullptr;
  config.output_bias = gguf.find_tensor("blk.0.attn_output.bias") != nullptr;
  if (arch == "llama") {
    if (config.n_experts == 0) return {};  // dense llama
    config.architecture = "mixtral";
    config.norm_topk_prob = true;
  } else if (arch == "qwen2moe") {
    config.architecture = "qwen2_moe";
  } else if (arch == "qwen3moe") {
    config.architecture = "qwen3_moe";
    config.qk_norm = QkNorm::PerHead;
    config.norm_topk_prob = true;
  } else if (arch == "olmoe") {
    config.architecture = "olmoe";
    config.qk_norm = QkNorm::Full;
    config.clip_qkv = r.number("attention.clamp_kqv", 0.0f);
  }
  config.n_experts_used = r.integer("expert_used_count", std::nullopt);
  // llama.cpp's fallback when the key is absent: the dense size split over the used experts.
  const int64_t ffn_fallback =
      arch == "qwen2moe" && config.n_experts_used > 0 ? config.ffn_dim / config.n_experts_used : config.ffn_dim;
  config.expert_ffn_dim = r.integer("expert_feed_forward_length", ffn_fallback);
  if (gguf.find_tensor("blk.0.ffn_gate_shexp.weight")) {
    config.shared_expert_ffn_dim = r.integer("expert_shared_feed_forward_length", config.ffn_dim);
  }
  if (auto norm = r.flag("expert_weights_norm")) config.norm_topk_prob = *norm;
  const int64_t gating = r.integer("expert_gating_func", 1);
  const float scale = r.number("expert_weights_scale", 1.0f);
  const int64_t groups = r.integer("expert_group_count", 0);
  const int64_t shared_count = r.integer("expert_shared_count", 0);
  if (r.error) return make_error(origin + ": " + r.error->message);
  if (gating != 1) {
    return make_error(origin + ": " + arch + ".expert_gating_func " + std::to_string(gating) +
                      " is not supported (only 1, softmax)");
  }
  if (scale != 1.0f) return make_error(origin + ": " + arch + ".expert_weights_scale is not supported");
  if (groups > 1)
    return make_error(origin + ": grouped expert routing (" + arch + ".expert_group_count) is not supported");
  if (shared_count > 1) {
    return make_error(origin + ": " + std::to_string(shared_count) + " shared experts (" + arch +
                      ".expert_shared_count) are not supported");
  }
  return check_moe_counts(config, origin);
}

// ---- Hugging Face config.json --------------------------------------------------------------

bool is_moe_hf_model_type(const std::string& model_type) {
  return model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "qwen3_moe" || model_type == "olmoe";
}

Status read_hf_moe_config(const json& doc, const std::string& model_type, ModelConfig& config,
                          const std::string& origin) {
  std::optional<Error> error;
  auto fail = [&](const std::string& what) {
    if (!error) error = make_error(origin + ": " + what);
  };
  auto integer = [&](std::initializer_list<const char*> keys, std::optional<int64_t> fallback) -> int64_t {
    for (const char* key : keys) {
      auto it = doc.find(key);
      if (it == doc.end() || it->is_null()) continue;
      if (!it->is_number_integer()) {
        fail(in_quotes(key) + " is not an integer");
        return 0;
      }
      return it->get<int64_t>();
    }
    if (!fallback) fail("missing integer " + in_quotes(*keys.begin()));
    return fallback.value_or(0);
  };
  auto flag = [&](const char* key, bool fallback) -> bool {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
      fail(in_quotes(key) + " is not true or false");
      return fallback;
    }
    return it->get<bool>();
  };

  if (auto act = doc.find("hidden_act"); act != doc.end() && *act != "silu") {
    return make_error(origin + ": hidden_act " + act->dump() + " is not supported (only silu)");
  }
  config.architecture = model_type;
  config.rope_style = RopeStyle::HalfSplit;
  config.n_experts = integer({"num_experts", "num_local_experts"}, std::nullopt);
  config.n_experts_used = integer({"num_experts_per_tok"}, std::nullopt);
  if (model_type == "mixtral") {
    config.expert_ffn_dim = config.ffn_dim;
    config.norm_topk_prob = true;
  } else if (model_type == "olmoe") {
    config.expert_ffn_dim = config.ffn_dim;
    config.norm_topk_prob = flag("norm_topk_prob", false);
    config.qkv_bias = config.output_bias = flag("attention_bias", false);
    config.qk_norm = QkNorm::Full;
    if (auto clip = doc.find("clip_qkv"); clip != doc.end() && !clip->is_null()) {
      if (!clip->is_number()) return make_error(origin + ": 'clip_qkv' is not a number");
      config.clip_qkv = clip->get<float>();
    }
  } else {  // qwen2_moe, qwen3_moe
    config.expert_ffn_dim = integer({"moe_intermediate_size"}, std::nullopt);
    config.norm_topk_prob = flag("norm_topk_prob", false);
    if (flag("use_sliding_window", false)) return make_error(origin + ": sliding-window attention is not supported");
    if (auto only = doc.find("mlp_only_layers"); only != doc.end() && only->is_array() && !only->empty()) {
      return make_error(origin + ": mlp_only_layers " + only->dump() +
                        ": models mixing dense and MoE layers are not supported");
    }
    if (integer({"decoder_sparse_step"}, 1) != 1) {
      return make_error(origin +
                        ": decoder_sparse_step other than 1 (dense layers between MoE layers) is not supported");
    }
    if (model_type == "qwen2_moe") {
      config.qkv_bias = flag("qkv_bias", true);
      config.shared_expert_ffn_dim = integer({"shared_expert_intermediate_size"}, 0);
    } else {
      config.qkv_bias = config.output_bias = flag("attention_bias", false);
      config.qk_norm = QkNorm::PerHead;
    }
  }
  if (error) return *error;
  return check_moe_counts(config, origin);
}

std::string hf_moe_layer_name(const std::string& suffix) {
  static const std::map<std::string, std::string> names = {
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
      // transformers >= 5 keeps experts fused in memory; save_pretrained writes them per expert.
      {"mlp.experts.gate_up_proj", "fused_experts"},
      {"mlp.experts.down_proj", "fused_experts_down"}};
  if (auto it = names.find(suffix); it != names.end()) return it->second;
  // mlp.experts.E.{gate,up,down}_proj.weight (Qwen, OLMoE) and
  // block_sparse_moe.experts.E.{w1,w3,w2}.weight (Mixtral: gate, up, down).
  static const std::map<std::string, std::string> parts = {
      {"gate_proj.weight", "ffn_gate.weight"}, {"up_proj.weight", "ffn_up.weight"},
      {"down_proj.weight", "ffn_down.weight"}, {"w1.weight", "ffn_gate.weight"},
      {"w3.weight", "ffn_up.weight"},          {"w2.weight", "ffn_down.weight"}};
  for (const std::string prefix : {"mlp.experts.", "block_sparse_moe.experts."}) {
    if (suffix.rfind(prefix, 0) != 0) continue;
    const size_t dot = suffix.find('.', prefix.size());
    if (dot == std::string::npos || dot == prefix.size()) return {};
    const std::string expert = suffix.substr(prefix.size(), dot - prefix.size());
    if (expert.find_first_not_of("0123456789") != std::string::npos) return {};
    auto it = parts.find(suffix.substr(dot + 1));
    return it == parts.end() ? std::string() : "expert." + expert + "." + it->second;
  }
  return {};
}

// ---- per-layer tensors ---------------------------------------------------------------------

namespace {

// Expert e of a stacked 3D tensor (ggml shape [cols, rows, n_experts]) as a 2D view.
TensorRef expert_slice(const TensorRef& stacked, int64_t e, int64_t n_experts) {
  const size_t bytes = stacked.data.size() / static_cast<size_t>(n_experts);
  TensorRef out{stacked.name + "[" + std::to_string(e) + "]",
                stacked.type,
                {stacked.shape[0], stacked.shape[1]},
                stacked.data.subspan(static_cast<size_t>(e) * bytes, bytes)};
  return out;
}

}  // namespace

Status assemble_layer_extras(const ModelConfig& c, const TensorSet& set, int64_t layer, LayerWeights& out,
                             const std::string& origin) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  std::optional<Error> error;
  auto get = [&](const std::string& name, std::vector<int64_t> shape, const char* meaning) {
    if (error) return TensorRef{};
    auto ref = take_tensor(set, name, shape, meaning, origin);
    if (!ref) error = ref.error();
    return ref ? *ref : TensorRef{};
  };
  if (c.qkv_bias) {
    out.bq = get(p + "attn_q.bias", {q_dim}, "[n_heads*head_dim]");
    out.bk = get(p + "attn_k.bias", {kv_dim}, "[n_kv_heads*head_dim]");
    out.bv = get(p + "attn_v.bias", {kv_dim}, "[n_kv_heads*head_dim]");
  }
  if (c.output_bias) out.bo = get(p + "attn_output.bias", {c.dim}, "[dim]");
  if (c.qk_norm == QkNorm::PerHead) {
    out.q_norm = get(p + "attn_q_norm.weight", {c.head_dim}, "[head_dim]");
    out.k_norm = get(p + "attn_k_norm.weight", {c.head_dim}, "[head_dim]");
  } else if (c.qk_norm == QkNorm::Full) {
    out.q_norm = get(p + "attn_q_norm.weight", {q_dim}, "[n_heads*head_dim]");
    out.k_norm = get(p + "attn_k_norm.weight", {kv_dim}, "[n_kv_heads*head_dim]");
  }
  if (error) return *error;
  if (!c.is_moe()) return {};

  if (set.has(p + "fused_experts") || set.has(p + "fused_experts_down")) {
    return make_error(origin + ": layer " + std::to_string(layer) +
                      ": fused expert tensors (mlp.experts.gate_up_proj, transformers' in-memory layout) are not "
                      "supported; save the model with save_pretrained, which writes one tensor per expert");
  }
  const int64_t E = c.n_experts, F = c.expert_ffn_dim;
  out.router = get(p + "ffn_gate_inp.weight", {c.dim, E}, "[dim, n_experts]");
  out.experts.resize(static_cast<size_t>(E));
  if (set.has(p + "ffn_gate_exps.weight")) {  // GGUF: one 3D tensor per projection
    const TensorRef gate = get(p + "ffn_gate_exps.weight", {c.dim, F, E}, "[dim, expert_ffn, n_experts]");
    const TensorRef up = get(p + "ffn_up_exps.weight", {c.dim, F, E}, "[dim, expert_ffn, n_experts]");
    const TensorRef down = get(p + "ffn_down_exps.weight", {F, c.dim, E}, "[expert_ffn, dim, n_experts]");
    if (error) return *error;
    for (int64_t e = 0; e < E; ++e) {
      out.experts[static_cast<size_t>(e)] = {expert_slice(gate, e, E), expert_slice(up, e, E),
                                             expert_slice(down, e, E)};
    }
  } else {
    for (int64_t e = 0; e < E && !error; ++e) {
      const std::string x = p + "expert." + std::to_string(e) + ".";
      out.experts[static_cast<size_t>(e)] = {get(x + "ffn_gate.weight", {c.dim, F}, "[dim, expert_ffn]"),
                                             get(x + "ffn_up.weight", {c.dim, F}, "[dim, expert_ffn]"),
                                             get(x + "ffn_down.weight", {F, c.dim}, "[expert_ffn, dim]")};
    }
    if (!error) {
      // An expert id at or past n_experts means the config and the weights disagree.
      const std::string extra = p + "expert." + std::to_string(E) + ".ffn_gate.weight";
      if (set.has(extra)) {
        return make_error(origin + ": " + describe_tensor_name(set, extra) + " exists but the config has " +
                          std::to_string(E) + " experts");
      }
    }
  }
  if (c.shared_expert_ffn_dim > 0) {
    const int64_t S = c.shared_expert_ffn_dim;
    out.shared_expert = {get(p + "ffn_gate_shexp.weight", {c.dim, S}, "[dim, shared_ffn]"),
                         get(p + "ffn_up_shexp.weight", {c.dim, S}, "[dim, shared_ffn]"),
                         get(p + "ffn_down_shexp.weight", {S, c.dim}, "[shared_ffn, dim]")};
    // llama.cpp declares the gate [dim]; its converter writes HF's (1, dim) as [dim, 1].
    const std::string gate = p + "ffn_gate_inp_shexp.weight";
    TensorSet as_matrix;
    const TensorSet* source = &set;
    if (auto it = set.by_name.find(gate); it != set.by_name.end() && it->second.shape == std::vector<int64_t>{c.dim}) {
      as_matrix.by_name[gate] = it->second;
      as_matrix.by_name[gate].shape = {c.dim, 1};
      source = &as_matrix;
    }
    if (!error) {
      auto ref = take_tensor(*source, gate, {c.dim, 1}, "[dim, 1]", origin);
      if (!ref) return ref.error();
      out.shared_expert_gate = *ref;
    }
  }
  if (error) return *error;
  return {};
}

}  // namespace specula

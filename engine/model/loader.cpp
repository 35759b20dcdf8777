// Model loading: GGUF files (llama.* metadata, tokenizer.ggml.*) and Hugging Face directories
// (config.json + safetensors shards + tokenizer.json). Both end in the same validation: every
// tensor is looked up by its GGUF llama name and its shape checked against the config.
#include "engine/model/loader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/formats/gguf.h"
#include "engine/formats/safetensors.h"
#include "engine/model/moe_loader.h"
#include "engine/model/tensor_set.h"

namespace specula {
namespace {

using nlohmann::json;

constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string in_quotes(const std::string& text) { return "'" + text + "'"; }

Status validate_config(const ModelConfig& config, const std::string& origin) {
  auto positive = [&](int64_t value, const char* what) -> Status {
    if (value > 0) return {};
    return make_error(origin + ": " + what + " is " + std::to_string(value) + ", must be > 0");
  };
  for (auto [value, what] : {std::pair{config.n_layers, "layer count"}, {config.dim, "hidden size"},
                             {config.n_heads, "head count"}, {config.n_kv_heads, "KV head count"},
                             {config.head_dim, "head dim"}, {config.ffn_dim, "feed-forward size"},
                             {config.vocab_size, "vocabulary size"},
                             {config.context_length, "context length"}}) {
    if (auto status = positive(value, what); !status) return status;
  }
  if (config.n_heads % config.n_kv_heads != 0) {
    return make_error(origin + ": head count " + std::to_string(config.n_heads) +
                      " is not a multiple of the KV head count " +
                      std::to_string(config.n_kv_heads));
  }
  if (!(config.rms_eps > 0.0f) || !(config.rope_theta > 0.0f)) {
    return make_error(origin + ": rms_eps and rope_theta must be positive");
  }
  return {};
}

Expected<ModelWeights> assemble_weights(const ModelConfig& c, const TensorSet& set,
                                        const std::string& origin) {
  ModelWeights weights;
  const int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  std::optional<Error> error;
  auto get = [&](const std::string& name, std::vector<int64_t> shape, const char* meaning) {
    if (error) return TensorRef{};
    auto ref = take_tensor(set, name, shape, meaning, origin);
    if (!ref) {
      error = ref.error();
      return TensorRef{};
    }
    return *ref;
  };
  weights.token_embd = get("token_embd.weight", {c.dim, c.vocab_size}, "[dim, vocab]");
  weights.output_norm = get("output_norm.weight", {c.dim}, "[dim]");
  if (c.tied_embeddings) {
    weights.output = weights.token_embd;
  } else {
    weights.output = get("output.weight", {c.dim, c.vocab_size}, "[dim, vocab]");
  }
  for (int64_t i = 0; i < c.n_layers && !error; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights layer;
    layer.attn_norm = get(p + "attn_norm.weight", {c.dim}, "[dim]");
    layer.wq = get(p + "attn_q.weight", {c.dim, q_dim}, "[dim, n_heads*head_dim]");
    layer.wk = get(p + "attn_k.weight", {c.dim, kv_dim}, "[dim, n_kv_heads*head_dim]");
    layer.wv = get(p + "attn_v.weight", {c.dim, kv_dim}, "[dim, n_kv_heads*head_dim]");
    layer.wo = get(p + "attn_output.weight", {q_dim, c.dim}, "[n_heads*head_dim, dim]");
    layer.ffn_norm = get(p + "ffn_norm.weight", {c.dim}, "[dim]");
    if (!c.is_moe()) {
      layer.w_gate = get(p + "ffn_gate.weight", {c.dim, c.ffn_dim}, "[dim, ffn_dim]");
      layer.w_up = get(p + "ffn_up.weight", {c.dim, c.ffn_dim}, "[dim, ffn_dim]");
      layer.w_down = get(p + "ffn_down.weight", {c.ffn_dim, c.dim}, "[ffn_dim, dim]");
    }
    if (!error) {
      if (Status s = assemble_layer_extras(c, set, i, layer, origin); !s) error = s.error();
    }
    weights.layers.push_back(std::move(layer));
  }
  if (error) return *error;
  return weights;
}

Status check_tokenizer_fits(const Tokenizer& tokenizer, const ModelConfig& config,
                            const std::string& origin) {
  if (tokenizer.vocab_size() > config.vocab_size) {
    return make_error(origin + ": tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                      " tokens but the model's vocabulary has only " +
                      std::to_string(config.vocab_size));
  }
  return {};
}

// Reads one byte per page of every tensor, in file order, reporting the fraction of bytes read
// after each tensor and every kChunk of a large one, so a slow disk shows steady progress and a
// cancel takes effect within one chunk.
Status read_tensor_pages(const TensorSet& set, const LoadProgress& progress, const std::string& origin) {
  constexpr size_t kChunk = size_t{4} << 20;
  std::vector<std::span<const std::byte>> spans;
  size_t total = 0;
  for (const auto& [name, ref] : set.by_name) {
    if (ref.data.empty()) continue;
    spans.push_back(ref.data);
    total += ref.data.size();
  }
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.data() < b.data(); });
  const long page_size = ::sysconf(_SC_PAGESIZE);
  const size_t page = page_size > 0 ? static_cast<size_t>(page_size) : 4096;
  unsigned sink = 0;  // keeps the reads from being optimised away
  size_t done = 0;
  const auto report = [&] {
    return progress(done >= total ? 1.0 : static_cast<double>(done) / static_cast<double>(total));
  };
  for (const auto& span : spans) {
    for (size_t start = 0; start < span.size(); start += kChunk) {
      const size_t end = std::min(span.size(), start + kChunk);
      for (size_t offset = start; offset < end; offset += page) sink += std::to_integer<unsigned>(span[offset]);
      sink += std::to_integer<unsigned>(span[end - 1]);
      done += end - start;
      if (!report()) return make_error(origin + ": loading cancelled");
    }
  }
  if (total == 0 && !report()) return make_error(origin + ": loading cancelled");
  [[maybe_unused]] volatile unsigned observed = sink;
  return {};
}

// ---- GGUF ----------------------------------------------------------------------------------

Expected<ModelConfig> config_from_gguf(const GgufFile& gguf, const std::string& origin) {
  auto arch = gguf.get_string("general.architecture");
  if (!arch) return arch.error();
  if (!is_supported_gguf_arch(*arch)) {
    return make_error(origin + ": unsupported architecture " + in_quotes(*arch) + " (supported: " +
                      kSupportedGgufArchs + ")");
  }
  const std::string a = *arch + ".";  // metadata keys are prefixed by the architecture
  ModelConfig config;
  config.architecture = *arch;
  auto name = gguf.get_string("general.name");
  config.name = name ? *name : std::filesystem::path(origin).stem().string();
  config.rope_style = RopeStyle::AdjacentPairs;

  std::optional<Error> error;
  auto required = [&](const std::string& key) -> int64_t {
    auto value = gguf.get_int(key);
    if (!value && !error) error = value.error();
    return value ? *value : 0;
  };
  auto optional_int = [&](const std::string& key, int64_t fallback) -> int64_t {
    if (!gguf.find(key)) return fallback;
    return required(key);
  };
  auto optional_float = [&](const std::string& key, double fallback) -> float {
    if (!gguf.find(key)) return static_cast<float>(fallback);
    auto value = gguf.get_float(key);
    if (!value && !error) error = value.error();
    return static_cast<float>(value ? *value : fallback);
  };
  config.n_layers = required(a + "block_count");
  config.dim = required(a + "embedding_length");
  config.ffn_dim = required(a + "feed_forward_length");
  config.n_heads = required(a + "attention.head_count");
  config.n_kv_heads = optional_int(a + "attention.head_count_kv", config.n_heads);
  config.context_length = required(a + "context_length");
  config.rope_theta = optional_float(a + "rope.freq_base", 10000.0);
  config.rms_eps = optional_float(a + "attention.layer_norm_rms_epsilon", 1e-5);
  if (error) return *error;
  config.head_dim = config.n_heads > 0 ? config.dim / config.n_heads : 0;
  config.head_dim = optional_int(a + "attention.key_length", config.head_dim);
  int64_t rope_dims = optional_int(a + "rope.dimension_count", config.head_dim);
  if (error) return *error;
  if (rope_dims != config.head_dim) {
    return make_error(origin + ": " + a + "rope.dimension_count " + std::to_string(rope_dims) +
                      " differs from the head dim " + std::to_string(config.head_dim) +
                      " (partial rotary embeddings are not supported)");
  }

  if (gguf.find(a + "vocab_size")) {
    config.vocab_size = required(a + "vocab_size");
  } else if (auto* tokens = gguf.find("tokenizer.ggml.tokens"); tokens && tokens->as_array()) {
    config.vocab_size = static_cast<int64_t>(tokens->as_array()->items.size());
  } else if (auto* embd = gguf.find_tensor("token_embd.weight"); embd && embd->shape.size() == 2) {
    config.vocab_size = embd->shape[1];
  }
  if (error) return *error;
  config.tied_embeddings = gguf.find_tensor("output.weight") == nullptr;
  if (gguf.find_tensor("rope_freqs.weight")) {
    return make_error(origin + ": rope frequency factors (rope_freqs.weight, Llama 3.1 "
                               "rope scaling) are not supported");
  }
  if (Status s = read_gguf_arch_extras(gguf, *arch, config, origin); !s) return s.error();
  if (auto status = validate_config(config, origin); !status) return status.error();
  return config;
}

TensorSet tensors_from_gguf(const GgufFile& gguf) {
  TensorSet set;
  for (const auto& info : gguf.tensors()) {
    set.by_name[info.name] = TensorRef{info.name, info.type, info.shape, info.data};
  }
  return set;
}

Expected<Model> load_gguf(const std::filesystem::path& path, const LoadProgress& progress) {
  auto opened = GgufFile::open(path);
  if (!opened) return opened.error();
  auto gguf = std::make_shared<GgufFile>(std::move(*opened));
  const std::string origin = path.string();
  auto config = config_from_gguf(*gguf, origin);
  if (!config) return config.error();
  const TensorSet tensors = tensors_from_gguf(*gguf);
  auto weights = assemble_weights(*config, tensors, origin);
  if (!weights) return weights.error();
  if (!gguf->find("tokenizer.ggml.tokens")) {
    return make_error(origin + ": no tokenizer (no tokenizer.ggml.tokens in the GGUF metadata)");
  }
  auto tokenizer = Tokenizer::from_gguf(*gguf);
  if (!tokenizer) return tokenizer.error();
  if (auto status = check_tokenizer_fits(*tokenizer, *config, origin); !status) {
    return status.error();
  }
  if (progress) {
    if (Status s = read_tensor_pages(tensors, progress, origin); !s) return s.error();
  }
  weights->storage.push_back(gguf);
  return Model{std::move(*config), std::move(*weights), std::move(*tokenizer), path, "gguf"};
}

// ---- Hugging Face directory ----------------------------------------------------------------

Expected<json> read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(path.string() + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  json doc = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return make_error(path.string() + ": not valid JSON");
  if (!doc.is_object()) return make_error(path.string() + ": top level is not a JSON object");
  return doc;
}

// json::value() throws when the key holds another type; config.json is user input.
std::string string_field(const json& node, const char* key, const std::string& fallback) {
  auto it = node.find(key);
  return it != node.end() && it->is_string() ? it->get<std::string>() : fallback;
}

Expected<ModelConfig> config_from_hf(const json& doc, const std::filesystem::path& dir) {
  const std::string origin = (dir / "config.json").string();
  std::string model_type = string_field(doc, "model_type", "");
  bool llama_arch = false;
  if (auto it = doc.find("architectures"); it != doc.end() && it->is_array()) {
    for (const auto& name : *it) {
      if (name == "LlamaForCausalLM" || name == "MistralForCausalLM") llama_arch = true;
    }
  }
  const bool moe = is_moe_hf_model_type(model_type);
  if (model_type != "llama" && model_type != "mistral" && !llama_arch && !moe) {
    std::string shown = model_type.empty() ? "(no model_type)" : model_type;
    return make_error(origin + ": unsupported architecture " + in_quotes(shown) + " (supported: " +
                      kSupportedHfModelTypes + ")");
  }
  // Qwen configs carry a sliding_window size that only use_sliding_window switches on.
  const bool qwen = model_type == "qwen2_moe" || model_type == "qwen3_moe";
  if (auto window = doc.find("sliding_window"); !qwen && window != doc.end() && !window->is_null()) {
    return make_error(origin + ": sliding-window attention is not supported");
  }

  std::optional<Error> error;
  auto get_int = [&](const char* key, std::optional<int64_t> fallback) -> int64_t {
    auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) {
      if (!fallback && !error) error = make_error(origin + ": missing integer " + in_quotes(key));
      return fallback.value_or(0);
    }
    if (!it->is_number_integer()) {
      if (!error) error = make_error(origin + ": " + in_quotes(key) + " is not an integer");
      return 0;
    }
    return it->get<int64_t>();
  };
  auto get_float = [&](const json& node, const char* key, double fallback) -> float {
    auto it = node.find(key);
    if (it == node.end() || it->is_null()) return static_cast<float>(fallback);
    if (!it->is_number()) {
      if (!error) error = make_error(origin + ": " + in_quotes(key) + " is not a number");
      return 0.0f;
    }
    return it->get<float>();
  };

  ModelConfig config;
  config.architecture = "llama";
  config.name = dir.filename().string();
  config.rope_style = RopeStyle::HalfSplit;
  config.n_layers = get_int("num_hidden_layers", std::nullopt);
  config.dim = get_int("hidden_size", std::nullopt);
  config.ffn_dim = get_int("intermediate_size", std::nullopt);
  config.n_heads = get_int("num_attention_heads", std::nullopt);
  config.n_kv_heads = get_int("num_key_value_heads", config.n_heads);
  config.vocab_size = get_int("vocab_size", std::nullopt);
  config.context_length = get_int("max_position_embeddings", std::nullopt);
  config.head_dim = get_int("head_dim", config.n_heads > 0 ? config.dim / config.n_heads : 0);
  config.rms_eps = get_float(doc, "rms_norm_eps", 1e-6);
  if (auto tie = doc.find("tie_word_embeddings"); tie != doc.end() && !tie->is_null()) {
    if (!tie->is_boolean()) {
      return make_error(origin + ": 'tie_word_embeddings' is not true or false");
    }
    config.tied_embeddings = tie->get<bool>();
  }
  // transformers < 5 writes rope_theta/rope_scaling at the top level; 5.x nests both in
  // rope_parameters.
  config.rope_theta = get_float(doc, "rope_theta", 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = doc.find(key);
    if (it == doc.end() || !it->is_object()) continue;
    config.rope_theta = get_float(*it, "rope_theta", config.rope_theta);
    std::string rope_type = string_field(*it, "rope_type", string_field(*it, "type", "default"));
    if (rope_type != "default") {
      return make_error(origin + ": rope type " + in_quotes(rope_type) + " is not supported");
    }
  }
  if (error) return *error;
  if (moe) {
    if (Status s = read_hf_moe_config(doc, model_type, config, origin); !s) return s.error();
  }
  if (auto status = validate_config(config, origin); !status) return status.error();
  return config;
}

// HF parameter name -> GGUF llama name; empty for tensors the model does not use.
std::string gguf_name_for(const std::string& hf) {
  static const std::map<std::string, std::string> top = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  static const std::map<std::string, std::string> per_layer = {
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"}};
  if (auto it = top.find(hf); it != top.end()) return it->second;
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return {};
  size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return {};
  std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  if (layer.find_first_not_of("0123456789") != std::string::npos) return {};
  auto it = per_layer.find(hf.substr(dot + 1));
  if (it != per_layer.end()) return "blk." + layer + "." + it->second;
  std::string extra = hf_moe_layer_name(hf.substr(dot + 1));
  return extra.empty() ? std::string() : "blk." + layer + "." + extra;
}

// Shard file names: from model.safetensors.index.json's weight_map, else model.safetensors.
Expected<std::vector<std::filesystem::path>> shard_paths(const std::filesystem::path& dir) {
  const auto index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) {
    auto index = read_json_file(index_path);
    if (!index) return index.error();
    auto map = index->find("weight_map");
    if (map == index->end() || !map->is_object()) {
      return make_error(index_path.string() + ": missing object 'weight_map'");
    }
    std::set<std::string> files;
    for (const auto& [tensor, file] : map->items()) {
      if (!file.is_string()) {
        return make_error(index_path.string() + ": weight_map entry " + in_quotes(tensor) +
                          " is not a file name");
      }
      std::string name = file.get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "..") {
        return make_error(index_path.string() + ": shard name " + in_quotes(name) +
                          " must be a plain file name");
      }
      files.insert(name);
    }
    std::vector<std::filesystem::path> paths;
    for (const auto& name : files) paths.push_back(dir / name);
    return paths;
  }
  if (std::filesystem::exists(dir / "model.safetensors")) {
    return std::vector<std::filesystem::path>{dir / "model.safetensors"};
  }
  return make_error(dir.string() + ": no model.safetensors or model.safetensors.index.json");
}

Expected<TensorSet> tensors_from_shards(const std::vector<std::filesystem::path>& paths,
                                        std::vector<std::shared_ptr<const void>>& storage) {
  TensorSet set;
  std::map<std::string, std::string> file_of;  // GGUF name -> shard, to report duplicates
  for (const auto& path : paths) {
    auto shard = SafetensorsFile::open(path);
    if (!shard) return shard.error();
    for (const auto& tensor : shard->tensors()) {
      std::string name = gguf_name_for(tensor.name);
      if (name.empty()) continue;  // e.g. rotary_emb.inv_freq in old checkpoints
      if (auto it = file_of.find(name); it != file_of.end()) {
        return make_error(path.string() + ": tensor " + in_quotes(tensor.name) +
                          " also appears in " + it->second);
      }
      file_of[name] = path.string();
      // safetensors shapes are row-major ([out, in]); ggml order is the reverse.
      std::vector<int64_t> shape(tensor.shape.rbegin(), tensor.shape.rend());
      set.by_name[name] = TensorRef{name, tensor.type, std::move(shape), tensor.data};
      set.source_name[name] = tensor.name;
    }
    storage.push_back(shard->mapping());
  }
  return set;
}

Expected<Model> load_hf_dir(const std::filesystem::path& dir, const LoadProgress& progress) {
  const auto config_path = dir / "config.json";
  if (!std::filesystem::exists(config_path)) {
    return make_error(dir.string() + ": not a model directory (no config.json)");
  }
  auto doc = read_json_file(config_path);
  if (!doc) return doc.error();
  auto config = config_from_hf(*doc, dir);
  if (!config) return config.error();

  auto paths = shard_paths(dir);
  if (!paths) return paths.error();
  std::vector<std::shared_ptr<const void>> storage;
  auto tensors = tensors_from_shards(*paths, storage);
  if (!tensors) return tensors.error();
  if (!config->tied_embeddings && !tensors->by_name.count("output.weight")) {
    return make_error(dir.string() + ": missing tensor 'lm_head.weight' and config.json has "
                                     "tie_word_embeddings false");
  }
  auto weights = assemble_weights(*config, *tensors, dir.string());
  if (!weights) return weights.error();
  weights->storage = std::move(storage);

  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    return make_error(dir.string() + ": no tokenizer (tokenizer.json not found)");
  }
  auto tokenizer = Tokenizer::from_hf_dir(dir);
  if (!tokenizer) return tokenizer.error();
  if (auto status = check_tokenizer_fits(*tokenizer, *config, dir.string()); !status) {
    return status.error();
  }
  if (progress) {
    if (Status s = read_tensor_pages(*tensors, progress, dir.string()); !s) return s.error();
  }
  return Model{std::move(*config), std::move(*weights), std::move(*tokenizer), dir, "safetensors"};
}

// ---- describe ------------------------------------------------------------------------------

void describe_config(std::ostringstream& out, const ModelConfig& c) {
  out << "architecture: " << c.architecture << "\n"
      << "name: " << c.name << "\n"
      << "layers: " << c.n_layers << "  dim: " << c.dim << "  ffn_dim: " << c.ffn_dim << "\n"
      << "heads: " << c.n_heads << "  kv_heads: " << c.n_kv_heads << "  head_dim: " << c.head_dim
      << "\n"
      << "vocab: " << c.vocab_size << "  context: " << c.context_length << "\n"
      << "rope_theta: " << c.rope_theta << "  rope_style: "
      << (c.rope_style == RopeStyle::AdjacentPairs ? "adjacent pairs" : "half split")
      << "  rms_eps: " << c.rms_eps << "\n"
      << "tied embeddings: " << (c.tied_embeddings ? "yes" : "no") << "\n";
  if (c.qk_norm != QkNorm::None || c.qkv_bias || c.output_bias || c.clip_qkv > 0) {
    out << "attention: q/k norm " << (c.qk_norm == QkNorm::None ? "none" : c.qk_norm == QkNorm::PerHead ? "per head" : "full")
        << "  qkv bias: " << (c.qkv_bias ? "yes" : "no") << "  output bias: " << (c.output_bias ? "yes" : "no")
        << "  clip_qkv: " << c.clip_qkv << "\n";
  }
  if (c.is_moe()) {
    out << "experts: " << c.n_experts << "  per token: " << c.n_experts_used << "  expert ffn: " << c.expert_ffn_dim
        << "  shared expert ffn: " << c.shared_expert_ffn_dim
        << "  top-k renormalized: " << (c.norm_topk_prob ? "yes" : "no") << "\n";
  }
}

struct TableRow {
  std::string name, type, shape;
  uint64_t bytes;
};

void describe_tensors(std::ostringstream& out, const std::vector<TableRow>& rows) {
  size_t name_width = 4;
  for (const auto& row : rows) name_width = std::max(name_width, row.name.size());
  uint64_t total = 0;
  out << "tensors: " << rows.size() << "\n";
  auto pad = [](const std::string& text, size_t width) {
    return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
  };
  out << "  " << pad("name", name_width) << "  " << pad("type", 6) << "  " << pad("shape", 18)
      << "  bytes\n";
  for (const auto& row : rows) {
    out << "  " << pad(row.name, name_width) << "  " << pad(row.type, 6) << "  "
        << pad(row.shape, 18) << "  " << row.bytes << "\n";
    total += row.bytes;
  }
  out << "total tensor bytes: " << total << "\n";
}

}  // namespace

std::filesystem::path resolve_model_path(const std::string& spec) {
  if (spec != "default") return spec;
  if (const char* file = std::getenv("SPECULA_MODEL_DEFAULT"); file && *file) return file;
  if (const char* dir = std::getenv("SPECULA_MODELS_DIR"); dir && *dir) {
    return std::filesystem::path(dir) / kDefaultModelFile;
  }
  return std::filesystem::path(SPECULA_SOURCE_DIR) / "models" / kDefaultModelFile;
}

namespace {
// Drops a trailing separator so "dir/" names itself "dir" in messages and config.name.
std::filesystem::path normalized(const std::filesystem::path& path) {
  auto clean = path.lexically_normal();
  if (!clean.has_filename() && clean.has_parent_path()) clean = clean.parent_path();
  return clean;
}
}  // namespace

Expected<Model> load_model(const std::filesystem::path& raw_path, const LoadProgress& progress) {
  const auto path = normalized(raw_path);
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return make_error(path.string() + ": no such file or directory");
  }
  if (std::filesystem::is_directory(status)) return load_hf_dir(path, progress);
  return load_gguf(path, progress);
}

Expected<std::string> describe_model_file(const std::filesystem::path& raw_path) {
  const auto path = normalized(raw_path);
  std::ostringstream out;
  std::vector<TableRow> rows;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    auto doc = read_json_file(path / "config.json");
    if (!doc) return doc.error();
    out << "file: " << path.string() << "\nformat: Hugging Face safetensors directory\n";
    auto config = config_from_hf(*doc, path);
    if (config) describe_config(out, *config);
    else out << "config: " << config.error().message << "\n";
    auto tokenizer = Tokenizer::from_hf_dir(path);
    out << "tokenizer: " << (tokenizer ? tokenizer->summary() : tokenizer.error().message) << "\n";
    auto paths = shard_paths(path);
    if (!paths) return paths.error();
    for (const auto& shard_path : *paths) {
      auto shard = SafetensorsFile::open(shard_path);
      if (!shard) return shard.error();
      for (const auto& t : shard->tensors()) {
        rows.push_back({t.name, std::string(tensor_type_name(t.type)), format_shape(t.shape),
                        t.data.size()});
      }
    }
    out << "(shapes as stored: row-major, outermost first)\n";
  } else {
    auto gguf = GgufFile::open(path);
    if (!gguf) return gguf.error();
    out << "file: " << path.string() << "\nformat: GGUF v" << gguf->version()
        << "  alignment: " << gguf->alignment() << "  metadata keys: " << gguf->metadata().size()
        << "\n";
    auto config = config_from_gguf(*gguf, path.string());
    if (config) describe_config(out, *config);
    else out << "config: " << config.error().message << "\n";
    if (gguf->find("tokenizer.ggml.tokens")) {
      auto tokenizer = Tokenizer::from_gguf(*gguf);
      out << "tokenizer: " << (tokenizer ? tokenizer->summary() : tokenizer.error().message)
          << "\n";
    } else {
      out << "tokenizer: none (no tokenizer.ggml.tokens)\n";
    }
    for (const auto& t : gguf->tensors()) {
      rows.push_back({t.name, std::string(tensor_type_name(t.type)), format_shape(t.shape),
                      t.n_bytes});
    }
    out << "(shapes in ggml order: row length first)\n";
  }
  describe_tensors(out, rows);
  return out.str();
}

}  // namespace specula

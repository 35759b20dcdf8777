#include "engine/model/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/cpu/dequant.h"
#include "tests/engine/formats/gguf_writer.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
namespace gw = specula::testing;
using ::testing::HasSubstr;

const fs::path kDefaultModel = fs::path(SPECULA_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
const fs::path kHfDir = fs::path(SPECULA_TEST_DATA_DIR) / "hf";

// A fresh empty directory under the temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("specula_loader_test_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Sets an environment variable for one scope, restoring the old value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* current = std::getenv(name.c_str())) old = current;
    if (value) setenv(name.c_str(), value, 1);
    else unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

TEST(ResolveModelPath, DefaultFollowsEnvironmentThenSourceTree) {
  ScopedEnv file("SPECULA_MODEL_DEFAULT", nullptr);
  ScopedEnv dir("SPECULA_MODELS_DIR", nullptr);
  EXPECT_EQ(resolve_model_path("default"), kDefaultModel);
  EXPECT_EQ(resolve_model_path("some/model.gguf"), fs::path("some/model.gguf"));
  {
    ScopedEnv models("SPECULA_MODELS_DIR", "/opt/models");
    EXPECT_EQ(resolve_model_path("default"), fs::path("/opt/models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    ScopedEnv chosen("SPECULA_MODEL_DEFAULT", "/tmp/other.gguf");
    EXPECT_EQ(resolve_model_path("default"), fs::path("/tmp/other.gguf"));
  }
}

TEST(LoadModel, DefaultSmolLm2Gguf) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "skipped: default model not downloaded";
  auto model = load_model(kDefaultModel);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = model->config;
  EXPECT_EQ(model->format, "gguf");
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_dim, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_NEAR(c.rms_eps, 1e-5f, 1e-9f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::AdjacentPairs);

  const ModelWeights& w = model->weights;
  ASSERT_EQ(w.layers.size(), 30u);
  EXPECT_EQ(w.token_embd.type, TensorType::Q8_0);
  EXPECT_EQ(w.token_embd.shape, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(w.output.data.data(), w.token_embd.data.data());
  EXPECT_EQ(w.layers[3].wq.name, "blk.3.attn_q.weight");
  EXPECT_EQ(w.layers[3].wq.type, TensorType::Q4_1);
  EXPECT_EQ(w.layers[3].wk.shape, (std::vector<int64_t>{576, 192}));
  EXPECT_EQ(w.layers[29].w_down.shape, (std::vector<int64_t>{1536, 576}));
  EXPECT_EQ(w.output_norm.type, TensorType::F32);
  EXPECT_FALSE(w.storage.empty());
  EXPECT_EQ(model->tokenizer.vocab_size(), 49152);

  // A real row dequantizes to finite, non-trivial values.
  std::vector<float> row(576);
  auto result = dequantize_row(w.token_embd.type, w.token_embd.data.data(), row.data(), 576);
  ASSERT_TRUE(result.ok) << result.error;
  float sum_abs = 0;
  for (float v : row) {
    ASSERT_TRUE(std::isfinite(v));
    sum_abs += std::abs(v);
  }
  EXPECT_GT(sum_abs, 0.0f);
}

TEST(DescribeModelFile, DefaultSmolLm2Gguf) {
  if (!fs::exists(kDefaultModel)) GTEST_SKIP() << "skipped: default model not downloaded";
  auto text = describe_model_file(kDefaultModel);
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_THAT(*text, HasSubstr("format: GGUF v3"));
  EXPECT_THAT(*text, HasSubstr("architecture: llama"));
  EXPECT_THAT(*text, HasSubstr("layers: 30  dim: 576  ffn_dim: 1536"));
  EXPECT_THAT(*text, HasSubstr("tensors: 272"));
  EXPECT_THAT(*text, HasSubstr("blk.0.attn_q.weight"));
  EXPECT_THAT(*text, HasSubstr("Q4_1    [576, 576]"));
}

struct HfCase {
  const char* dir;
  TensorType type;
  bool tied;
};

class HfDirectory : public ::testing::TestWithParam<HfCase> {};

TEST_P(HfDirectory, LoadsTinyLlama) {
  const HfCase& param = GetParam();
  auto model = load_model(kHfDir / param.dir);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const ModelConfig& c = model->config;
  EXPECT_EQ(model->format, "safetensors");
  EXPECT_EQ(c.name, param.dir);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.dim, 8);
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.ffn_dim, 32);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.context_length, 256);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::HalfSplit);
  EXPECT_EQ(c.tied_embeddings, param.tied);

  const ModelWeights& w = model->weights;
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.token_embd.type, param.type);
  EXPECT_EQ(w.token_embd.shape, (std::vector<int64_t>{8, 49152}));
  EXPECT_EQ(w.layers[1].wq.shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(w.layers[1].wk.shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(w.layers[1].wo.shape, (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(w.layers[1].w_gate.shape, (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(w.layers[1].w_down.shape, (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(w.layers[0].attn_norm.name, "blk.0.attn_norm.weight");
  EXPECT_EQ(w.output.data.data() == w.token_embd.data.data(), param.tied);
  EXPECT_EQ(w.output.shape, (std::vector<int64_t>{8, 49152}));
  EXPECT_EQ(model->tokenizer.vocab_size(), 49152);

  // Norm weights were drawn from [0.5, 1.5] by make_hf_fixtures.py.
  std::vector<float> norm(8);
  ASSERT_TRUE(dequantize_row(w.output_norm.type, w.output_norm.data.data(), norm.data(), 8).ok);
  for (float v : norm) {
    EXPECT_GE(v, 0.5f);
    EXPECT_LE(v, 1.5f);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfDirectory,
                         ::testing::Values(HfCase{"tiny-llama-f32-sharded", TensorType::F32, true},
                                           HfCase{"tiny-llama-f16", TensorType::F16, false},
                                           HfCase{"tiny-llama-bf16", TensorType::BF16, true}),
                         [](const auto& info) {
                           std::string name = info.param.dir;
                           for (char& ch : name) if (ch == '-') ch = '_';
                           return name;
                         });

TEST(DescribeModelFile, HfDirectory) {
  auto text = describe_model_file(kHfDir / "tiny-llama-f32-sharded");
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_THAT(*text, HasSubstr("Hugging Face safetensors directory"));
  EXPECT_THAT(*text, HasSubstr("heads: 2  kv_heads: 1  head_dim: 4"));
  EXPECT_THAT(*text, HasSubstr("model.embed_tokens.weight"));
  EXPECT_THAT(*text, HasSubstr("[49152, 8]"));
}

// A copy of a fixture directory with config.json edited and the weights linked, not copied.
fs::path edited_hf_dir(const TempDir& tmp, const std::function<void(nlohmann::json&)>& edit,
                       bool with_tokenizer = true) {
  const fs::path source = kHfDir / "tiny-llama-bf16";
  std::ifstream in(source / "config.json");
  auto config = nlohmann::json::parse(in);
  edit(config);
  std::ofstream(tmp.path / "config.json") << config.dump();
  fs::create_symlink(fs::canonical(source / "model.safetensors"), tmp.path / "model.safetensors");
  if (with_tokenizer) {
    fs::create_symlink(fs::canonical(source / "tokenizer.json"), tmp.path / "tokenizer.json");
    fs::copy_file(source / "tokenizer_config.json", tmp.path / "tokenizer_config.json");
  }
  return tmp.path;
}

std::string load_error(const fs::path& path) {
  auto model = load_model(path);
  EXPECT_FALSE(model.ok()) << "expected " << path << " to fail";
  return model.ok() ? std::string() : model.error().message;
}

TEST(LoadModelErrors, HfUnsupportedArchitecture) {
  TempDir tmp("hf_arch");
  auto dir = edited_hf_dir(tmp, [](auto& c) {
    c["model_type"] = "gpt2";
    c["architectures"] = {"GPT2LMHeadModel"};
  });
  EXPECT_THAT(load_error(dir), HasSubstr("config.json: unsupported architecture 'gpt2' (supported: llama, "));
}

TEST(LoadModelErrors, HfShapeMismatchNamesTensorAndShapes) {
  TempDir tmp("hf_shape");
  auto dir = edited_hf_dir(tmp, [](auto& c) { c["intermediate_size"] = 48; });
  EXPECT_THAT(load_error(dir),
              HasSubstr("tensor 'model.layers.0.mlp.gate_proj.weight' (blk.0.ffn_gate.weight): "
                        "shape [8, 32], expected [8, 48] [dim, ffn_dim]"));
}

TEST(LoadModelErrors, HfMissingTokenizer) {
  TempDir tmp("hf_tok");
  auto dir = edited_hf_dir(tmp, [](auto&) {}, /*with_tokenizer=*/false);
  EXPECT_THAT(load_error(dir), HasSubstr(": no tokenizer (tokenizer.json not found)"));
}

TEST(LoadModelErrors, HfUntiedWithoutLmHead) {
  TempDir tmp("hf_untied");
  auto dir = edited_hf_dir(tmp, [](auto& c) { c["tie_word_embeddings"] = false; });
  EXPECT_THAT(load_error(dir), HasSubstr("missing tensor 'lm_head.weight'"));
}

TEST(LoadModelErrors, HfMissingWeightsAndConfig) {
  TempDir tmp("hf_empty");
  EXPECT_THAT(load_error(tmp.path), HasSubstr("not a model directory (no config.json)"));
  std::ofstream(tmp.path / "config.json") << R"({"model_type": "llama", "hidden_size": 8})";
  EXPECT_THAT(load_error(tmp.path), HasSubstr("missing integer 'num_hidden_layers'"));
}

TEST(LoadModelErrors, MissingPath) {
  EXPECT_THAT(load_error("/nonexistent/specula/model.gguf"),
              HasSubstr("/nonexistent/specula/model.gguf: no such file or directory"));
}

// A complete llama GGUF with dim 4, 2 heads of 2, 1 KV head, ffn 8, vocab 4 and one layer;
// `extra` may add tensors before writing.
fs::path tiny_llama_gguf(const TempDir& tmp, const std::function<void(gw::GgufWriter&)>& extra,
                         const std::string& arch = "llama", bool with_embd = true,
                         uint32_t vocab = 4) {
  gw::GgufWriter writer;
  writer.kv_str("general.architecture", arch)
      .kv_u32("llama.block_count", 1)
      .kv_u32("llama.embedding_length", 4)
      .kv_u32("llama.feed_forward_length", 8)
      .kv_u32("llama.attention.head_count", 2)
      .kv_u32("llama.attention.head_count_kv", 1)
      .kv_u32("llama.context_length", 64)
      .kv_u32("llama.vocab_size", vocab)
      .kv_f32("llama.rope.freq_base", 10000.0f)
      .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  auto f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
    size_t n = 1;
    for (auto d : dims) n *= d;
    writer.tensor({name, dims, 0, gw::f32_bytes(std::vector<float>(n, 0.25f)), std::nullopt});
  };
  if (with_embd) f32("token_embd.weight", {4, 4});
  f32("output_norm.weight", {4});
  f32("blk.0.attn_norm.weight", {4});
  f32("blk.0.attn_q.weight", {4, 4});
  f32("blk.0.attn_k.weight", {4, 2});
  f32("blk.0.attn_v.weight", {4, 2});
  f32("blk.0.attn_output.weight", {4, 4});
  f32("blk.0.ffn_norm.weight", {4});
  f32("blk.0.ffn_gate.weight", {4, 8});
  f32("blk.0.ffn_up.weight", {4, 8});
  f32("blk.0.ffn_down.weight", {8, 4});
  extra(writer);
  auto path = tmp.path / "tiny.gguf";
  writer.write(path);
  return path;
}

TEST(LoadModelErrors, GgufUnsupportedArchitecture) {
  TempDir tmp("gguf_arch");
  auto path = tiny_llama_gguf(tmp, [](auto&) {}, "gpt2");
  EXPECT_THAT(load_error(path), HasSubstr("tiny.gguf: unsupported architecture 'gpt2' (supported: llama, "));
}

TEST(LoadModelErrors, GgufWithoutTokenizer) {
  TempDir tmp("gguf_tok");
  auto path = tiny_llama_gguf(tmp, [](auto&) {});
  EXPECT_THAT(load_error(path), HasSubstr("tiny.gguf: no tokenizer (no tokenizer.ggml.tokens"));
}

TEST(LoadModelErrors, GgufShapeMismatch) {
  TempDir tmp("gguf_shape");
  auto path = tiny_llama_gguf(tmp, [](gw::GgufWriter& w) {
    w.tensor({"token_embd.weight", {4, 5}, 0, gw::f32_bytes(std::vector<float>(20)), std::nullopt});
  }, "llama", /*with_embd=*/false);
  EXPECT_THAT(load_error(path),
              HasSubstr("tensor 'token_embd.weight': shape [4, 5], expected [4, 4] [dim, vocab]"));
}

TEST(LoadModelErrors, GgufMissingTensorAndUnsupportedType) {
  TempDir tmp("gguf_missing");
  auto missing = tiny_llama_gguf(tmp, [](auto&) {}, "llama", /*with_embd=*/false);
  EXPECT_THAT(load_error(missing), HasSubstr("missing tensor 'token_embd.weight'"));
  // Q8_1 (type 9, 32 elements in 36 bytes) is a valid GGUF type without a dequant kernel.
  auto q8_1 = tiny_llama_gguf(tmp, [](gw::GgufWriter& w) {
    w.tensor({"token_embd.weight", {4, 8}, 9, std::vector<std::byte>(36), std::nullopt});
  }, "llama", /*with_embd=*/false, /*vocab=*/8);
  EXPECT_THAT(load_error(q8_1), HasSubstr("tensor 'token_embd.weight': tensor type Q8_1 is not supported"));
}

TEST(LoadModelErrors, GgufMissingHyperParameter) {
  TempDir tmp("gguf_key");
  gw::GgufWriter writer;
  writer.kv_str("general.architecture", "llama");
  writer.write(tmp.path / "bare.gguf");
  EXPECT_THAT(load_error(tmp.path / "bare.gguf"), HasSubstr("metadata key 'llama.block_count' missing"));
}

}  // namespace
}  // namespace specula

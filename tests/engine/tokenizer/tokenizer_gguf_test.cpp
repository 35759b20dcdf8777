// Tokenizer::from_gguf on the default model: must agree with the smollm goldens made by HF
// tokenizers from the same vocabulary.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>

#include "engine/formats/gguf.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/tokenizer/tokenizer_test_support.h"

namespace specula {
namespace {

using namespace specula::testing;

std::filesystem::path default_model() {
  return std::filesystem::path(SPECULA_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

class TokenizerGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model())) return;
    auto gguf = GgufFile::open(default_model());
    ASSERT_TRUE(gguf.ok()) << gguf.error().message;
    auto tok = Tokenizer::from_gguf(gguf.value());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    tokenizer_ = std::make_unique<Tokenizer>(std::move(tok.value()));
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  void SetUp() override {
    if (!std::filesystem::exists(default_model())) {
      GTEST_SKIP() << "skipped: default model not downloaded (" << default_model() << ")";
    }
    ASSERT_NE(tokenizer_, nullptr);
  }
  static std::unique_ptr<Tokenizer> tokenizer_;  // loaded once for the suite
};
std::unique_ptr<Tokenizer> TokenizerGguf::tokenizer_;

TEST_F(TokenizerGguf, EncodeEqualsTheSmolLmGoldens) {
  const Goldens goldens = load_goldens("smollm");
  std::string report;
  const size_t mismatches = count_golden_mismatches(*tokenizer_, goldens, &report);
  EXPECT_EQ(mismatches, 0u) << mismatches << " of " << test_strings().size()
                            << " strings differ:\n"
                            << report;
}

TEST_F(TokenizerGguf, MetadataMatchesTheModel) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.pre_tokenizer_name(), "smollm");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_TRUE(tok.is_end_of_generation(0));
  EXPECT_FALSE(tok.is_end_of_generation(1));
  EXPECT_EQ(tok.chat_template(), ChatTemplateKind::ChatML);
  EXPECT_EQ(tok.token_bytes(1), "<|im_start|>");
  EXPECT_EQ(tok.summary(), variant_tokenizer("smollm").summary());
}

TEST_F(TokenizerGguf, ChatTemplateUsesTheModelsDefaultSystemMessage) {
  const auto cases = read_json(tokenizer_data_dir() / "chat_goldens.json");
  for (const auto& c : cases) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    const std::string rendered =
        tokenizer_->apply_chat_template(messages, c.at("add_generation_prompt").get<bool>());
    EXPECT_EQ(rendered, c.at("chatml").get<std::string>());
    EXPECT_EQ(tokenizer_->encode(rendered), c.at("chatml_ids").get<std::vector<int32_t>>());
  }
  const ChatMessage user{"user", "hi"};
  EXPECT_NE(tokenizer_->apply_chat_template({&user, 1}, true)
                .find("You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
            std::string::npos);
}

// A minimal GGUF v3 image (no tensors) holding only the given string / string-array keys.
class GgufWriter {
 public:
  GgufWriter& string(const std::string& key, const std::string& value) {
    put_string(key);
    put<uint32_t>(8);
    put_string(value);
    ++count_;
    return *this;
  }
  GgufWriter& strings(const std::string& key, const std::vector<std::string>& values) {
    put_string(key);
    put<uint32_t>(9);
    put<uint32_t>(8);
    put<uint64_t>(values.size());
    for (const auto& v : values) put_string(v);
    ++count_;
    return *this;
  }
  std::vector<std::byte> bytes() const {
    std::vector<std::byte> out;
    auto raw = [&](const void* p, size_t n) {
      const auto* b = static_cast<const std::byte*>(p);
      out.insert(out.end(), b, b + n);
    };
    const uint32_t version = 3;
    const uint64_t n_tensors = 0;
    raw("GGUF", 4);
    raw(&version, 4);
    raw(&n_tensors, 8);
    raw(&count_, 8);
    out.insert(out.end(), kv_.begin(), kv_.end());
    return out;
  }

 private:
  template <class T>
  void put(T v) {
    const auto* b = reinterpret_cast<const std::byte*>(&v);
    kv_.insert(kv_.end(), b, b + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    const auto* b = reinterpret_cast<const std::byte*>(s.data());
    kv_.insert(kv_.end(), b, b + s.size());
  }
  std::vector<std::byte> kv_;
  uint64_t count_ = 0;
};

std::vector<std::string> byte_tokens() {
  std::vector<std::string> tokens;
  for (int b = 0x21; b <= 0x7E; ++b) tokens.emplace_back(1, static_cast<char>(b));
  return tokens;
}

Expected<Tokenizer> tokenizer_from(const GgufWriter& writer) {
  const auto bytes = writer.bytes();
  auto gguf = GgufFile::parse(bytes, "test.gguf");
  if (!gguf) return gguf.error();
  return Tokenizer::from_gguf(gguf.value());
}

TEST(TokenizerGgufErrors, RejectsOtherModelsAndPreTokenizers) {
  auto llama = tokenizer_from(GgufWriter().string("tokenizer.ggml.model", "llama"));
  ASSERT_FALSE(llama.ok());
  EXPECT_NE(llama.error().message.find("unsupported tokenizer model 'llama'"), std::string::npos)
      << llama.error().message;

  auto no_tokens = tokenizer_from(GgufWriter().string("tokenizer.ggml.model", "gpt2"));
  ASSERT_FALSE(no_tokens.ok());
  EXPECT_NE(no_tokens.error().message.find("tokenizer.ggml.tokens"), std::string::npos)
      << no_tokens.error().message;

  auto pre = tokenizer_from(GgufWriter()
                                .string("tokenizer.ggml.model", "gpt2")
                                .strings("tokenizer.ggml.tokens", byte_tokens())
                                .strings("tokenizer.ggml.merges", {})
                                .string("tokenizer.ggml.pre", "deepseek-llm"));
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.error().message.find("unsupported pre-tokenizer 'deepseek-llm'"),
            std::string::npos)
      << pre.error().message;
}

TEST(TokenizerGgufErrors, ChecksMergesAndLoadsAMinimalVocabulary) {
  auto tok = tokenizer_from(GgufWriter()
                                .string("tokenizer.ggml.model", "gpt2")
                                .strings("tokenizer.ggml.tokens", byte_tokens())
                                .strings("tokenizer.ggml.merges", {"a b"})
                                .string("tokenizer.ggml.pre", "gpt2"));
  ASSERT_FALSE(tok.ok());  // "ab" is not in the vocabulary
  EXPECT_NE(tok.error().message.find("merge 0 'a b'"), std::string::npos)
      << tok.error().message;
  auto tokens = byte_tokens();
  tokens.push_back("ab");
  tok = tokenizer_from(GgufWriter()
                           .string("tokenizer.ggml.model", "gpt2")
                           .strings("tokenizer.ggml.tokens", tokens)
                           .strings("tokenizer.ggml.merges", {"a b"})
                           .string("tokenizer.ggml.pre", "llama-bpe"));
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{94, 'c' - 0x21}));
  EXPECT_EQ(tok->pre_tokenizer_name(), "llama3");
  EXPECT_EQ(tok->chat_template(), ChatTemplateKind::None);
  EXPECT_EQ(tok->bos_id(), -1);
}

}  // namespace
}  // namespace specula

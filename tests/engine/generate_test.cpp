// generate(): context limits, streaming, early stop, end-of-generation, timings and seeded
// sampling; on the tiny HF fixture (always present) and the default model when downloaded.
#include "engine/generate.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

namespace specula {
namespace {

const Model& tiny() {
  static Model model = [] {
    auto loaded = load_model(std::filesystem::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f16");
    EXPECT_TRUE(loaded.ok()) << (loaded ? "" : loaded.error().message);
    return std::move(*loaded);
  }();
  return model;
}

const Model* default_model() {
  static std::unique_ptr<Model> model = []() -> std::unique_ptr<Model> {
    const auto path = resolve_model_path("default");
    if (!std::filesystem::exists(path)) return nullptr;
    auto loaded = load_model(path);
    return loaded ? std::make_unique<Model>(std::move(*loaded)) : nullptr;
  }();
  return model.get();
}

TEST(Generate, PromptFillingTheContextIsAnError) {
  const Model& m = tiny();
  const auto ctx = m.config.context_length;
  std::vector<int32_t> prompt(static_cast<size_t>(ctx), 5);
  auto result = generate(m, prompt, {}, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().message, "prompt has " + std::to_string(ctx) + " tokens, context is " + std::to_string(ctx));
  EXPECT_FALSE(generate(m, std::vector<int32_t>{}, {}, nullptr).ok());
}

TEST(Generate, GenerationIsTruncatedAtTheContext) {
  const Model& m = tiny();
  const auto ctx = m.config.context_length;
  std::vector<int32_t> prompt(static_cast<size_t>(ctx - 3), 7);
  GenerateOptions options;
  options.max_tokens = 50;
  options.stop_at_eos = false;
  auto result = generate(m, prompt, options, nullptr);
  ASSERT_TRUE(result.ok()) << result.error().message;
  // Positions ctx-3 .. ctx-1 are fed back; the token predicted at ctx-1 is the 4th.
  EXPECT_EQ(result->tokens.size(), 4u);
  EXPECT_EQ(result->timings.prefill_tokens, ctx - 3);
  EXPECT_EQ(result->timings.decode_tokens, 3);
}

TEST(Generate, StreamsTokensAndStopsWhenAsked) {
  const Model& m = tiny();
  GenerateOptions options;
  options.max_tokens = 20;
  options.stop_at_eos = false;
  std::vector<int32_t> streamed;
  std::string bytes;
  auto result = generate(m, std::vector<int32_t>{1, 504, 3458}, options, [&](int32_t token, std::string_view piece) {
    streamed.push_back(token);
    bytes += piece;
    EXPECT_EQ(piece, m.tokenizer.token_bytes(token));
    return streamed.size() < 6;
  });
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(streamed.size(), 6u);
  EXPECT_EQ(result->tokens, streamed);
  EXPECT_EQ(result->text, bytes);
  EXPECT_FALSE(result->stopped_by_eos);
  EXPECT_GT(result->timings.prefill_seconds, 0.0);
}

TEST(Generate, BadBlockSizeIsAnError) {
  GenerateOptions options;
  options.kv_block_size = 4;
  auto result = generate(tiny(), std::vector<int32_t>{1, 2}, options, nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find("block size 4"), std::string::npos) << result.error().message;
}

TEST(Generate, SeededSamplingIsReproducible) {
  GenerateOptions options;
  options.max_tokens = 16;
  options.stop_at_eos = false;
  options.sampling = {0.9f, 50, 0.95f, 1234};
  const std::vector<int32_t> prompt = {1, 504, 3458, 28};
  auto a = generate(tiny(), prompt, options, nullptr);
  auto b = generate(tiny(), prompt, options, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->tokens.size(), 16u);
}

TEST(Generate, StopsAtEndOfGeneration) {
  const Model* m = default_model();
  if (m == nullptr) GTEST_SKIP() << "skipped: default model not downloaded";
  const std::vector<ChatMessage> messages = {{"user", "What is the capital of France?"}};
  auto prompt = m->tokenizer.encode(m->tokenizer.apply_chat_template(messages, true));
  GenerateOptions options;
  options.max_tokens = 64;
  options.threads = 2;
  int streamed = 0;
  auto result = generate(*m, prompt, options, [&](int32_t, std::string_view) { return ++streamed > 0; });
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_TRUE(result->stopped_by_eos);
  ASSERT_FALSE(result->tokens.empty());
  EXPECT_TRUE(m->tokenizer.is_end_of_generation(result->tokens.back()));
  EXPECT_EQ(streamed, static_cast<int>(result->tokens.size()) - 1);  // the end token is not streamed
  EXPECT_EQ(result->text, "The capital of France is Paris.");
  EXPECT_EQ(result->timings.decode_tokens, static_cast<int>(result->tokens.size()) - 1);
  EXPECT_GT(result->timings.decode_tokens_per_s(), 0.0);
}

}  // namespace
}  // namespace specula

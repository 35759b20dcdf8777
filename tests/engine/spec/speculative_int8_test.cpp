// Greedy fidelity at int8 activations on the default model: the row-tiled int8 kernel and the
// batched tree attention give every token the same arithmetic whatever the verify batch, so
// speculative greedy (ngram drafts, a chain and a tree) equals plain greedy of the same engine
// token for token (the f32 path is covered by speculative_slow_test).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "engine/spec/speculative.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

TEST(SpeculativeInt8, GreedyEqualsPlainOnTheDefaultModel) {
  const auto path = resolve_model_path("default");
  if (!fs::exists(path)) GTEST_SKIP() << "skipped: default model not downloaded";
  auto target = load_model(path);
  ASSERT_TRUE(target.ok()) << target.error().message;
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"The quick brown fox jumps over the lazy dog. The quick brown", "1, 2, 3, 4, 5, 6,",
                           "def fibonacci(n):\n    ", "Summarize: the cat sat on the mat. The cat sat on the mat."}) {
    const ChatMessage user{"user", text};
    prompts.push_back(target->tokenizer.encode(target->tokenizer.apply_chat_template(std::span(&user, 1), true), true));
  }
  SpeculativeEngine engine(*target, 2, Precision::Int8Activations);
  auto ngram = make_ngram_drafter({3, 1, 0});
  constexpr int kMaxTokens = 32;
  for (const auto& prompt : prompts) {
    SpeculativeOptions plain_options;
    plain_options.max_tokens = kMaxTokens;
    auto plain = engine.generate(prompt, nullptr, plain_options, nullptr);
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    for (const char* tree : {"chain:6", "static:3,2,1"}) {
      SpeculativeOptions options = plain_options;
      options.tree = *parse_tree_shape(tree);
      options.controller.enabled = false;
      auto r = engine.generate(prompt, ngram.get(), options, nullptr);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->tokens, plain->tokens) << tree;
      EXPECT_GT(r->metrics.speculative_rounds, 0);
    }
  }
}

}  // namespace
}  // namespace specula

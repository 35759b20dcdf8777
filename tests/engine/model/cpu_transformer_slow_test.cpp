// The 1K- and 4K-token prompts against transformers: exact-mode logits within 1e-3 relative
// L2, fast-mode logits close, and identical 64-token greedy continuations through generate().
#include <cstdio>

#include "engine/generate.h"
#include "tests/engine/model/cpu_transformer_goldens.h"

namespace specula {
namespace {

using testing::load_goldens;
using testing::prefill_logits;
using testing::relative_l2;

TEST(CpuTransformerGoldenSlow, LongPromptLogits) {
  SPECULA_REQUIRE_DEFAULT_MODEL();
  CpuTransformer exact(model, {2, Precision::Exact});
  CpuTransformer packed(model, {2, Precision::Default});
  for (const auto& g : load_goldens()) {
    if (!g.long_prompt) continue;
    const double exact_err = relative_l2(prefill_logits(exact, g.tokens), g.logits);
    auto logits = prefill_logits(packed, g.tokens);
    const double err = relative_l2(logits, g.logits);
    std::printf("%-10s %zu tokens: rel-L2 exact %.3g, default %.3g\n", g.name.c_str(), g.tokens.size(), exact_err, err);
    EXPECT_LE(exact_err, 1e-3) << g.name;
    EXPECT_LE(err, 1e-3) << g.name;
    EXPECT_EQ(argmax(logits), argmax(g.logits)) << g.name;
  }
}

TEST(CpuTransformerGoldenSlow, LongPromptGreedyContinuations) {
  SPECULA_REQUIRE_DEFAULT_MODEL();
  GenerateOptions options;
  options.max_tokens = 64;
  options.threads = 2;
  options.stop_at_eos = false;
  for (const auto& g : load_goldens()) {
    if (!g.long_prompt) continue;
    auto result = generate(model, g.tokens, options, nullptr);
    ASSERT_TRUE(result.ok()) << result.error().message;
    EXPECT_EQ(result->tokens, g.greedy) << g.name;
  }
}

}  // namespace
}  // namespace specula

// The fidelity invariant on the default model: with greedy acceptance, speculative output equals
// plain greedy generate() token for token, for every drafter and tree shape, on 24 prompts
// (short Spec-Bench dev items through the chat template, at least 12, and 8 plain-text prompts).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "engine/spec/speculative.h"
#include "tests/engine/spec/fidelity_prompts.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

TEST(SpeculativeSlow, GreedyEqualsPlainOnTheDefaultModel) {
  const auto path = resolve_model_path("default");
  if (!fs::exists(path)) GTEST_SKIP() << "skipped: default model not downloaded";
  auto target = load_model(path);
  ASSERT_TRUE(target.ok()) << target.error().message;
  const auto all = testing::fidelity_prompts(*target);
  ASSERT_GE(all.size(), 20u);
  constexpr int kMaxTokens = 24;

  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : all) {
    GenerateOptions o;
    o.max_tokens = kMaxTokens;
    auto r = generate(*target, p, o, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message;
    expected.push_back(r->tokens);
  }

  auto ngram = make_ngram_drafter({3, 1, 0});
  auto layerskip = make_layerskip_drafter(*target, "every-other");
  ASSERT_TRUE(layerskip.ok());
  auto draft = load_model(path);
  ASSERT_TRUE(draft.ok());
  auto model = make_model_drafter(*target, std::make_unique<Model>(std::move(*draft)));
  ASSERT_TRUE(model.ok()) << model.error().message;

  SpeculativeEngine engine(*target);
  for (Drafter* drafter : {ngram.get(), layerskip->get(), model->get()}) {
    for (const char* tree : {"chain:4", "static:3,2,1", "dynamic:4,3,10"}) {
      double accepted = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        SpeculativeOptions o;
        o.max_tokens = kMaxTokens;
        o.tree = *parse_tree_shape(tree);
        o.controller.enabled = false;
        auto r = engine.generate(all[i], drafter, o, nullptr);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(r->tokens, expected[i]) << drafter->name() << " " << tree << " prompt " << i;
        accepted += r->metrics.mean_accepted_length;
      }
      std::printf("%-24s %-16s mean accepted length %.2f\n", drafter->name().c_str(), tree,
                  accepted / static_cast<double>(all.size()));
      // The draft model is the target itself: every greedy draft is accepted.
      if (drafter == model->get() && std::string_view(tree) == "chain:4") {
        EXPECT_GT(accepted / static_cast<double>(all.size()), 4.0);
      }
    }
  }
}

}  // namespace
}  // namespace specula

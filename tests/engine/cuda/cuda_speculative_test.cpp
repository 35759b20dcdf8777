// The fidelity invariant on the GPU: with greedy acceptance, the speculative loop on the CUDA
// backend emits exactly the tokens of plain greedy decoding on the CUDA backend, for the ngram
// drafter, the layerskip and model drafters on the CPU and on the GPU, and chain, static and
// dynamic trees, on the fidelity prompts (tests/engine/spec/fidelity_prompts.h: Spec-Bench dev
// items and plain text).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/backend/cuda_backend.h"
#include "engine/spec/speculative.h"
#include "kernels/cuda/shared_kv_attention.h"
#include "tests/engine/cuda/cuda_test_support.h"
#include "tests/engine/spec/fidelity_prompts.h"

namespace specula {
namespace {

TEST(CudaSpeculative, GreedyEqualsPlainGpuGreedyForEveryDrafterAndTree) {
  if (const auto missing = testing::gpu_and_default_model_missing()) {
    std::puts(missing->c_str());
    GTEST_SKIP() << *missing;
  }
  const auto path = resolve_model_path("default");
  auto target = load_model(path);
  ASSERT_TRUE(target.ok()) << target.error().message;
  const auto all = testing::fidelity_prompts(*target);
  ASSERT_GE(all.size(), 20u);
  constexpr int kMaxTokens = 24;

  auto backend = make_cuda_backend(*target, CudaBackendOptions{});
  ASSERT_TRUE(backend) << backend.error().message;
  SpeculativeEngine engine(*target, std::move(*backend));
  ASSERT_EQ(engine.backend().name(), "cuda");

  // Plain greedy decoding on the GPU, through the same loop without a drafter.
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : all) {
    SpeculativeOptions o;
    o.max_tokens = kMaxTokens;
    auto r = engine.generate(p, nullptr, o, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message;
    expected.push_back(r->tokens);
  }

  auto ngram = make_ngram_drafter({3, 1, 0});
  std::vector<std::unique_ptr<Drafter>> drafters;
  drafters.push_back(std::move(ngram));
  std::vector<Drafter*> self_drafts;  // model drafters whose draft model is the target itself
  for (const char* where : {"cpu", "cuda"}) {
    DrafterPlacement placement;
    placement.backend = where;
    auto layerskip = make_layerskip_drafter(*target, "every-other", placement);
    ASSERT_TRUE(layerskip.ok()) << layerskip.error().message;
    drafters.push_back(std::move(*layerskip));
    auto draft = load_model(path);
    ASSERT_TRUE(draft.ok());
    auto model = make_model_drafter(*target, std::make_unique<Model>(std::move(*draft)), placement);
    ASSERT_TRUE(model.ok()) << model.error().message;
    self_drafts.push_back(model->get());
    drafters.push_back(std::move(*model));
  }

  for (const auto& owned : drafters) {
    Drafter* drafter = owned.get();
    for (const char* tree : {"chain:4", "static:3,2,1", "dynamic:4,3,10"}) {
      double accepted = 0;
      int speculative_rounds = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        SpeculativeOptions o;
        o.max_tokens = kMaxTokens;
        o.tree = *parse_tree_shape(tree);
        o.controller.enabled = false;
        auto r = engine.generate(all[i], drafter, o, nullptr);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(r->tokens, expected[i]) << drafter->name() << " " << tree << " prompt " << i;
        accepted += r->metrics.mean_accepted_length;
        speculative_rounds += r->metrics.speculative_rounds;
      }
      std::printf("%-24s %-16s mean accepted length %.2f over %zu prompts\n", drafter->name().c_str(), tree,
                  accepted / static_cast<double>(all.size()), all.size());
      EXPECT_GT(speculative_rounds, 0) << drafter->name() << " " << tree << ": nothing was verified";
      // The draft model is the target itself (on the CPU in f32, or on the GPU in bf16): nearly
      // every greedy draft of the GPU's bf16 target is accepted.
      if (std::find(self_drafts.begin(), self_drafts.end(), drafter) != self_drafts.end() &&
          std::string_view(tree) == "chain:4") {
        EXPECT_GT(accepted / static_cast<double>(all.size()), 3.5);
      }
    }
  }
}

// The same invariant past 8 attention splits (a 3000-token prompt: the fidelity prompts one after
// another): verify rows then take shared_kv_attention (several pairs a block), and rows of at
// most 8 leave the fused kernel for it; the tokens must not change, nor with that kernel off.
TEST(CudaSpeculative, GreedyEqualsPlainGpuGreedyOnALongPrompt) {
  if (const auto missing = testing::gpu_and_default_model_missing()) {
    std::puts(missing->c_str());
    GTEST_SKIP() << *missing;
  }
  auto target = load_model(resolve_model_path("default"));
  ASSERT_TRUE(target.ok()) << target.error().message;
  std::vector<int32_t> prompt;
  for (const auto& p : testing::fidelity_prompts(*target)) prompt.insert(prompt.end(), p.begin(), p.end());
  constexpr size_t kPromptTokens = 3000;
  ASSERT_GE(prompt.size(), size_t{200});
  while (prompt.size() < kPromptTokens) prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 200);
  prompt.resize(kPromptTokens);
  auto backend = make_cuda_backend(*target, CudaBackendOptions{});
  ASSERT_TRUE(backend) << backend.error().message;
  SpeculativeEngine engine(*target, std::move(*backend));
  SpeculativeOptions plain;
  plain.max_tokens = 48;
  auto expected = engine.generate(prompt, nullptr, plain, nullptr);
  ASSERT_TRUE(expected.ok()) << expected.error().message;
  auto ngram = make_ngram_drafter({3, 1, 0});
  for (bool shared : {true, false}) {
    cuda::set_shared_kv_attention(shared);
    for (const char* tree : {"chain:4", "chain:8", "static:3,2,1", "dynamic:4,3,10"}) {
      SpeculativeOptions o = plain;
      o.tree = *parse_tree_shape(tree);
      o.controller.enabled = false;
      auto r = engine.generate(prompt, ngram.get(), o, nullptr);
      ASSERT_TRUE(r.ok()) << r.error().message;
      EXPECT_EQ(r->tokens, expected->tokens) << tree << ", shared_kv_attention " << shared;
      EXPECT_GT(r->metrics.speculative_rounds, 0) << tree << ": nothing was verified";
      std::printf("%zu-token prompt, %-16s shared_kv_attention %d: mean accepted length %.2f\n", prompt.size(), tree,
                  shared, r->metrics.mean_accepted_length);
    }
  }
  cuda::set_shared_kv_attention(true);
}

}  // namespace
}  // namespace specula

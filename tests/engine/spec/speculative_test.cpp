// The speculative loop on the tiny fixture model (always present): greedy output equal to plain
// generate() for every drafter and tree shape, transactional KV (a poisoned rejected branch
// changes no later logit), context checks, and the lossy label of cascade.
#include "engine/spec/speculative.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

namespace specula {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f16";

const Model& tiny() {
  static Model model = [] {
    auto loaded = load_model(kTiny);
    EXPECT_TRUE(loaded.ok()) << (loaded ? "" : loaded.error().message);
    return std::move(*loaded);
  }();
  return model;
}

TreeShape shape(std::string_view spec) {
  auto s = parse_tree_shape(spec);
  EXPECT_TRUE(s.ok()) << spec;
  return *s;
}

// A model drafter whose draft model is the tiny target itself (a second copy): every draft is
// what the target would say.
Expected<std::unique_ptr<Drafter>> self_drafter() {
  auto same = load_model(kTiny);
  if (!same) return same.error();
  return make_model_drafter(tiny(), std::make_unique<Model>(std::move(*same)), {1});
}

std::vector<std::vector<int32_t>> prompts() {
  return {{1, 400, 500, 600},
          {1, 81, 82, 81, 82, 81},
          {1, 9000, 12, 13, 14, 9000, 12},
          {1, 3000},
          {1, 5, 6, 7, 8, 9, 10, 11}};
}

std::vector<int32_t> plain(const std::vector<int32_t>& prompt, int max_tokens) {
  GenerateOptions options;
  options.max_tokens = max_tokens;
  options.threads = 1;
  auto r = generate(tiny(), prompt, options, nullptr);
  EXPECT_TRUE(r.ok());
  return r->tokens;
}

TEST(Speculative, GreedyEqualsPlainForEveryDrafterAndShape) {
  auto layerskip = make_layerskip_drafter(tiny(), "first:1", {1});
  ASSERT_TRUE(layerskip.ok());
  auto draft_model = load_model(kTiny.parent_path() / "tiny-llama-bf16");
  ASSERT_TRUE(draft_model.ok());
  auto model = make_model_drafter(tiny(), std::make_unique<Model>(std::move(*draft_model)), {1});
  ASSERT_TRUE(model.ok()) << model.error().message;
  auto ngram = make_ngram_drafter({3, 1, 0});
  SpeculativeEngine engine(tiny(), 1);
  for (Drafter* drafter : {ngram.get(), layerskip->get(), model->get()}) {
    for (const char* tree : {"chain:1", "chain:4", "static:3,2,1", "dynamic:4,3,12"}) {
      for (const auto& prompt : prompts()) {
        SpeculativeOptions options;
        options.max_tokens = 24;
        options.tree = shape(tree);
        options.controller.enabled = false;  // speculate every round
        auto r = engine.generate(prompt, drafter, options, nullptr);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(r->tokens, plain(prompt, 24)) << drafter->name() << " " << tree;
        EXPECT_TRUE(r->lossless);
      }
    }
  }
}

TEST(Speculative, DraftEqualToTargetAcceptsEveryChainToken) {
  auto drafter = self_drafter();
  ASSERT_TRUE(drafter.ok()) << drafter.error().message;
  SpeculativeEngine engine(tiny(), 1);
  SpeculativeOptions options;
  options.max_tokens = 31;  // 1 from prefill + 6 rounds of 5
  options.stop_at_eos = false;
  options.controller.enabled = false;
  auto r = engine.generate(prompts()[0], drafter->get(), options, nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tokens.size(), 31u);
  EXPECT_EQ(r->metrics.speculative_rounds, 6);
  EXPECT_DOUBLE_EQ(r->metrics.mean_accepted_length, 5.0);
  EXPECT_DOUBLE_EQ(r->metrics.accepted_length_p90, 5.0);
  EXPECT_EQ(r->metrics.acceptance_by_depth, (std::vector<double>{1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(r->metrics.target_passes_per_token, 6.0 / 30.0);
  EXPECT_EQ(r->metrics.rollback_tokens, 0);
  EXPECT_EQ(r->metrics.rejected_kv_bytes, 0);
}

TEST(Speculative, ACarriedControllerStaysInFallbackOnTheNextSequence) {
  auto drafter = self_drafter();
  ASSERT_TRUE(drafter.ok()) << drafter.error().message;
  SpeculativeEngine engine(tiny(), 1);
  SpeculativeOptions options;
  options.max_tokens = 16;
  options.stop_at_eos = false;
  // Margin 0: speculation never pays, so the first judged round falls back, for longer than a run.
  options.controller.margin = 0;
  options.controller.warmup = 1;
  options.controller.probe_after = 1000;
  options.controller.max_probe_after = 1000;
  BreakEvenController carried(options.controller);
  SpeculativeOptions carrying = options;
  carrying.carried_controller = &carried;
  for (int run = 0; run < 2; ++run) {
    auto fresh = engine.generate(prompts()[0], drafter->get(), options, nullptr);
    auto kept = engine.generate(prompts()[0], drafter->get(), carrying, nullptr);
    ASSERT_TRUE(fresh.ok() && kept.ok());
    EXPECT_EQ(kept->tokens, plain(prompts()[0], 16));
    EXPECT_EQ(fresh->tokens, kept->tokens);
    // A fresh controller re-learns on every sequence: one speculative round, one fallback.
    EXPECT_EQ(fresh->metrics.speculative_rounds, 1);
    EXPECT_EQ(fresh->metrics.controller_fallbacks, 1);
    // The carried one learns once; on the next sequence it starts where it was, in fallback.
    EXPECT_EQ(kept->metrics.speculative_rounds, run == 0 ? 1 : 0) << "run " << run;
    EXPECT_EQ(kept->metrics.controller_fallbacks, run == 0 ? 1 : 0) << "run " << run;
  }
  EXPECT_EQ(carried.fallbacks(), 1);
}

TEST(Speculative, MetricsCountRejectedRows) {
  auto drafter = make_layerskip_drafter(tiny(), "first:1", {1});
  ASSERT_TRUE(drafter.ok());
  SpeculativeEngine engine(tiny(), 1);
  SpeculativeOptions options;
  options.max_tokens = 20;
  options.stop_at_eos = false;
  options.tree = shape("static:2,2");
  options.controller.enabled = false;
  auto r = engine.generate(prompts()[1], drafter->get(), options, nullptr);
  ASSERT_TRUE(r.ok());
  int64_t rolled = 0;
  for (const auto& round : r->rounds) {
    ASSERT_TRUE(round.speculative);
    EXPECT_EQ(round.tree_nodes, 6);
    EXPECT_EQ(round.rollback_tokens, 6 - round.accepted);
    rolled += round.rollback_tokens;
  }
  EXPECT_EQ(r->metrics.rollback_tokens, rolled);
  EXPECT_EQ(r->metrics.rejected_kv_bytes, rolled * engine.kv_row_bytes());
  EXPECT_GE(r->metrics.mean_accepted_length, 1.0);
  EXPECT_LE(r->metrics.mean_accepted_length, 3.0);
}

// After a round whose rejected branch held garbage, later logits must not depend on that garbage.
TEST(Speculative, PoisonedRejectedBranchChangesNoLaterLogit) {
  CpuTransformer target(tiny(), CpuTransformerOptions{1, Precision::Default});
  const std::vector<int32_t> prompt = {1, 400, 500, 600};
  const int32_t pending = 700, next = 900;
  const auto V = static_cast<size_t>(tiny().config.vocab_size);

  auto run = [&](std::vector<int32_t> garbage) {
    auto kv = target.make_kv_cache(16, 64);
    EXPECT_TRUE(kv.ok());
    std::vector<float> logits(V);
    const std::vector<int32_t> pos = {0, 1, 2, 3};
    EXPECT_TRUE(target.forward(prompt, pos, nullptr, *kv, logits, LogitRows::Last).ok());
    kv->commit_all();
    // Node 0 (good) and a garbage branch hanging off the root, then node 4 below node 0.
    DraftTree tree;
    EXPECT_TRUE(tree.add_child(kDraftRoot, 800, 1.0f).ok());
    DraftNodeId parent = kDraftRoot;
    for (int32_t g : garbage) parent = *tree.add_child(parent, g, 1.0f);
    EXPECT_TRUE(tree.add_child(0, 850, 1.0f).ok());
    std::vector<float> all(static_cast<size_t>(tree.size() + 1) * V);
    EXPECT_TRUE(verify_forward(target, *kv, pending, tree, all).ok());
    const std::vector<int> keep = {0, 1, tree.size()};  // pending, node 0, its child
    EXPECT_TRUE(kv->commit(keep).ok());
    const auto p = static_cast<int32_t>(kv->committed());
    EXPECT_EQ(p, 7);
    EXPECT_TRUE(target.forward({&next, 1}, {&p, 1}, nullptr, *kv, logits, LogitRows::Last).ok());
    kv->commit_all();
    return logits;
  };
  const auto a = run({11, 12, 13});
  const auto b = run({40000, 3, 29999});
  EXPECT_EQ(a, b);  // bit for bit: the garbage is gone

  // And equal (to rounding) to never having drafted at all.
  auto kv = target.make_kv_cache(16, 64);
  std::vector<float> logits(V);
  const std::vector<int32_t> seq = {1, 400, 500, 600, pending, 800, 850, next};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(target.forward(seq, pos, nullptr, *kv, logits, LogitRows::Last).ok());
  for (size_t i = 0; i < V; i += 97) EXPECT_NEAR(a[i], logits[i], 1e-4f) << i;
}

TEST(Speculative, TreeLargerThanTheContextLeftIsRefused) {
  const auto ctx = tiny().config.context_length;
  std::vector<int32_t> prompt(static_cast<size_t>(ctx - 10), 5);
  auto drafter = make_ngram_drafter();
  SpeculativeEngine engine(tiny(), 1);
  SpeculativeOptions options;
  options.tree = shape("static:4,4");
  auto r = engine.generate(prompt, drafter.get(), options, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("larger than the context left"), std::string::npos) << r.error().message;
  options.tree = shape("chain:4");
  options.max_tokens = 50;
  options.stop_at_eos = false;
  auto fits = engine.generate(prompt, drafter.get(), options, nullptr);
  ASSERT_TRUE(fits.ok()) << fits.error().message;
  EXPECT_EQ(fits->tokens.size(), 11u);  // like plain generate(): truncated at the context
}

TEST(Speculative, SamplingAndCascadeRunAndAreLabelled) {
  auto drafter = make_layerskip_drafter(tiny(), "first:1", {1});
  ASSERT_TRUE(drafter.ok());
  SpeculativeEngine engine(tiny(), 1);
  SpeculativeOptions options;
  options.max_tokens = 16;
  options.sampling = SamplingParams{0.8f, 40, 0.95f, 3};
  options.accept = "sample";
  auto s = engine.generate(prompts()[0], drafter->get(), options, nullptr);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_TRUE(s->lossless);
  EXPECT_EQ(s->acceptance, "sample");
  auto again = engine.generate(prompts()[0], drafter->get(), options, nullptr);
  EXPECT_EQ(s->tokens, again->tokens);  // seeded
  options.accept = "cascade:0.3";
  auto c = engine.generate(prompts()[0], drafter->get(), options, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->lossless);
  options.accept = "banana";
  EXPECT_FALSE(engine.generate(prompts()[0], drafter->get(), options, nullptr).ok());
}

TEST(Speculative, FirstDivergence) {
  EXPECT_FALSE(first_divergence(std::vector<int32_t>{1, 2}, std::vector<int32_t>{1, 2}).has_value());
  auto d = first_divergence(std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{1, 5, 3});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->index, 1);
  EXPECT_EQ(d->speculative_token, 2);
  EXPECT_EQ(d->plain_token, 5);
  auto shorter = first_divergence(std::vector<int32_t>{1}, std::vector<int32_t>{1, 4});
  ASSERT_TRUE(shorter);
  EXPECT_EQ(shorter->index, 1);
  EXPECT_EQ(shorter->speculative_token, -1);
}

}  // namespace
}  // namespace specula

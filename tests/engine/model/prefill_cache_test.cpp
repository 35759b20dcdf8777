// The prefill cache: a restored prefill gives the same run, token for token and round for round,
// as one computed afresh, strict and sparse; another prompt, or a traced prefill, is computed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/model/loader.h"
#include "engine/model/prefill_cache.h"
#include "engine/spec/speculative.h"

namespace specula {
namespace {

struct Counter final : Observer {
  int prefills = 0;
  ObserveLevel level() const override { return ObserveLevel::kSummary; }
  void on_event(const Event& e) override { prefills += std::holds_alternative<PrefillEvent>(e); }
};

TEST(PrefillCache, RestoredPrefillRunsExactlyLikeAComputedOne) {
  const auto path = resolve_model_path("default");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "skipped: default model not downloaded";
  auto model = load_model(path);
  ASSERT_TRUE(model.ok()) << model.error().message;
  std::ifstream in("/usr/share/common-licenses/GPL-3");
  auto ids = model->tokenizer.encode(std::string(std::istreambuf_iterator<char>(in), {}), false);
  ASSERT_GT(ids.size(), 400u);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 320), other(ids.begin() + 1, ids.begin() + 321);

  SpeculativeEngine engine(*model, 2);
  auto drafter = make_ngram_drafter();
  SpeculativeOptions strict;
  strict.max_tokens = 12;
  strict.controller.enabled = false;
  SpeculativeOptions sparse = strict;
  sparse.sparse = *sparse_preset("sa");
  sparse.sparse.dense_below = 0;
  sparse.sparse.eta = 0.2;
  const auto run = [&](const std::vector<int32_t>& p, const SpeculativeOptions& o) {
    auto r = engine.generate(p, drafter.get(), o, nullptr);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return std::move(*r);
  };
  const auto fresh_strict = run(prompt, strict);
  const auto fresh_sparse = run(prompt, sparse);

  PrefillCache cache;
  engine.cpu_transformer()->set_prefill_cache(&cache);
  const auto stored = run(prompt, strict);
  EXPECT_EQ(cache.hits(), 0);
  const auto restored_sparse = run(prompt, sparse);
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(stored.tokens, fresh_strict.tokens);
  EXPECT_EQ(restored_sparse.tokens, fresh_sparse.tokens);
  EXPECT_EQ(restored_sparse.metrics.mean_accepted_length, fresh_sparse.metrics.mean_accepted_length);
  EXPECT_EQ(restored_sparse.metrics.kv_bytes_read, fresh_sparse.metrics.kv_bytes_read);
  ASSERT_EQ(restored_sparse.rounds.size(), fresh_sparse.rounds.size());
  EXPECT_GT(fresh_sparse.metrics.kv_bytes_read, 0);

  run(other, strict);  // another prompt: computed, and stored in place of the first
  EXPECT_EQ(cache.hits(), 1);
  Counter counter;
  SpeculativeOptions traced = strict;
  traced.observer = &counter;
  run(other, traced);  // an observed prefill is computed (its per-layer events must happen)
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(counter.prefills, 1);
  engine.cpu_transformer()->set_prefill_cache(nullptr);
}

}  // namespace
}  // namespace specula

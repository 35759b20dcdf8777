// The fidelity invariant on the default model: with greedy acceptance, speculative output equals
// plain greedy generate() token for token, for every drafter and tree shape, on 24 prompts
// (short Spec-Bench dev items through the chat template, at least 12, and 8 plain-text prompts).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/spec/speculative.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

std::vector<std::vector<int32_t>> prompts(const Model& m) {
  std::vector<std::string> texts;
  // Up to two items per Spec-Bench category, first turn, chat template; long articles
  // (summarization, RAG) are skipped so the test stays within minutes on two cores.
  std::ifstream in(fs::path(SPECULA_SHARED_DIR) / "data/specbench-dev.jsonl");
  std::map<std::string, int> taken;
  for (std::string line; std::getline(in, line);) {
    const auto item = nlohmann::json::parse(line);
    const auto turn = item["turns"][0].get<std::string>();
    if (turn.size() > 600 || taken[item["category"].get<std::string>()] >= 2) continue;
    ++taken[item["category"].get<std::string>()];
    const ChatMessage user{"user", turn};
    texts.push_back(m.tokenizer.apply_chat_template(std::span(&user, 1), true));
  }
  EXPECT_GE(texts.size(), 12u);
  for (const char* t : {"The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, there was a",
                        "1, 2, 3, 4, 5, 6,", "The quick brown fox jumps over the lazy dog. The quick brown",
                        "Water boils at", "In 1492, Columbus", "import numpy as np\nimport"}) {
    texts.emplace_back(t);
  }
  std::vector<std::vector<int32_t>> out;
  for (const auto& t : texts) {
    std::vector<int32_t> ids = {m.tokenizer.bos_id() >= 0 && m.tokenizer.add_bos() ? m.tokenizer.bos_id() : -1};
    if (ids[0] < 0) ids.clear();
    const auto enc = m.tokenizer.encode(t, true);
    ids.insert(ids.end(), enc.begin(), enc.end());
    out.push_back(ids);
  }
  return out;
}

TEST(SpeculativeSlow, GreedyEqualsPlainOnTheDefaultModel) {
  const auto path = resolve_model_path("default");
  if (!fs::exists(path)) GTEST_SKIP() << "skipped: default model not downloaded";
  auto target = load_model(path);
  ASSERT_TRUE(target.ok()) << target.error().message;
  const auto all = prompts(*target);
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

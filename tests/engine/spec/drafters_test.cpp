// Drafters: prompt-lookup trees from known sequences, layer-subset parsing, tokenizer checks,
// and the transformer drafters' KV staying in step (a draft model equal to the target).
#include "engine/spec/drafters.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "engine/backend/cuda_backend.h"
#include "engine/backend/transformer_backend.h"
#include "engine/spec/sampling_filters.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f16";

std::unique_ptr<Model> load(const fs::path& path) {
  auto m = load_model(path);
  EXPECT_TRUE(m.ok()) << (m ? "" : m.error().message);
  return m ? std::make_unique<Model>(std::move(*m)) : nullptr;
}

DraftRequest request(std::string_view shape) {
  DraftRequest r;
  auto s = parse_tree_shape(shape);
  EXPECT_TRUE(s.ok());
  r.shape = *s;
  r.filters = SamplingParams{1.0f, 0, 1.0f, 0};
  return r;
}

TEST(NgramDrafter, ContinuesTheLongestEarlierMatch) {
  auto d = make_ngram_drafter({3, 1, 0});
  // ... 1 2 3 4 5 6 ... 9 1 2 3 -> the suffix "1 2 3" recurs, followed by 4 5 6.
  const std::vector<int32_t> seq = {1, 2, 3, 4, 5, 6, 9, 1, 2, 3};
  auto tree = d->draft(seq, request("chain:3"));
  ASSERT_TRUE(tree.ok()) << tree.error().message;
  ASSERT_EQ(tree->size(), 3);
  EXPECT_EQ(tree->path_tokens(2), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_FLOAT_EQ(tree->node(0).draft_prob, 1.0f);
}

TEST(NgramDrafter, SeveralMatchesBranch) {
  auto d = make_ngram_drafter({2, 1, 0});
  // "7 8" was followed once by 1 and once by 2 (then 3 after "8 2" ... ).
  const std::vector<int32_t> seq = {7, 8, 1, 5, 7, 8, 2, 6, 7, 8};
  auto tree = d->draft(seq, request("static:2,1"));
  ASSERT_TRUE(tree.ok()) << tree.error().message;
  ASSERT_EQ(tree->children(kDraftRoot).size(), 2u);
  EXPECT_EQ(tree->node(0).token, 1);
  EXPECT_EQ(tree->node(1).token, 2);
  EXPECT_FLOAT_EQ(tree->node(0).draft_prob, 0.5f);
  // Each branch continues its own match: 8 1 -> 5, 8 2 -> 6.
  EXPECT_EQ(tree->size(), 4);
  EXPECT_EQ(tree->path_tokens(2), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(tree->path_tokens(3), (std::vector<int32_t>{2, 6}));
}

// Regression: Spec-Bench summarization failed with "draft probability 1.000000 outside [0, 1]"
// when one continuation followed k earlier matches and k·(1/k) summed above 1 in float.
TEST(NgramDrafter, ManyIdenticalMatchesGiveProbabilityOne) {
  auto d = make_ngram_drafter({1, 1, 0});
  for (int k : {3, 5, 6, 7, 10, 11, 13, 49}) {
    std::vector<int32_t> seq;
    for (int i = 0; i < k; ++i) seq.insert(seq.end(), {4, 9});
    seq.push_back(4);
    auto tree = d->draft(seq, request("chain:1"));
    ASSERT_TRUE(tree.ok()) << "k=" << k << ": " << tree.error().message;
    ASSERT_EQ(tree->size(), 1);
    EXPECT_EQ(tree->node(0).token, 9);
    EXPECT_EQ(tree->node(0).draft_prob, 1.0f) << "k=" << k;
  }
}

TEST(NgramDrafter, NoMatchMeansNoTreeAndMaxLengthCaps) {
  auto d = make_ngram_drafter({3, 2, 0});
  auto none = d->draft(std::vector<int32_t>{1, 2, 3, 4, 5}, request("chain:4"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto capped = make_ngram_drafter({2, 1, 2});
  auto tree = capped->draft(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 1, 2}, request("chain:5"));
  ASSERT_TRUE(tree.ok());
  EXPECT_EQ(tree->size(), 2);
  EXPECT_EQ(tree->path_tokens(1), (std::vector<int32_t>{3, 4}));
}

// The drafter's n-gram index against a scan of the whole sequence, on random 5-token texts that
// grow by rounds, with a new unrelated sequence now and then (the index starts over).
TEST(NgramDrafter, IndexFindsWhatAScanFinds) {
  std::mt19937 rng(std::random_device{}());
  auto d = make_ngram_drafter({3, 1, 0});
  std::vector<int32_t> seq;
  for (int round = 0; round < 400; ++round) {
    if (round % 100 == 0) seq.clear();
    const int grow = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < grow; ++i) seq.push_back(static_cast<int32_t>(rng() % 5));
    // The scan: followers of the longest suffix (3..1 tokens) that occurred before.
    std::map<int32_t, int> want;
    for (int n = std::min<int>(3, static_cast<int>(seq.size()) - 1); n >= 1 && want.empty(); --n) {
      for (size_t i = 0; i + n < seq.size(); ++i) {
        if (std::equal(seq.end() - n, seq.end(), seq.begin() + static_cast<std::ptrdiff_t>(i))) ++want[seq[i + n]];
      }
    }
    auto tree = d->draft(seq, request("static:5"));
    ASSERT_TRUE(tree.ok()) << tree.error().message;
    int total = 0;
    for (const auto& [t, c] : want) total += c;
    ASSERT_EQ(tree->size(), static_cast<int>(want.size())) << "round " << round;
    for (DraftNodeId id = 0; id < tree->size(); ++id) {
      const auto& node = tree->node(id);
      ASSERT_TRUE(want.count(node.token)) << "round " << round << " token " << node.token;
      EXPECT_FLOAT_EQ(node.draft_prob, static_cast<float>(want[node.token]) / static_cast<float>(total));
    }
  }
}

TEST(NgramDrafter, HistoryAnswersWhatTheSequenceNeverSaw) {
  NgramOptions options{3, 1, 0};
  options.history_tokens = 64;
  auto d = make_ngram_drafter(options);
  EXPECT_NE(d->name().find("history=64"), std::string::npos) << d->name();
  // A first request: prompt 50 51, generated 20 21 22 23 (its last draft() call sees all of it).
  ASSERT_TRUE(d->draft(std::vector<int32_t>{50, 51, 20}, request("chain:2")).ok());
  ASSERT_TRUE(d->draft(std::vector<int32_t>{50, 51, 20, 21, 22, 23}, request("chain:2")).ok());
  d->reset();
  // A new request ending in 21: only the history knows what followed it.
  auto tree = d->draft(std::vector<int32_t>{60, 61, 21}, request("chain:2"));
  ASSERT_TRUE(tree.ok()) << tree.error().message;
  ASSERT_EQ(tree->size(), 2);
  EXPECT_EQ(tree->path_tokens(1), (std::vector<int32_t>{22, 23}));
  // The sequence itself wins where it has its own match: 21 -> 30 here.
  tree = d->draft(std::vector<int32_t>{60, 61, 21, 30, 9, 21}, request("chain:1"));
  ASSERT_TRUE(tree.ok());
  ASSERT_EQ(tree->size(), 1);
  EXPECT_EQ(tree->node(0).token, 30);
  // Without history the same drafter state proposes nothing for an unseen suffix.
  auto plain = make_ngram_drafter({3, 1, 0});
  ASSERT_TRUE(plain->draft(std::vector<int32_t>{50, 51, 20, 21, 22, 23}, request("chain:2")).ok());
  plain->reset();
  tree = plain->draft(std::vector<int32_t>{60, 61, 21}, request("chain:2"));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(tree->empty());
}

TEST(NgramDrafter, HistoryKeepsItsTokenBudget) {
  NgramOptions options{1, 1, 0};
  options.history_tokens = 6;
  auto d = make_ngram_drafter(options);
  // Two requests of 4 archived tokens each (a 1-token prompt, then the answer): the second pushes
  // the first out, so its 7 -> 8 is forgotten and 5 -> 6 is kept.
  for (const auto& [prompt, answer] : {std::pair{1, std::vector<int32_t>{7, 8, 9}}, {2, {5, 6, 4}}}) {
    ASSERT_TRUE(d->draft(std::vector<int32_t>{prompt, answer[0]}, request("chain:1")).ok());
    std::vector<int32_t> all = {prompt};
    all.insert(all.end(), answer.begin(), answer.end());
    ASSERT_TRUE(d->draft(all, request("chain:1")).ok());
    d->reset();
  }
  auto tree = d->draft(std::vector<int32_t>{3, 7}, request("chain:1"));
  ASSERT_TRUE(tree.ok());
  EXPECT_TRUE(tree->empty());
  tree = d->draft(std::vector<int32_t>{3, 5}, request("chain:1"));
  ASSERT_TRUE(tree.ok());
  ASSERT_EQ(tree->size(), 1);
  EXPECT_EQ(tree->node(0).token, 6);
}

TEST(LayerSubset, ParsesEveryForm) {
  EXPECT_EQ(*parse_layer_subset("every-other", 5), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(*parse_layer_subset("first:2", 30), (std::vector<int>{0, 1}));
  EXPECT_EQ(*parse_layer_subset("last:2", 30), (std::vector<int>{28, 29}));
  EXPECT_EQ(*parse_layer_subset("list:5,1,3", 30), (std::vector<int>{1, 3, 5}));
  for (const char* bad : {"first:0", "first:31", "list:1,1", "list:30", "half", "first:x", "list:"}) {
    auto r = parse_layer_subset(bad, 30);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message.find(bad), std::string::npos) << r.error().message;
  }
}

TEST(ModelDrafter, RefusesAnotherTokenizer) {
  auto target = load(kTiny);
  ASSERT_TRUE(target);
  // The same model with two vocabulary entries swapped: same size, different ids.
  const fs::path dir = fs::temp_directory_path() / ("specula_drafter_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(kTiny / f, dir / f, fs::copy_options::overwrite_existing);
  nlohmann::json tok = nlohmann::json::parse(std::ifstream(kTiny / "tokenizer.json"));
  auto& vocab = tok["model"]["vocab"];
  const auto a = vocab["a"].get<int>();
  vocab["a"] = vocab["b"].get<int>();
  vocab["b"] = a;
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  auto other = load(dir);
  ASSERT_TRUE(other);
  auto drafter = make_model_drafter(*target, std::move(other));
  ASSERT_FALSE(drafter.ok());
  EXPECT_NE(drafter.error().message.find("different tokenizers"), std::string::npos) << drafter.error().message;
  fs::remove_all(dir);

  auto same = make_model_drafter(*target, load(kTiny));
  EXPECT_TRUE(same.ok());
}

TEST(TransformerDrafters, KeepTheirKvInStepAndRollBackDrafts) {
  auto target = load(kTiny);
  ASSERT_TRUE(target);
  auto drafter = make_layerskip_drafter(*target, "first:1", {1});
  ASSERT_TRUE(drafter.ok()) << drafter.error().message;
  std::vector<int32_t> seq = {1, 400, 500, 600};
  auto first = (*drafter)->draft(seq, request("chain:3"));
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->size(), 3);
  // 4 prompt tokens fed once, then the path one draft token a step (the distributions after 1
  // and 2 draft tokens), both path rows dropped after the round.
  EXPECT_EQ((*drafter)->stats().draft_tokens, 4 + 1 + 1);
  EXPECT_EQ((*drafter)->stats().rollback_tokens, 2);
  // The sequence grows by two tokens: only those two are fed, and the same sequence drafted by
  // a fresh drafter gives the same tree.
  seq.push_back(first->node(0).token);
  seq.push_back(77);
  auto second = (*drafter)->draft(seq, request("chain:3"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*drafter)->stats().draft_tokens, 6 + 2 + 1 + 1);
  auto fresh = make_layerskip_drafter(*target, "first:1", {1});
  auto again = (*fresh)->draft(seq, request("chain:3"));
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), second->size());
  for (int i = 0; i < again->size(); ++i) {
    EXPECT_EQ(again->node(i).token, second->node(i).token);
    EXPECT_NEAR(again->node(i).draft_prob, second->node(i).draft_prob, 1e-5);
  }
  // A different sequence (not an extension) starts over.
  auto other = (*drafter)->draft(std::vector<int32_t>{1, 9, 9}, request("chain:2"));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->size(), 2);
  // ...in a fresh KV cache: the first sequence drafted again gives the fresh drafter's tree.
  auto back = (*drafter)->draft(seq, request("chain:3"));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), again->size());
  for (int i = 0; i < back->size(); ++i) EXPECT_EQ(back->node(i).token, again->node(i).token);
}

// A branching tree: the drafter cuts its draft path back to the prefix a node shares with the
// last one and feeds only the rest, so every node must get the distribution one forward of the
// whole sequence and prefix gives in a fresh cache (the CPU backend computes each row the same way
// in both, so tokens and probabilities agree exactly).
TEST(TransformerDrafters, BranchingTreesMatchWholePrefixForwards) {
  auto target = load(kTiny);
  ASSERT_TRUE(target);
  auto drafter = make_model_drafter(*target, load(kTiny));
  ASSERT_TRUE(drafter.ok()) << drafter.error().message;
  auto reference_model = load(kTiny);
  ASSERT_TRUE(reference_model);
  BackendOptions cpu;
  cpu.kind = "cpu";
  auto backend = make_backend(*reference_model, cpu);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  std::vector<int32_t> seq = {1, 400, 500, 600, 700};
  for (const char* shape : {"static:3,2,2", "dynamic:4,3,12", "chain:4"}) {
    const DraftRequest req = request(shape);
    auto got = (*drafter)->draft(seq, req);
    ASSERT_TRUE(got.ok()) << shape << ": " << got.error().message;
    std::vector<float> logits(static_cast<size_t>(reference_model->config.vocab_size));
    const DraftDistributionFn whole = [&](std::span<const int32_t> prefix) -> Expected<DraftDistribution> {
      auto session = (*backend)->start(16, 0);
      if (!session) return session.error();
      std::vector<int32_t> tokens(seq);
      tokens.insert(tokens.end(), prefix.begin(), prefix.end());
      std::vector<int32_t> positions(tokens.size());
      std::iota(positions.begin(), positions.end(), 0);
      if (auto ok = (*session)->forward(tokens, positions, nullptr, logits, LogitRows::Last); !ok) return ok.error();
      return apply_sampling_filters(logits, req.filters);
    };
    auto want = build_draft_tree(req.shape, whole, req.choice);
    ASSERT_TRUE(want.ok()) << want.error().message;
    ASSERT_EQ(got->size(), want->size()) << shape;
    for (int i = 0; i < want->size(); ++i) {
      EXPECT_EQ(got->node(i).token, want->node(i).token) << shape << " node " << i;
      EXPECT_EQ(got->node(i).parent, want->node(i).parent) << shape << " node " << i;
      EXPECT_FLOAT_EQ(got->node(i).draft_prob, want->node(i).draft_prob) << shape << " node " << i;
    }
    seq.push_back(got->node(0).token);  // the next round drafts after one more token
  }
}

TEST(TransformerDrafters, CudaPlacementWithoutAGpuIsRefused) {
  if (cuda_gpu_available()) GTEST_SKIP() << "a GPU is present (tests/engine/cuda covers drafting there)";
  auto target = load(kTiny);
  ASSERT_TRUE(target);
  DrafterPlacement on_gpu;
  on_gpu.backend = "cuda";
  auto drafter = make_layerskip_drafter(*target, "first:1", on_gpu);
  ASSERT_FALSE(drafter.ok());
  const std::string& message = drafter.error().message;
  EXPECT_NE(message.find("layerskip:first:1"), std::string::npos) << message;
  EXPECT_TRUE(message.find("no CUDA GPU") != std::string::npos || message.find("without CUDA") != std::string::npos ||
              message.find("does not run") != std::string::npos)
      << message;
}

// ngram|something: the first drafter's tree when it has one, else the second's.
TEST(FallbackDrafter, TakesTheSecondTreeOnlyWhenTheFirstIsEmpty) {
  auto d = make_fallback_drafter(make_ngram_drafter({3, 3, 0}), make_ngram_drafter({1, 1, 0}));
  EXPECT_NE(d->name().find('|'), std::string::npos) << d->name();
  EXPECT_FALSE(d->wants_target_feature());
  // Only a 1-token suffix recurs ("5" -> 6): the 3-token drafter is empty, the 1-token one drafts 6.
  auto second = d->draft(std::vector<int32_t>{5, 6, 1, 2, 5}, request("chain:1"));
  ASSERT_TRUE(second.ok()) << second.error().message;
  ASSERT_EQ(second->size(), 1);
  EXPECT_EQ(second->node(0).token, 6);
  // "1 2 3" recurs followed by 4, and "3" alone was last followed by 9: the first drafter's 4 wins.
  auto first = d->draft(std::vector<int32_t>{1, 2, 3, 4, 7, 3, 9, 1, 2, 3}, request("chain:1"));
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_EQ(first->size(), 1);
  EXPECT_EQ(first->node(0).token, 4);
}

}  // namespace
}  // namespace specula

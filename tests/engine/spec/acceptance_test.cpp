#include "engine/spec/acceptance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/spec/sampling_filters.h"

namespace specula {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Rows: [0] after the committed context, [1 + i] after node i.
struct Target {
  std::vector<float> flat;
  int vocab = 0;
  explicit Target(const std::vector<std::vector<float>>& rows) : vocab(static_cast<int>(rows.at(0).size())) {
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  }
  TargetProbs probs() const { return TargetProbs{flat, vocab}; }
};

std::vector<float> one_hot(int vocab, int token) {
  std::vector<float> v(static_cast<size_t>(vocab), 0.0f);
  v[static_cast<size_t>(token)] = 1.0f;
  return v;
}

// root ─┬─ 0 (t2) ── 2 (t1)
//       └─ 1 (t3) ── 3 (t4) ── 4 (t0)
DraftTree greedy_tree() {
  DraftTree tree;
  EXPECT_TRUE(tree.add_child(kDraftRoot, 2, 0.6f).ok());
  EXPECT_TRUE(tree.add_child(kDraftRoot, 3, 0.3f).ok());
  EXPECT_TRUE(tree.add_child(0, 1, 0.5f).ok());
  EXPECT_TRUE(tree.add_child(1, 4, 0.5f).ok());
  EXPECT_TRUE(tree.add_child(3, 0, 0.5f).ok());
  return tree;
}

TEST(GreedyRule, AcceptsTheArgmaxPathAndAddsTheBonus) {
  const DraftTree tree = greedy_tree();
  const Target target({
      {0.1f, 0.1f, 0.3f, 0.4f, 0.1f},    // root: argmax 3 -> node 1
      {0.2f, 0.2f, 0.2f, 0.2f, 0.2f},    // after node 0 (never read: node 0 is rejected)
      {0.0f, 0.0f, 0.1f, 0.3f, 0.6f},    // after node 1: argmax 4 -> node 3
      {1.0f, 0.0f, 0.0f, 0.0f, 0.0f},    // after node 2
      {0.5f, 0.2f, 0.1f, 0.1f, 0.1f},    // after node 3: argmax 0 -> node 4 (a leaf)
      {0.1f, 0.1f, 0.7f, 0.05f, 0.05f},  // after node 4: bonus 2
  });
  std::mt19937_64 rng(0);
  auto rule = make_greedy_rule();
  auto result = rule->accept(tree, target.probs(), rng);
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result->accepted_path, (std::vector<DraftNodeId>{1, 3, 4}));
  EXPECT_EQ(result->next_token, 2);
  EXPECT_TRUE(result->bonus);
  EXPECT_EQ(result->emitted_tokens(tree), (std::vector<int32_t>{3, 4, 0, 2}));

  ASSERT_EQ(result->decisions.size(), 4u);
  EXPECT_EQ(result->decisions[0].node, 0);
  EXPECT_EQ(result->decisions[0].verdict, NodeVerdict::kRejected);
  EXPECT_FLOAT_EQ(result->decisions[0].target_prob, 0.3f);
  EXPECT_EQ(result->decisions[0].accept_prob, 0.0f);
  EXPECT_EQ(result->decisions[1].node, 1);
  EXPECT_EQ(result->decisions[1].verdict, NodeVerdict::kAccepted);
  EXPECT_FLOAT_EQ(result->decisions[1].target_prob, 0.4f);
  EXPECT_FLOAT_EQ(result->decisions[1].draft_prob, 0.3f);
  EXPECT_EQ(result->decisions[3].node, 4);
  EXPECT_EQ(result->decisions[3].verdict, NodeVerdict::kAccepted);
  EXPECT_TRUE(rule->lossless());
}

TEST(GreedyRule, StopsAtTheFirstMismatchWithTheTargetToken) {
  const DraftTree tree = greedy_tree();
  std::vector<std::vector<float>> rows(6, one_hot(5, 0));
  rows[0] = one_hot(5, 3);  // accept node 1
  rows[2] = one_hot(5, 4);  // accept node 3
  rows[4] = one_hot(5, 1);  // node 4 drafted 0: rejected, correction 1
  std::mt19937_64 rng(0);
  auto result = make_greedy_rule()->accept(tree, Target(rows).probs(), rng);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->accepted_path, (std::vector<DraftNodeId>{1, 3}));
  EXPECT_EQ(result->next_token, 1);
  EXPECT_FALSE(result->bonus);
  EXPECT_EQ(result->decisions.back().node, 4);
  EXPECT_EQ(result->decisions.back().verdict, NodeVerdict::kRejected);

  rows[0] = one_hot(5, 4);  // nothing at depth 1 matches
  auto none = make_greedy_rule()->accept(tree, Target(rows).probs(), rng);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->accepted_path.empty());
  EXPECT_EQ(none->emitted_tokens(tree), (std::vector<int32_t>{4}));
  EXPECT_EQ(none->decisions.size(), 2u);
}

TEST(GreedyRule, TakesTheLongestOfEqualTokenBranches) {
  DraftTree tree;  // two first-level nodes with the same token; only the second continues
  ASSERT_TRUE(tree.add_child(kDraftRoot, 2, 0.5f).ok());
  ASSERT_TRUE(tree.add_child(kDraftRoot, 2, 0.5f).ok());
  ASSERT_TRUE(tree.add_child(1, 1, 0.5f).ok());
  const Target target({one_hot(3, 2), one_hot(3, 0), one_hot(3, 1), one_hot(3, 0)});
  std::mt19937_64 rng(0);
  auto result = make_greedy_rule()->accept(tree, target.probs(), rng);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->accepted_path, (std::vector<DraftNodeId>{1, 2}));
  EXPECT_EQ(result->decisions[0].verdict, NodeVerdict::kPassed);
  EXPECT_EQ(result->next_token, 0);
}

// Invariant from ARCHITECTURE.md: greedy verification reproduces plain greedy decoding.
TEST(GreedyRule, ReproducesPlainGreedyDecodingOnRandomTrees) {
  const int vocab = 7;
  // The target's next-token distribution depends on the last two tokens; fixed random values.
  std::mt19937_64 table_rng(11);
  std::vector<std::vector<float>> table(static_cast<size_t>(vocab * vocab));
  for (auto& row : table) {
    for (int t = 0; t < vocab; ++t) row.push_back(static_cast<float>(uniform_unit(table_rng)));
  }
  auto target_after = [&](const std::vector<int32_t>& seq) {
    const size_t a = static_cast<size_t>(seq[seq.size() - 2]), b = static_cast<size_t>(seq.back());
    return table[a * vocab + b];
  };
  auto argmax = [](const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };

  std::mt19937_64 rng(5);
  int accepted_total = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<int32_t> context = {static_cast<int32_t>(rng() % vocab), static_cast<int32_t>(rng() % vocab)};
    // A random tree whose nodes often, but not always, hold the target's greedy token.
    DraftTree tree;
    for (int i = 0; i < 12; ++i) {
      const DraftNodeId parent = static_cast<DraftNodeId>(rng() % static_cast<uint64_t>(tree.size() + 1)) - 1;
      std::vector<int32_t> seq = context;
      for (int32_t t : tree.path_tokens(parent)) seq.push_back(t);
      const int32_t token = rng() % 3 == 0 ? static_cast<int32_t>(rng() % vocab) : argmax(target_after(seq));
      ASSERT_TRUE(tree.add_child(parent, token, 0.5f).ok());
    }
    std::vector<std::vector<float>> rows = {target_after(context)};
    for (DraftNodeId id = 0; id < tree.size(); ++id) {
      std::vector<int32_t> seq = context;
      for (int32_t t : tree.path_tokens(id)) seq.push_back(t);
      rows.push_back(target_after(seq));
    }
    auto result = make_greedy_rule()->accept(tree, Target(rows).probs(), rng);
    ASSERT_TRUE(result.ok());
    const std::vector<int32_t> emitted = result->emitted_tokens(tree);
    accepted_total += static_cast<int>(result->accepted_path.size());

    std::vector<int32_t> plain = context;
    for (size_t k = 0; k < emitted.size(); ++k) plain.push_back(argmax(target_after(plain)));
    EXPECT_EQ(emitted, std::vector<int32_t>(plain.begin() + 2, plain.end())) << "trial " << trial;
  }
  EXPECT_GT(accepted_total, 200);  // the trees did get accepted, so the comparison means something
}

// accept_greedy_tokens (the greedy rule from each row's argmax alone, as a GPU verify hands it
// back) against the greedy rule on the one-hot rows apply_sampling_filters gives at temperature 0:
// the same path, next token, bonus and decisions, on random trees and rows with exact ties.
TEST(GreedyTokens, EqualTheGreedyRuleOnOneHotRows) {
  const int vocab = 6;
  std::mt19937_64 rng(17);
  int accepted_total = 0;
  for (int trial = 0; trial < 300; ++trial) {
    DraftTree tree;
    for (int i = 0; i < 10; ++i) {
      const DraftNodeId parent = static_cast<DraftNodeId>(rng() % static_cast<uint64_t>(tree.size() + 1)) - 1;
      ASSERT_TRUE(tree.add_child(parent, static_cast<int32_t>(rng() % 3), 0.5f).ok());
    }
    std::vector<std::vector<float>> rows;
    std::vector<int32_t> greedy;
    for (int r = 0; r <= tree.size(); ++r) {
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (auto& x : logits) x = static_cast<float>(rng() % 4);  // few values: ties are common
      rows.push_back(apply_sampling_filters(logits, SamplingParams{0.0f, 0, 1.0f, 0}));
      greedy.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    }
    auto want = make_greedy_rule()->accept(tree, Target(rows).probs(), rng);
    auto got = accept_greedy_tokens(tree, greedy);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(got->accepted_path, want->accepted_path) << "trial " << trial;
    EXPECT_EQ(got->next_token, want->next_token) << "trial " << trial;
    EXPECT_EQ(got->bonus, want->bonus) << "trial " << trial;
    ASSERT_EQ(got->decisions.size(), want->decisions.size()) << "trial " << trial;
    for (size_t i = 0; i < got->decisions.size(); ++i) {
      EXPECT_EQ(got->decisions[i].node, want->decisions[i].node);
      EXPECT_EQ(got->decisions[i].verdict, want->decisions[i].verdict);
      EXPECT_EQ(got->decisions[i].target_prob, want->decisions[i].target_prob);
      EXPECT_EQ(got->decisions[i].draft_prob, want->decisions[i].draft_prob);
      EXPECT_EQ(got->decisions[i].accept_prob, want->decisions[i].accept_prob);
    }
    accepted_total += static_cast<int>(got->accepted_path.size());
  }
  EXPECT_GT(accepted_total, 100);  // paths were accepted, not only rejected
  DraftTree tree = greedy_tree();
  EXPECT_FALSE(accept_greedy_tokens(tree, std::vector<int32_t>(3, 0)));  // 5 nodes need 6 rows
}

TEST(AcceptanceInput, RejectsMismatchedTargets) {
  const DraftTree tree = greedy_tree();
  std::mt19937_64 rng(0);
  const Target short_target({one_hot(5, 0), one_hot(5, 0)});
  auto result = make_sample_rule()->accept(tree, short_target.probs(), rng);
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(contains(result.error().message, "needs 30")) << result.error().message;

  const Target narrow(std::vector<std::vector<float>>(6, one_hot(3, 0)));  // node 1 drafted token 3
  auto outside = make_greedy_rule()->accept(tree, narrow.probs(), rng);
  ASSERT_FALSE(outside.ok());
  EXPECT_TRUE(contains(outside.error().message, "outside the target vocab")) << outside.error().message;

  std::vector<std::vector<float>> rows(6, one_hot(5, 0));
  rows[0] = std::vector<float>(5, 0.0f);
  auto empty_row = make_sample_rule()->accept(tree, Target(rows).probs(), rng);
  ASSERT_FALSE(empty_row.ok());
  EXPECT_TRUE(contains(empty_row.error().message, "no probability mass")) << empty_row.error().message;
}

// ---- cascade ------------------------------------------------------------------------------

TEST(CascadeRule, AcceptsByRatioToTheTargetMaximum) {
  // Root children: t1 (p .3 = .6 max), t2 (p .15 = .3 max), t3 (p .05 = .1 max); under t2 a
  // node t0 that any threshold accepts.
  DraftTree tree;
  ASSERT_TRUE(tree.add_child(kDraftRoot, 1, 0.4f).ok());
  ASSERT_TRUE(tree.add_child(kDraftRoot, 2, 0.4f).ok());
  ASSERT_TRUE(tree.add_child(kDraftRoot, 3, 0.2f).ok());
  ASSERT_TRUE(tree.add_child(1, 0, 0.9f).ok());
  const Target target({{0.5f, 0.3f, 0.15f, 0.05f}, one_hot(4, 2), one_hot(4, 0), one_hot(4, 1), one_hot(4, 3)});

  auto run = [&](float tau) {
    std::mt19937_64 rng(0);
    auto result = make_cascade_rule(tau)->accept(tree, target.probs(), rng);
    EXPECT_TRUE(result.ok());
    return *result;
  };
  EXPECT_TRUE(run(0.7f).accepted_path.empty());
  EXPECT_TRUE(run(1.0f).accepted_path.empty());  // only the argmax (token 0, not drafted) would pass
  const AcceptanceResult half = run(0.5f);
  EXPECT_EQ(half.accepted_path, (std::vector<DraftNodeId>{0}));
  EXPECT_EQ(half.next_token, 2);  // sampled from the one-hot target after node 0
  EXPECT_TRUE(half.bonus);
  EXPECT_EQ(half.decisions[1].verdict, NodeVerdict::kRejected);
  // At .25 both t1 and t2 pass; t2 leads further.
  const AcceptanceResult quarter = run(0.25f);
  EXPECT_EQ(quarter.accepted_path, (std::vector<DraftNodeId>{1, 3}));
  EXPECT_EQ(quarter.decisions[0].verdict, NodeVerdict::kPassed);
  EXPECT_EQ(quarter.emitted_tokens(tree), (std::vector<int32_t>{2, 0, 3}));
  EXPECT_EQ(run(0.05f).accepted_path, (std::vector<DraftNodeId>{1, 3}));

  auto rule = make_cascade_rule(0.5f);
  EXPECT_FALSE(rule->lossless());
  EXPECT_EQ(rule->name(), "cascade:0.5");
  EXPECT_TRUE(contains(rule->description(), "lossy")) << rule->description();
}

TEST(AcceptanceRuleSpec, ParsesNamesAndRejectsBadSpecs) {
  for (const std::string spec : {"greedy", "sample", "cascade:0.3", "cascade:1"}) {
    auto rule = make_acceptance_rule(spec);
    ASSERT_TRUE(rule.ok()) << spec << ": " << rule.error().message;
    EXPECT_EQ((*rule)->name(), spec);
  }
  EXPECT_TRUE((*make_acceptance_rule("sample"))->lossless());
  const std::map<std::string, std::string> bad = {
      {"cascade", "needs a threshold"},   {"cascade:", "not a number"},    {"cascade:abc", "not a number"},
      {"cascade:0.3x", "not a number"},   {"cascade:0", "outside (0, 1]"}, {"cascade:1.5", "outside (0, 1]"},
      {"cascade:-0.2", "outside (0, 1]"}, {"typical", "expected greedy"},  {"", "expected greedy"},
  };
  for (const auto& [spec, reason] : bad) {
    auto rule = make_acceptance_rule(spec);
    ASSERT_FALSE(rule.ok()) << "accepted \"" << spec << "\"";
    EXPECT_TRUE(contains(rule.error().message, reason)) << spec << ": " << rule.error().message;
  }
}

// ---- sample (single decisions; the distribution tests live in acceptance_distribution_test) --

std::shared_ptr<const DraftDistribution> dist(DraftDistribution q) {
  return std::make_shared<const DraftDistribution>(std::move(q));
}

TEST(SampleRule, EqualDistributionsAlwaysAccept) {
  const auto q = dist({0.2f, 0.5f, 0.3f});
  DraftTree tree;
  ASSERT_TRUE(tree.add_child(kDraftRoot, 1, 0.5f, q, true).ok());
  ASSERT_TRUE(tree.add_child(0, 2, 0.3f, q, true).ok());
  const Target target({*q, *q, *q});
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200; ++i) {
    auto result = make_sample_rule()->accept(tree, target.probs(), rng);
    ASSERT_TRUE(result.ok());
    ASSERT_EQ(result->accepted_path.size(), 2u);
    EXPECT_TRUE(result->bonus);
    EXPECT_FLOAT_EQ(result->decisions[0].accept_prob, 1.0f);
  }
}

TEST(SampleRule, ZeroTargetProbabilityAlwaysRejectsIntoTheResidual) {
  // p = {0, .5, .5}, q = {.6, .4, 0}: token 0 can never pass; the residual
  // max(0, p - q) = {0, .1, .5} / .6 never yields token 0 either.
  const auto q = dist({0.6f, 0.4f, 0.0f});
  DraftTree tree;
  ASSERT_TRUE(tree.add_child(kDraftRoot, 0, 0.6f, q, true).ok());
  const Target target({{0.0f, 0.5f, 0.5f}, one_hot(3, 0)});
  std::mt19937_64 rng(2);
  int ones = 0;
  const int rounds = 6000;
  for (int i = 0; i < rounds; ++i) {
    auto result = make_sample_rule()->accept(tree, target.probs(), rng);
    ASSERT_TRUE(result.ok());
    ASSERT_TRUE(result->accepted_path.empty());
    ASSERT_NE(result->next_token, 0);
    ones += result->next_token == 1;
    EXPECT_EQ(result->decisions[0].accept_prob, 0.0f);
  }
  EXPECT_NEAR(ones / static_cast<double>(rounds), 1 / 6.0, 0.025);  // > 5 standard deviations
}

TEST(SampleRule, LaterSiblingsSeeTheResidualAndTheRenormalisedDraft) {
  // p = {.1, .3, .6}, q = {.6, .2, .2}. Sibling 1 (t0) passes with .1/.6. After its rejection
  // p becomes max(0, p - q) / .5 = {0, .2, .8} and q drops t0: {0, .5, .5}, so sibling 2 (t1)
  // is tested with p .2, q .5, i.e. accepted with probability .4.
  const auto q = dist({0.6f, 0.2f, 0.2f});
  DraftTree tree;
  ASSERT_TRUE(tree.add_child(kDraftRoot, 0, 0.6f, q, true).ok());
  ASSERT_TRUE(tree.add_child(kDraftRoot, 1, 0.2f, q, true).ok());
  const Target target({{0.1f, 0.3f, 0.6f}, one_hot(3, 0), one_hot(3, 0)});
  int seen_second = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 rng(seed);
    auto result = make_sample_rule()->accept(tree, target.probs(), rng);
    ASSERT_TRUE(result.ok());
    EXPECT_NEAR(result->decisions[0].accept_prob, 1 / 6.0, 1e-6);
    if (result->decisions.size() < 2) continue;  // the first sibling was accepted
    ++seen_second;
    EXPECT_EQ(result->decisions[0].verdict, NodeVerdict::kRejected);
    EXPECT_NEAR(result->decisions[1].target_prob, 0.2, 1e-6);
    EXPECT_NEAR(result->decisions[1].draft_prob, 0.5, 1e-6);
    EXPECT_NEAR(result->decisions[1].accept_prob, 0.4, 1e-6);
    if (result->accepted_path.empty()) {
      // Both rejected: residual of {0, .2, .8} minus {0, .5, .5} is {0, 0, .3}: token 2.
      EXPECT_EQ(result->next_token, 2);
      EXPECT_FALSE(result->bonus);
    }
  }
  EXPECT_GT(seen_second, 30);
}

TEST(SampleRule, DeterministicDraftsVerifyAsPointMasses) {
  // A top-k child is accepted with probability p(token); after rejecting t0, p = {0, .6, .4}.
  DraftTree tree;
  ASSERT_TRUE(tree.add_child(kDraftRoot, 0, 0.9f).ok());
  ASSERT_TRUE(tree.add_child(kDraftRoot, 1, 0.05f).ok());
  const Target target({{0.5f, 0.3f, 0.2f}, one_hot(3, 0), one_hot(3, 0)});
  std::mt19937_64 rng(3);
  auto result = make_sample_rule()->accept(tree, target.probs(), rng);
  ASSERT_TRUE(result.ok());
  EXPECT_FLOAT_EQ(result->decisions[0].draft_prob, 1.0f);
  EXPECT_FLOAT_EQ(result->decisions[0].accept_prob, 0.5f);
  if (result->decisions.size() == 2) {
    EXPECT_NEAR(result->decisions[1].accept_prob, 0.6, 1e-6);
  }
}

TEST(SampleRule, SameSeedSameResult) {
  const auto q = dist({0.3f, 0.3f, 0.4f});
  DraftTree tree;
  ASSERT_TRUE(tree.add_child(kDraftRoot, 2, 0.4f, q, true).ok());
  ASSERT_TRUE(tree.add_child(0, 0, 0.3f, q, true).ok());
  const Target target({{0.5f, 0.3f, 0.2f}, {0.1f, 0.1f, 0.8f}, {0.3f, 0.3f, 0.4f}});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 a(seed), b(seed);
    auto ra = make_sample_rule()->accept(tree, target.probs(), a);
    auto rb = make_sample_rule()->accept(tree, target.probs(), b);
    EXPECT_EQ(ra->emitted_tokens(tree), rb->emitted_tokens(tree));
  }
}

}  // namespace
}  // namespace specula

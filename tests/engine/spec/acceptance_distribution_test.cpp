// Lossless speculative sampling must emit tokens distributed exactly as the target would sample
// them. These tests run whole speculative rounds on a small synthetic model pair (6 tokens, a
// Markov target p(.|last) and a different Markov draft q(.|last) whose support leaves out one
// token) 1e5 times, and compare by chi-square the first emitted token, and the first two jointly,
// against the target's own distribution. Deliberately wrong rules must fail the same check, which
// shows the check can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "engine/spec/acceptance.h"
#include "engine/spec/draft_tree.h"
#include "engine/spec/sampling_filters.h"
#include "tests/engine/spec/chi_square.h"

namespace specula {
namespace {

using testing_support::chi_square;
using testing_support::chi_square_survival;
using testing_support::ChiSquareResult;

TEST(ChiSquareSurvival, MatchesTabulatedValues) {
  EXPECT_NEAR(chi_square_survival(3.841458820694124, 1), 0.05, 1e-9);
  EXPECT_NEAR(chi_square_survival(18.307038053275146, 10), 0.05, 1e-9);
  EXPECT_NEAR(chi_square_survival(49.80184956820188, 35), 0.05, 1e-9);
  EXPECT_NEAR(chi_square_survival(2.0, 2), std::exp(-1.0), 1e-12);  // dof 2: exp(-x / 2)
  EXPECT_NEAR(chi_square_survival(6.6348966010212145, 1), 0.01, 1e-9);
  EXPECT_NEAR(chi_square_survival(4.0, 5), 0.5494159513527802, 1e-9);       // series branch
  EXPECT_NEAR(chi_square_survival(100.0, 60), 0.00091682886145608, 1e-12);  // continued fraction, tail
  EXPECT_EQ(chi_square_survival(0.0, 3), 1.0);
}

// ---- The synthetic model pair -----------------------------------------------------------------

constexpr int kVocab = 6;
constexpr int32_t kStartToken = 0;

// Target p(next | last). Zeros at (1 -> 4) and (3 -> 2), where the draft does propose them.
const std::vector<std::vector<float>> kTarget = {
    {0.05f, 0.30f, 0.25f, 0.10f, 0.10f, 0.20f}, {0.40f, 0.05f, 0.15f, 0.20f, 0.00f, 0.20f},
    {0.10f, 0.10f, 0.10f, 0.30f, 0.30f, 0.10f}, {0.25f, 0.25f, 0.00f, 0.25f, 0.15f, 0.10f},
    {0.15f, 0.35f, 0.15f, 0.05f, 0.10f, 0.20f}, {0.20f, 0.20f, 0.20f, 0.20f, 0.10f, 0.10f},
};
// Draft q(next | last) over a restricted support of 5 tokens: token 5 is never drafted, so it
// can only come from a residual or a bonus.
const std::vector<DraftDistribution> kDraft = {
    {0.30f, 0.10f, 0.40f, 0.10f, 0.10f}, {0.10f, 0.30f, 0.20f, 0.20f, 0.20f}, {0.40f, 0.05f, 0.05f, 0.25f, 0.25f},
    {0.20f, 0.20f, 0.30f, 0.10f, 0.20f}, {0.05f, 0.40f, 0.05f, 0.30f, 0.20f}, {0.25f, 0.25f, 0.20f, 0.15f, 0.15f},
};

struct Histograms {
  std::vector<long> first = std::vector<long>(kVocab, 0);
  std::vector<long> pair = std::vector<long>(static_cast<size_t>(kVocab) * kVocab, 0);
  long n = 0;
};

// Speculative rounds from kStartToken until at least two tokens are out, `trials` times.
Histograms run_rounds(const AcceptanceRule& rule, const TreeShape& shape, DraftChoice choice, long trials,
                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  Histograms h;
  std::vector<float> rows;
  for (long trial = 0; trial < trials; ++trial) {
    std::vector<int32_t> out;
    int32_t last = kStartToken;
    while (out.size() < 2) {
      const DraftDistributionFn draft = [last](std::span<const int32_t> prefix) -> Expected<DraftDistribution> {
        return kDraft[static_cast<size_t>(prefix.empty() ? last : prefix.back())];
      };
      auto tree = build_draft_tree(shape, draft, choice, &rng);
      EXPECT_TRUE(tree.ok()) << tree.error().message;
      if (!tree.ok()) return h;
      rows.assign(kTarget[static_cast<size_t>(last)].begin(), kTarget[static_cast<size_t>(last)].end());
      for (const DraftNode& node : tree->nodes()) {
        const auto& after = kTarget[static_cast<size_t>(node.token)];
        rows.insert(rows.end(), after.begin(), after.end());
      }
      auto result = rule.accept(*tree, TargetProbs{rows, kVocab}, rng);
      EXPECT_TRUE(result.ok()) << result.error().message;
      if (!result.ok()) return h;
      for (int32_t t : result->emitted_tokens(*tree)) out.push_back(t);
      last = out.back();
    }
    ++h.first[static_cast<size_t>(out[0])];
    const int cell = out[0] * kVocab + out[1];
    ++h.pair[static_cast<size_t>(cell)];
  }
  h.n = trials;
  return h;
}

struct Verdict {
  ChiSquareResult first, pair;
};

Verdict check_against_target(const AcceptanceRule& rule, const std::string& shape_spec, DraftChoice choice,
                             uint64_t seed, long trials = 100000) {
  auto shape = parse_tree_shape(shape_spec);
  EXPECT_TRUE(shape.ok());
  const Histograms h = run_rounds(rule, *shape, choice, trials, seed);
  std::vector<double> first(kTarget[kStartToken].begin(), kTarget[kStartToken].end());
  std::vector<double> pair(static_cast<size_t>(kVocab) * kVocab);
  for (int a = 0; a < kVocab; ++a) {
    for (int b = 0; b < kVocab; ++b) {
      const int cell = a * kVocab + b;
      pair[static_cast<size_t>(cell)] = static_cast<double>(kTarget[kStartToken][static_cast<size_t>(a)]) *
                                        kTarget[static_cast<size_t>(a)][static_cast<size_t>(b)];
    }
  }
  return {chi_square(h.first, first, h.n), chi_square(h.pair, pair, h.n)};
}

void expect_matches_target(const AcceptanceRule& rule, const std::string& shape, DraftChoice choice, uint64_t seed) {
  const Verdict v = check_against_target(rule, shape, choice, seed);
  const std::string what = rule.name() + " on " + shape + (choice == DraftChoice::kSample ? " (sampled)" : " (top-k)");
  EXPECT_EQ(v.first.impossible + v.pair.impossible, 0) << what << ": emitted a token the target never would";
  EXPECT_GT(v.first.p_value, 0.01) << what << ": first token chi2 " << v.first.stat << " dof " << v.first.dof;
  EXPECT_GT(v.pair.p_value, 0.01) << what << ": first two tokens chi2 " << v.pair.stat << " dof " << v.pair.dof;
  EXPECT_EQ(v.first.dof, 5);
  EXPECT_EQ(v.pair.dof, 33);  // 36 cells, 2 of them impossible
  std::printf("  %-40s first: chi2 %6.2f p %.3f | pair: chi2 %6.2f p %.3f\n", what.c_str(), v.first.stat,
              v.first.p_value, v.pair.stat, v.pair.p_value);
}

TEST(SpeculativeSamplingDistribution, SampledChainsK1To3) {
  const auto rule = make_sample_rule();
  expect_matches_target(*rule, "chain:1", DraftChoice::kSample, 101);
  expect_matches_target(*rule, "chain:2", DraftChoice::kSample, 102);
  expect_matches_target(*rule, "chain:3", DraftChoice::kSample, 103);
}

TEST(SpeculativeSamplingDistribution, SampledTreesWithSiblingsAndBranching) {
  const auto rule = make_sample_rule();
  expect_matches_target(*rule, "static:2,2", DraftChoice::kSample, 201);
  expect_matches_target(*rule, "static:3,2", DraftChoice::kSample, 202);
  expect_matches_target(*rule, "static:3,3,1", DraftChoice::kSample, 203);
}

TEST(SpeculativeSamplingDistribution, TopKTreesVerifiedAsPointMasses) {
  const auto rule = make_sample_rule();
  expect_matches_target(*rule, "chain:2", DraftChoice::kTopK, 301);
  expect_matches_target(*rule, "static:3,2", DraftChoice::kTopK, 302);
  expect_matches_target(*rule, "dynamic:3,2,6", DraftChoice::kTopK, 303);
}

// ---- Rules that must fail -------------------------------------------------------------------

// Accepts the first path of the tree whatever the target says.
class AcceptAlwaysRule final : public AcceptanceRule {
 public:
  std::string name() const override { return "wrong:accept-always"; }
  std::string description() const override { return name(); }
  bool lossless() const override { return false; }
  Expected<AcceptanceResult> accept(const DraftTree& tree, const TargetProbs& target,
                                    std::mt19937_64& rng) const override {
    AcceptanceResult r;
    DraftNodeId at = kDraftRoot;
    while (!tree.is_leaf(at)) r.accepted_path.push_back(at = tree.children(at)[0]);
    r.next_token = sample_index(target.after(at), rng);
    r.bonus = true;
    return r;
  }
};

// Speculative sampling with the two classic mistakes available: resampling from p instead of
// the residual after a rejection, and testing later siblings against the draft distribution
// without removing the rejected tokens.
class FlawedSampleRule final : public AcceptanceRule {
 public:
  FlawedSampleRule(bool residual, bool renormalise_siblings)
      : residual_(residual), renormalise_(renormalise_siblings) {}
  std::string name() const override {
    return residual_ ? "wrong:siblings-not-renormalised" : "wrong:resample-from-target";
  }
  std::string description() const override { return name(); }
  bool lossless() const override { return false; }
  Expected<AcceptanceResult> accept(const DraftTree& tree, const TargetProbs& target,
                                    std::mt19937_64& rng) const override {
    AcceptanceResult r;
    for (DraftNodeId at = kDraftRoot;;) {
      std::vector<double> p(target.after(at).begin(), target.after(at).end());
      if (tree.is_leaf(at)) {
        r.next_token = sample_index(std::span<const double>(p), rng);
        return r;
      }
      std::vector<int32_t> rejected;
      DraftNodeId taken = kDraftRoot;
      for (DraftNodeId c : tree.children(at)) {
        const DraftDistribution& dist = *tree.node(c).draft_dist;
        std::vector<double> q(p.size(), 0.0);
        double total = 0;
        for (size_t i = 0; i < dist.size(); ++i) total += q[i] = dist[i];
        if (renormalise_) {
          for (int32_t t : rejected) {
            total -= q[static_cast<size_t>(t)];
            q[static_cast<size_t>(t)] = 0;
          }
        }
        for (double& v : q) v /= total;
        const size_t x = static_cast<size_t>(tree.node(c).token);
        if (uniform_unit(rng) * q[x] < p[x]) {
          taken = c;
          break;
        }
        if (residual_) {
          double mass = 0;
          for (size_t i = 0; i < p.size(); ++i) mass += p[i] = std::max(0.0, p[i] - q[i]);
          for (double& v : p) v /= mass;
        }
        rejected.push_back(tree.node(c).token);
      }
      if (taken == kDraftRoot) {
        r.next_token = sample_index(std::span<const double>(p), rng);
        return r;
      }
      r.accepted_path.push_back(taken);
      at = taken;
    }
  }

 private:
  bool residual_, renormalise_;
};

TEST(SpeculativeSamplingDistribution, WrongRulesFailTheSameCheck) {
  const AcceptAlwaysRule always;
  const Verdict a = check_against_target(always, "chain:2", DraftChoice::kSample, 401);
  EXPECT_LT(a.first.p_value, 1e-6) << "accept-always passed: chi2 " << a.first.stat;
  EXPECT_LT(a.pair.p_value, 1e-6);

  const FlawedSampleRule no_residual(/*residual=*/false, /*renormalise_siblings=*/true);
  const Verdict b = check_against_target(no_residual, "chain:1", DraftChoice::kSample, 402);
  EXPECT_LT(b.first.p_value, 1e-6) << "resample-from-target passed: chi2 " << b.first.stat;

  // The subtle one: only trees with several sampled siblings can expose it.
  const FlawedSampleRule no_renormalise(/*residual=*/true, /*renormalise_siblings=*/false);
  const Verdict c = check_against_target(no_renormalise, "static:3,2", DraftChoice::kSample, 403);
  EXPECT_LT(std::min(c.first.p_value, c.pair.p_value), 1e-6)
      << "siblings-not-renormalised passed: chi2 " << c.first.stat << " / " << c.pair.stat;
  // ...and the same flawed rule is harmless on a chain, where there are no siblings.
  const Verdict d = check_against_target(no_renormalise, "chain:2", DraftChoice::kSample, 404);
  EXPECT_GT(d.first.p_value, 0.01);
  EXPECT_GT(d.pair.p_value, 0.01);
  for (const auto& [label, v] : {std::pair<const char*, const Verdict&>{"accept-always", a},
                                 {"resample-from-target", b},
                                 {"siblings-not-renormalised", c}}) {
    std::printf("  %-40s first: chi2 %9.1f (%ld impossible) | pair: chi2 %9.1f (%ld impossible)\n", label, v.first.stat,
                v.first.impossible, v.pair.stat, v.pair.impossible);
  }
}

}  // namespace
}  // namespace specula

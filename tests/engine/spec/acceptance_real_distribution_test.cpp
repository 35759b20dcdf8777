// Speculative sampling on REAL next-token distributions: the default model's own, restricted to
// the target's 32 most likely tokens after a prompt (issue: "real next-token distributions
// restricted to the top 32"). The target p is the model's distribution after the prompt (and
// after the prompt plus each candidate); the draft q is the same model's distribution after only
// the prompt's last few tokens, a different but real distribution. 1e5 rounds per tree shape;
// the first emitted token and the first two jointly must follow the target (chi-square p > 0.01,
// cells with under 5 expected draws pooled).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"
#include "engine/spec/acceptance.h"
#include "engine/spec/draft_tree.h"
#include "engine/spec/sampling_filters.h"
#include "tests/engine/spec/chi_square.h"

namespace specula {
namespace {

constexpr int kTop = 32;

// Next-token probabilities over `support` (renormalised softmax of the logits there), after
// `context` and after `context` + each support token.
struct MarkovTable {
  std::vector<float> root;                  // (kTop)
  std::vector<std::vector<float>> after;    // (kTop, kTop): after[a] = p(. | context, support[a])
};

std::vector<float> restricted_softmax(std::span<const float> logits, const std::vector<int32_t>& support) {
  float max_logit = -INFINITY;
  for (int32_t id : support) max_logit = std::max(max_logit, logits[static_cast<size_t>(id)]);
  std::vector<float> p(support.size());
  double total = 0;
  for (size_t i = 0; i < support.size(); ++i) total += p[i] = std::exp(logits[static_cast<size_t>(support[i])] - max_logit);
  for (float& x : p) x = static_cast<float>(x / total);
  return p;
}

MarkovTable table_after(CpuTransformer& tf, const std::vector<int32_t>& context, const std::vector<int32_t>& support,
                        std::vector<int32_t>* top_out) {
  const int64_t vocab = tf.config().vocab_size;
  auto kv = tf.make_kv_cache(16, static_cast<int64_t>(context.size()) + 4);
  EXPECT_TRUE(kv.ok());
  std::vector<int32_t> positions(context.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> logits(static_cast<size_t>(vocab));
  EXPECT_TRUE(tf.forward(context, positions, nullptr, *kv, logits, LogitRows::Last).ok());
  kv->commit_all();
  std::vector<int32_t> top = support;
  if (top.empty()) {  // the target picks the support: its 32 most likely next tokens
    top.resize(static_cast<size_t>(vocab));
    std::iota(top.begin(), top.end(), 0);
    std::partial_sort(top.begin(), top.begin() + kTop, top.end(),
                      [&](int32_t a, int32_t b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
    top.resize(kTop);
    *top_out = top;
  }
  MarkovTable t;
  t.root = restricted_softmax(logits, top);
  for (int32_t token : top) {
    const int32_t pos = static_cast<int32_t>(context.size());
    EXPECT_TRUE(tf.forward(std::span(&token, 1), std::span(&pos, 1), nullptr, *kv, logits, LogitRows::Last).ok());
    kv->rollback();
    t.after.push_back(restricted_softmax(logits, top));
  }
  return t;
}

// Chi-square over cells, pooling every cell expected to get fewer than 5 draws into one.
testing_support::ChiSquareResult pooled_chi_square(const std::vector<long>& observed, const std::vector<double>& p, long n) {
  std::vector<long> obs;
  std::vector<double> exp;
  long pooled_obs = 0;
  double pooled_p = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] * static_cast<double>(n) >= 5) {
      obs.push_back(observed[i]);
      exp.push_back(p[i]);
    } else {
      pooled_obs += observed[i];
      pooled_p += p[i];
    }
  }
  if (pooled_p > 0 || pooled_obs > 0) {
    obs.push_back(pooled_obs);
    exp.push_back(pooled_p);
  }
  return testing_support::chi_square(obs, exp, n);
}

class RealDistributions : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto path = resolve_model_path("default");
    if (!std::filesystem::exists(path)) return;
    auto model = load_model(path);
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = new Model(std::move(*model));
    CpuTransformer tf(*model_);
    const auto prompt = model_->tokenizer.encode("Once upon a time, in a small village by the sea, there lived a");
    std::vector<int32_t> top;
    target_ = table_after(tf, prompt, {}, &top);
    // The draft sees only the last 3 prompt tokens: a real distribution, and a different one.
    const std::vector<int32_t> short_context(prompt.end() - 3, prompt.end());
    draft_ = table_after(tf, short_context, top, nullptr);
  }
  static void TearDownTestSuite() { delete model_; }
  void SetUp() override {
    if (model_ == nullptr) GTEST_SKIP() << "skipped: default model not downloaded";
  }

  static void expect_preserved(const std::string& shape_spec, DraftChoice choice, uint64_t seed) {
    auto shape = parse_tree_shape(shape_spec);
    ASSERT_TRUE(shape.ok());
    const auto rule = make_sample_rule();
    std::mt19937_64 rng(seed);
    const long trials = 100000;
    std::vector<long> first(kTop, 0), pair(static_cast<size_t>(kTop) * kTop, 0);
    std::vector<float> rows;
    for (long trial = 0; trial < trials; ++trial) {
      // Depth <= 2 trees: q depends on the prefix's last token, exactly as the tables hold it.
      const DraftDistributionFn draft = [](std::span<const int32_t> prefix) -> Expected<DraftDistribution> {
        return prefix.empty() ? draft_.root : draft_.after[static_cast<size_t>(prefix.back())];
      };
      auto tree = build_draft_tree(*shape, draft, choice, &rng);
      ASSERT_TRUE(tree.ok()) << tree.error().message;
      rows.assign(target_.root.begin(), target_.root.end());
      for (const DraftNode& node : tree->nodes()) {
        // Rows after depth-2 nodes only feed the bonus (the third token), which the check ignores.
        const auto& after = target_.after[static_cast<size_t>(node.token)];
        rows.insert(rows.end(), after.begin(), after.end());
      }
      auto result = rule->accept(*tree, TargetProbs{rows, kTop}, rng);
      ASSERT_TRUE(result.ok()) << result.error().message;
      auto out = result->emitted_tokens(*tree);
      if (out.size() < 2) {  // one token this round: the next comes from p(. | it)
        out.push_back(sample_index(std::span<const float>(target_.after[static_cast<size_t>(out[0])]), rng));
      }
      ++first[static_cast<size_t>(out[0])];
      ++pair[static_cast<size_t>(out[0] * kTop + out[1])];
    }
    std::vector<double> p_first(target_.root.begin(), target_.root.end());
    std::vector<double> p_pair(static_cast<size_t>(kTop) * kTop);
    for (int a = 0; a < kTop; ++a)
      for (int b = 0; b < kTop; ++b)
        p_pair[static_cast<size_t>(a * kTop + b)] = static_cast<double>(target_.root[static_cast<size_t>(a)]) *
                                                      target_.after[static_cast<size_t>(a)][static_cast<size_t>(b)];
    const auto f = pooled_chi_square(first, p_first, trials);
    const auto j = pooled_chi_square(pair, p_pair, trials);
    EXPECT_GT(f.p_value, 0.01) << shape_spec << " first token: chi2 " << f.stat << " dof " << f.dof;
    EXPECT_GT(j.p_value, 0.01) << shape_spec << " first two tokens: chi2 " << j.stat << " dof " << j.dof;
    EXPECT_GE(f.dof, 10);  // the real distributions spread over many of the 32 tokens
    std::printf("  %-14s first: chi2 %7.2f dof %3d p %.3f | pair: chi2 %7.2f dof %3d p %.3f\n", shape_spec.c_str(),
                f.stat, f.dof, f.p_value, j.stat, j.dof, j.p_value);
  }

  static inline Model* model_ = nullptr;
  static inline MarkovTable target_, draft_;
};

TEST_F(RealDistributions, DraftAndTargetDiffer) {
  double total_variation = 0;
  for (int i = 0; i < kTop; ++i) total_variation += std::fabs(target_.root[i] - draft_.root[i]) / 2;
  EXPECT_GT(total_variation, 0.05) << "the test needs a draft that disagrees with the target";
}

TEST_F(RealDistributions, SampledChainsPreserveTheTarget) {
  expect_preserved("chain:1", DraftChoice::kSample, 11);
  expect_preserved("chain:2", DraftChoice::kSample, 12);
}

TEST_F(RealDistributions, SampledAndTopKTreesPreserveTheTarget) {
  expect_preserved("static:3,2", DraftChoice::kSample, 21);
  expect_preserved("static:4,2", DraftChoice::kTopK, 22);
}

}  // namespace
}  // namespace specula

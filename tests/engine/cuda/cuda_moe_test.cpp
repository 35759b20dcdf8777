// MoE models on the CUDA backend (kernels/cuda/moe.h, kernels/cuda/qkv_extras.h wired into
// CudaSession): the fixtures of tools/reference/make_moe_fixtures.py (Qwen2-MoE, Qwen3-MoE,
// Mixtral and OLMoE, from safetensors and from GGUF, plus a Q8_0 Qwen3-MoE GGUF) against
// transformers' logits and against the CPU over the same bf16 weights (Precision::Bf16Storage):
// every position's logits, every token's routing, decode steps through the KV cache (the graphed
// path), the expert-skip rule with calibrated thresholds, and the speculative loop's greedy
// output against plain GPU greedy decoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/backend/cuda_backend.h"
#include "engine/model/cpu_transformer.h"
#include "engine/model/moe.h"
#include "engine/model/moe_calibration.h"
#include "engine/sparse/sparse_config.h"
#include "engine/spec/speculative.h"
#include "tests/engine/cuda/cuda_test_support.h"
#include "tests/engine/model/moe_reference.h"

namespace specula {
namespace {

using testing::rel_l2;

using testing::cpu_prefill;
using testing::kMoeDir;
using testing::positions_for;
using RefCase = testing::MoeRefCase;

std::vector<RefCase> load_reference(const std::string& stem) { return testing::load_moe_reference(stem); }

std::vector<float> gpu_prefill(CudaBackend& b, const std::vector<int32_t>& tokens, const ForwardContext* context) {
  auto session = b.start(16, 64);
  EXPECT_TRUE(session) << (session ? "" : session.error().message);
  std::vector<float> logits(tokens.size() * static_cast<size_t>(b.config().vocab_size));
  if (!session) return logits;
  const Status s = (*session)->forward(tokens, positions_for(tokens.size()), nullptr, logits, LogitRows::All, context);
  EXPECT_TRUE(s) << (s ? "" : s.error().message);
  return logits;
}

bool skip_without_gpu() {
  if (cuda_gpu_available()) return false;
  std::puts("skipped: no GPU");
  return true;
}

struct Layout {
  std::string path;       // under tests/data/moe
  std::string reference;  // reference stem
};
void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.path; }

class CudaMoeLayoutTest : public ::testing::TestWithParam<Layout> {};

TEST_P(CudaMoeLayoutTest, LogitsRoutingAndDecodeMatchCpuAndTransformers) {
  if (skip_without_gpu()) GTEST_SKIP() << "skipped: no GPU";
  const Layout& layout = GetParam();
  auto model = load_model(kMoeDir / layout.path);
  ASSERT_TRUE(model) << model.error().message;
  ASSERT_TRUE(model->config.is_moe());
  ASSERT_TRUE(cuda_backend_supports(model->config)) << cuda_backend_unsupported(model->config);
  auto gpu = make_cuda_backend(*model, CudaBackendOptions{});
  ASSERT_TRUE(gpu) << gpu.error().message;
  CpuTransformer cpu(*model, {.threads = 2, .precision = Precision::Bf16Storage});
  const int64_t V = model->config.vocab_size, k = model->config.n_experts_used;
  const auto cases = load_reference(layout.reference);
  ASSERT_EQ(cases.size(), 3u);
  double worst_cpu = 0, worst_hf = 0;
  int64_t routed = 0, differs_from_hf = 0;
  for (const RefCase& c : cases) {
    MoeForwardStats gpu_stats, cpu_stats;
    SparseStats sparse_stats;
    const ForwardContext gpu_context{nullptr, -1, nullptr, {}, &sparse_stats, &gpu_stats};
    const ForwardContext cpu_context{nullptr, -1, nullptr, {}, nullptr, &cpu_stats};
    const auto logits = gpu_prefill(**gpu, c.tokens, &gpu_context);
    const auto want = cpu_prefill(cpu, c.tokens, &cpu_context);
    const double err_cpu = rel_l2(logits, want), err_hf = rel_l2(logits, c.logits);
    worst_cpu = std::max(worst_cpu, err_cpu);
    worst_hf = std::max(worst_hf, err_hf);
    // The bound against the CPU over the same weights. Transformers computes over the F16
    // weights, which bf16 rounds (3 fewer mantissa bits): 5-9e-3 relative L2 where every routing
    // decision stays transformers', 3.6e-2 on Mixtral, where the rounding moves one (layer,
    // token) of 30 to another expert (first H200 run; the CPU over the same bf16 weights does the
    // same, so it is the weights' rounding, not the kernels).
    EXPECT_LE(err_cpu, 1e-2) << layout.path << " tokens " << c.tokens.size();
    EXPECT_LE(err_hf, 5e-2) << layout.path << " tokens " << c.tokens.size();

    // Routing: the GPU's experts are the CPU's over the same weights, in order, with the same
    // weights; its counts reach the sparse statistics.
    const auto T = static_cast<int64_t>(c.tokens.size());
    ASSERT_EQ(gpu_stats.layers.size(), cpu_stats.layers.size());
    EXPECT_EQ(sparse_stats.moe_routed, T * k * model->config.n_layers);
    EXPECT_EQ(sparse_stats.moe_skipped, 0);
    for (size_t l = 0; l < gpu_stats.layers.size(); ++l) {
      const MoeLayerStats& g = gpu_stats.layers[l];
      const MoeLayerStats& w = cpu_stats.layers[l];
      EXPECT_EQ(g.layer, static_cast<int32_t>(l));
      EXPECT_EQ(g.n_experts, model->config.n_experts);
      ASSERT_EQ(g.tokens.size(), w.tokens.size());
      for (size_t t = 0; t < g.tokens.size(); ++t) {
        EXPECT_EQ(g.tokens[t].experts, w.tokens[t].experts) << layout.path << " layer " << l << " token " << t;
        ASSERT_EQ(g.tokens[t].weights.size(), static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i) EXPECT_NEAR(g.tokens[t].weights[i], w.tokens[t].weights[i], 1e-4);
        EXPECT_EQ(g.tokens[t].skipped, 0);
        ++routed;
        differs_from_hf += g.tokens[t].experts != c.experts[l][t];
      }
    }
  }
  std::printf(
      "%s: worst relative L2 vs CPU (bf16 weights) %.2e, vs transformers %.2e; routing differs from "
      "transformers' for %lld of %lld (layer, token) pairs\n",
      layout.path.c_str(), worst_cpu, worst_hf, static_cast<long long>(differs_from_hf),
      static_cast<long long>(routed));

  // Decoding one token at a time (the graphed decode step) gives the prefill's rows.
  const RefCase& c = cases[0];
  const auto all = gpu_prefill(**gpu, c.tokens, nullptr);
  auto session = (*gpu)->start(16, 64);
  ASSERT_TRUE(session) << session.error().message;
  std::vector<float> row(static_cast<size_t>(V));
  std::vector<std::vector<float>> decoded;
  for (size_t t = 0; t < c.tokens.size(); ++t) {
    const std::vector<int32_t> one{c.tokens[t]}, pos{static_cast<int32_t>(t)};
    ASSERT_TRUE((*session)->forward(one, pos, nullptr, row, LogitRows::Last));
    (*session)->commit_all();
    const std::vector<float> ref(all.begin() + static_cast<ptrdiff_t>(t * V),
                                 all.begin() + static_cast<ptrdiff_t>((t + 1) * V));
    EXPECT_LE(rel_l2(row, ref), 1e-4) << layout.path << " decode step " << t;
    decoded.push_back(row);
  }
  session->reset();

  // The same decode steps again, in fresh sessions (replaying the graphs captured above): the
  // same bits. (The fixtures are too narrow to reach the one-row kernel whose early loads made
  // the 2048-wide MoE shapes' decoding differ run to run; tests/kernels/cuda/pdl_order_test.cu
  // tests that kernel.)
  for (int run = 1; run <= 3; ++run) {
    auto again = (*gpu)->start(16, 64);
    ASSERT_TRUE(again) << again.error().message;
    for (size_t t = 0; t < c.tokens.size(); ++t) {
      const std::vector<int32_t> one{c.tokens[t]}, pos{static_cast<int32_t>(t)};
      ASSERT_TRUE((*again)->forward(one, pos, nullptr, row, LogitRows::Last));
      (*again)->commit_all();
      ASSERT_EQ(row, decoded[t]) << layout.path << " run " << run << " decode step " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaMoeLayoutTest,
                         ::testing::Values(Layout{"qwen2moe", "qwen2moe"}, Layout{"qwen2moe.gguf", "qwen2moe"},
                                           Layout{"qwen3moe", "qwen3moe"}, Layout{"qwen3moe.gguf", "qwen3moe"},
                                           Layout{"mixtral", "mixtral"}, Layout{"mixtral.gguf", "mixtral"},
                                           Layout{"olmoe", "olmoe"}, Layout{"olmoe.gguf", "olmoe"},
                                           Layout{"qwen3moe-q8_0.gguf", "qwen3moe-q8_0"}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           std::string name = info.param.path;
                           std::replace_if(
                               name.begin(), name.end(),
                               [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
                           return name;
                         });

// The skip rule on the GPU takes the CPU's decisions: the same skipped count for every (layer,
// token), the same experts run, close logits, for each budget; budget 0 equals no skipping.
TEST(CudaMoeSkipping, CalibratedSkipsEqualTheCpusForEveryBudget) {
  if (skip_without_gpu()) GTEST_SKIP() << "skipped: no GPU";
  auto model = load_model(kMoeDir / "qwen3moe.gguf");  // 8 experts, top-4: skips of 1..3
  ASSERT_TRUE(model) << model.error().message;
  auto gpu = make_cuda_backend(*model, CudaBackendOptions{});
  ASSERT_TRUE(gpu) << gpu.error().message;
  CpuTransformer cpu(*model, {.threads = 2, .precision = Precision::Bf16Storage});
  const auto cases = load_reference("qwen3moe");
  std::vector<std::vector<int32_t>> sequences;
  for (const auto& c : cases) sequences.push_back(c.tokens);
  auto thresholds = calibrate_moe(cpu, sequences);
  ASSERT_TRUE(thresholds) << thresholds.error().message;

  SparseConfig sparse = *sparse_preset("smoe");
  sparse.moe_thresholds = thresholds->thresholds;
  const auto& tokens = cases[0].tokens;
  sparse.moe_skip_budget = 0;
  const ForwardContext off{nullptr, 0, &sparse, {}, nullptr, nullptr};
  EXPECT_EQ(gpu_prefill(**gpu, tokens, &off), gpu_prefill(**gpu, tokens, nullptr));
  for (int budget : {1, 2, 3}) {
    sparse.moe_skip_budget = budget;
    MoeForwardStats gpu_stats, cpu_stats;
    SparseStats gpu_sparse, cpu_sparse;
    const ForwardContext gpu_context{nullptr, 3, &sparse, {}, &gpu_sparse, &gpu_stats};
    const ForwardContext cpu_context{nullptr, 3, &sparse, {}, &cpu_sparse, &cpu_stats};
    const auto logits = gpu_prefill(**gpu, tokens, &gpu_context);
    const auto want = cpu_prefill(cpu, tokens, &cpu_context);
    EXPECT_LE(rel_l2(logits, want), 1e-2) << "budget " << budget;
    ASSERT_EQ(gpu_stats.layers.size(), cpu_stats.layers.size());
    // The thresholds are medians of these very tokens' ratios, so some token's r_s is a threshold
    // itself (and every sequence's first token is the same): there the strict r_s < tau is
    // decided by the last bits of two summation orders. Those (layer, token) pairs are counted,
    // not compared; every other decision must be the CPU's.
    int64_t compared = 0, at_threshold = 0;
    for (size_t l = 0; l < gpu_stats.layers.size(); ++l) {
      const auto& tau = thresholds->thresholds[l];
      for (size_t t = 0; t < tokens.size(); ++t) {
        const MoeTokenRouting& want_r = cpu_stats.layers[l].tokens[t];
        bool near = false;
        for (int s = 1; s <= budget && s < static_cast<int>(want_r.weights.size()); ++s) {
          near |= std::fabs(skip_ratio(want_r.weights, s) / tau[static_cast<size_t>(s - 1)] - 1.0) < 1e-4;
        }
        if (near) {
          ++at_threshold;
          continue;
        }
        ++compared;
        EXPECT_EQ(gpu_stats.layers[l].tokens[t].skipped, want_r.skipped)
            << "budget " << budget << " layer " << l << " token " << t;
        EXPECT_EQ(gpu_stats.layers[l].tokens[t].experts, want_r.experts);
      }
    }
    EXPECT_LE(at_threshold * 4, compared) << "budget " << budget << ": too few decisions away from a threshold";
    EXPECT_GT(gpu_sparse.moe_skipped, 0) << "budget " << budget << ": the thresholds skipped nothing";
    std::printf(
        "budget %d: %lld of %lld routed pairs skipped on the GPU (CPU %lld); %lld (layer, token) decisions "
        "equal the CPU's, %lld at a threshold not compared\n",
        budget, static_cast<long long>(gpu_sparse.moe_skipped), static_cast<long long>(gpu_sparse.moe_routed),
        static_cast<long long>(cpu_sparse.moe_skipped), static_cast<long long>(compared),
        static_cast<long long>(at_threshold));
  }
}

// The fidelity invariant on an MoE model: greedy speculation on the GPU emits plain GPU greedy
// decoding's tokens, for the ngram and layerskip drafters, a chain and a dynamic tree.
TEST(CudaMoeSpeculative, GreedyEqualsPlainGpuGreedy) {
  if (skip_without_gpu()) GTEST_SKIP() << "skipped: no GPU";
  auto target = load_model(kMoeDir / "mixtral");
  ASSERT_TRUE(target) << target.error().message;
  auto backend = make_cuda_backend(*target, CudaBackendOptions{});
  ASSERT_TRUE(backend) << backend.error().message;
  SpeculativeEngine engine(*target, std::move(*backend));
  ASSERT_EQ(engine.backend().name(), "cuda");
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : load_reference("mixtral")) prompts.push_back(c.tokens);
  prompts.push_back({5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6});  // repeats for the ngram drafter
  constexpr int kMaxTokens = 24;
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : prompts) {
    SpeculativeOptions o;
    o.max_tokens = kMaxTokens;
    o.stop_at_eos = false;
    auto r = engine.generate(p, nullptr, o, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message;
    expected.push_back(r->tokens);
  }
  std::vector<std::unique_ptr<Drafter>> drafters;
  drafters.push_back(make_ngram_drafter({2, 1, 0}));
  DrafterPlacement placement;
  placement.backend = "cpu";
  auto layerskip = make_layerskip_drafter(*target, "first:1", placement);
  ASSERT_TRUE(layerskip.ok()) << layerskip.error().message;
  drafters.push_back(std::move(*layerskip));
  for (const auto& drafter : drafters) {
    for (const char* tree : {"chain:4", "dynamic:4,3,10"}) {
      int rounds = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        SpeculativeOptions o;
        o.max_tokens = kMaxTokens;
        o.stop_at_eos = false;
        o.tree = *parse_tree_shape(tree);
        o.controller.enabled = false;
        auto r = engine.generate(prompts[i], drafter.get(), o, nullptr);
        ASSERT_TRUE(r.ok()) << r.error().message;
        EXPECT_EQ(r->tokens, expected[i]) << drafter->name() << " " << tree << " prompt " << i;
        rounds += r->metrics.speculative_rounds;
      }
      EXPECT_GT(rounds, 0) << drafter->name() << " " << tree << ": nothing was verified";
    }
  }
}

}  // namespace
}  // namespace specula

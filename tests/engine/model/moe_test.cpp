// MoE models against transformers (tools/reference/make_moe_fixtures.py: Qwen2-MoE, Qwen3-MoE,
// Mixtral and OLMoE, each from safetensors and from GGUF, plus a Q8_0 Qwen3-MoE GGUF), the
// expert-skip rule and its calibration, routing statistics, and refusals.
#include "engine/model/moe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "engine/model/moe_calibration.h"
#include "engine/sparse/sparse_config.h"
#include "tests/engine/formats/gguf_writer.h"
#include "tests/engine/model/cpu_transformer_goldens.h"
#include "tests/engine/model/moe_reference.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::relative_l2;

using testing::kMoeDir;
using testing::positions_for;
using RefCase = testing::MoeRefCase;

std::vector<RefCase> load_reference(const std::string& stem) { return testing::load_moe_reference(stem); }

std::vector<float> prefill(CpuTransformer& t, const std::vector<int32_t>& tokens,
                           const ForwardContext* context = nullptr) {
  return testing::cpu_prefill(t, tokens, context);
}

struct Layout {
  std::string path;       // under tests/data/moe
  std::string reference;  // reference stem
  std::string architecture;
};

void PrintTo(const Layout& layout, std::ostream* os) { *os << layout.path; }

class MoeLayoutTest : public ::testing::TestWithParam<Layout> {};

TEST_P(MoeLayoutTest, LogitsAndRoutingMatchTransformers) {
  const Layout& layout = GetParam();
  auto model = load_model(kMoeDir / layout.path);
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->config.architecture, layout.architecture);
  ASSERT_TRUE(model->config.is_moe());
  CpuTransformer transformer(*model);
  const int64_t V = model->config.vocab_size, k = model->config.n_experts_used;
  const auto cases = load_reference(layout.reference);
  ASSERT_EQ(cases.size(), 3u);
  double worst = 0;
  for (const RefCase& c : cases) {
    MoeForwardStats stats;
    const ForwardContext context{nullptr, -1, nullptr, {}, nullptr, &stats};
    const auto logits = prefill(transformer, c.tokens, &context);
    const double err = relative_l2(logits, c.logits);
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-3) << layout.path << " tokens " << c.tokens.size();

    // Routing: the same top-k experts in the same order, the same weights, and counts that add up.
    const auto T = static_cast<int64_t>(c.tokens.size());
    ASSERT_EQ(stats.layers.size(), c.experts.size());
    EXPECT_EQ(stats.routed(), T * k * model->config.n_layers);
    EXPECT_EQ(stats.skipped(), 0);
    for (size_t l = 0; l < stats.layers.size(); ++l) {
      const MoeLayerStats& layer = stats.layers[l];
      EXPECT_EQ(layer.layer, static_cast<int32_t>(l));
      EXPECT_EQ(layer.n_experts, model->config.n_experts);
      ASSERT_EQ(static_cast<int64_t>(layer.tokens.size()), T);
      for (int64_t t = 0; t < T; ++t) {
        const MoeTokenRouting& r = layer.tokens[static_cast<size_t>(t)];
        EXPECT_EQ(r.experts, c.experts[l][static_cast<size_t>(t)]) << layout.path << " layer " << l << " token " << t;
        ASSERT_EQ(r.weights.size(), static_cast<size_t>(k));
        for (int64_t i = 0; i < k; ++i) {
          EXPECT_NEAR(r.weights[static_cast<size_t>(i)], c.weights[l][static_cast<size_t>(t)][static_cast<size_t>(i)],
                      1e-5);
        }
      }
      EXPECT_TRUE(layer.experts_skipped().empty());
    }
  }
  std::printf("%s: worst relative L2 vs transformers %.2e\n", layout.path.c_str(), worst);

  // Decoding one token at a time through the KV cache gives the same rows.
  const RefCase& c = cases[0];
  auto kv = transformer.make_kv_cache(16, 64);
  ASSERT_TRUE(kv);
  std::vector<float> row(static_cast<size_t>(V));
  for (size_t t = 0; t < c.tokens.size(); ++t) {
    const std::vector<int32_t> one{c.tokens[t]}, pos{static_cast<int32_t>(t)};
    ASSERT_TRUE(transformer.forward(one, pos, nullptr, *kv, row, LogitRows::Last));
    kv->commit_all();
    EXPECT_LE(relative_l2(row, std::span(c.logits).subspan(t * static_cast<size_t>(V), static_cast<size_t>(V))), 1e-3)
        << layout.path << " decode step " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MoeLayoutTest,
    ::testing::Values(Layout{"qwen2moe", "qwen2moe", "qwen2_moe"}, Layout{"qwen2moe.gguf", "qwen2moe", "qwen2_moe"},
                      Layout{"qwen3moe", "qwen3moe", "qwen3_moe"}, Layout{"qwen3moe.gguf", "qwen3moe", "qwen3_moe"},
                      Layout{"mixtral", "mixtral", "mixtral"}, Layout{"mixtral.gguf", "mixtral", "mixtral"},
                      Layout{"olmoe", "olmoe", "olmoe"}, Layout{"olmoe.gguf", "olmoe", "olmoe"},
                      Layout{"qwen3moe-q8_0.gguf", "qwen3moe-q8_0", "qwen3_moe"}),
    [](const ::testing::TestParamInfo<Layout>& info) {
      std::string name = info.param.path;
      std::replace_if(
          name.begin(), name.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
      return name;
    });

// ---- routing and the skip rule --------------------------------------------------------------

TEST(MoeRouting, SoftmaxTopKAndRenormalization) {
  const std::vector<float> logits{0.0f, 2.0f, 1.0f, 2.0f};  // experts 1 and 3 tie: lower id first
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  route_token(logits, false, ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 2}));
  const double z = 1 + 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.0) / z, 1e-6);
  route_token(logits, true, ids, w);
  const double kept = 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / kept, 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

TEST(MoeSkipRule, RatioIsSkippedMassOverKeptMass) {
  const std::vector<float> w{0.5f, 0.3f, 0.15f, 0.05f};
  EXPECT_NEAR(skip_ratio(w, 1), 0.05 / 0.95, 1e-6);
  EXPECT_NEAR(skip_ratio(w, 2), 0.20 / 0.80, 1e-6);
  EXPECT_NEAR(skip_ratio(w, 3), 0.50 / 0.50, 1e-6);
}

TEST(MoeSkipRule, PicksTheLargestValidSkipWithinBudget) {
  const std::vector<float> w{0.5f, 0.3f, 0.15f, 0.05f};  // r = 0.0526, 0.25, 1.0
  // Every s valid: the budget decides.
  const std::vector<double> loose{0.1, 0.3, 2.0};
  EXPECT_EQ(skip_count(w, loose, 3), 3);
  EXPECT_EQ(skip_count(w, loose, 2), 2);
  EXPECT_EQ(skip_count(w, loose, 1), 1);
  EXPECT_EQ(skip_count(w, loose, 0), 0);
  EXPECT_EQ(skip_count(w, loose, 9), 3);  // never all k
  // s = 2 fails (0.25 >= 0.2) but s = 3 holds: the largest valid s wins, not the first failure.
  EXPECT_EQ(skip_count(w, std::vector<double>{0.1, 0.2, 2.0}, 3), 3);
  // With budget 2, s = 2 fails and s = 1 holds.
  EXPECT_EQ(skip_count(w, std::vector<double>{0.1, 0.2, 2.0}, 2), 1);
  // s = 1 fails, s = 2 holds.
  EXPECT_EQ(skip_count(w, std::vector<double>{0.05, 0.3, 0.5}, 3), 2);
  // Nothing holds: all experts run. The condition is strict.
  EXPECT_EQ(skip_count(w, std::vector<double>{0.01, 0.25, 1.0}, 3), 0);
}

TEST(MoeCalibration, ThresholdsAreMediansOfTheRatiosOnAToySet) {
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3.0);
  EXPECT_TRUE(std::isnan(median({})));

  MoeLayerStats layer;
  layer.layer = 1;
  layer.tokens = {{{0, 1, 2}, {0.6f, 0.3f, 0.1f}, 0},     // r1 = 0.1/0.9,   r2 = 0.4/0.6
                  {{2, 0, 1}, {0.5f, 0.3f, 0.2f}, 0},     // r1 = 0.2/0.8,   r2 = 0.5/0.5
                  {{1, 3, 0}, {0.8f, 0.15f, 0.05f}, 0}};  // r1 = 0.05/0.95, r2 = 0.2/0.8
  MoeRatioCollector collector(/*n_layers=*/3, /*experts_per_token=*/3);
  collector.add(layer);
  const auto tau = collector.medians();
  ASSERT_EQ(tau.size(), 3u);
  EXPECT_TRUE(tau[0].empty());
  EXPECT_TRUE(tau[2].empty());
  ASSERT_EQ(tau[1].size(), 2u);
  EXPECT_NEAR(tau[1][0], 0.1 / 0.9, 1e-6);
  EXPECT_NEAR(tau[1][1], 0.4 / 0.6, 1e-6);
  EXPECT_EQ(collector.tokens(), 3);
}

TEST(MoeStats, RunAndSkippedExpertListsAddUp) {
  MoeLayerStats layer;
  layer.n_experts = 6;
  layer.tokens = {{{3, 1, 5}, {0.5f, 0.3f, 0.2f}, 1},   // runs 3, 1; skips 5
                  {{1, 5, 2}, {0.6f, 0.3f, 0.1f}, 2},   // runs 1; skips 5, 2
                  {{0, 3, 4}, {0.4f, 0.4f, 0.2f}, 0}};  // runs 0, 3, 4
  EXPECT_EQ(layer.routed(), 9);
  EXPECT_EQ(layer.skipped(), 3);
  EXPECT_EQ(layer.experts_run(), (std::vector<int32_t>{0, 1, 3, 4}));
  EXPECT_EQ(layer.experts_skipped(), (std::vector<int32_t>{2, 5}));  // never ran for any token
}

// ---- calibrated skipping on a real layout ---------------------------------------------------

struct MoeEvents final : Observer {
  std::vector<MoeStatsEvent> events;
  ObserveLevel level() const override { return ObserveLevel::kSummary; }
  void on_event(const Event& event) override {
    if (const auto* m = std::get_if<MoeStatsEvent>(&event)) events.push_back(*m);
  }
};

// The rule, written out again from the description in moe.h.
int expected_skips(const std::vector<float>& w, const std::vector<double>& tau, int budget) {
  const int k = static_cast<int>(w.size());
  for (int s = std::min(budget, k - 1); s >= 1; --s) {
    double skipped = 0, kept = 0;
    for (int i = 0; i < k; ++i) (i >= k - s ? skipped : kept) += w[static_cast<size_t>(i)];
    if (skipped / kept < tau[static_cast<size_t>(s - 1)]) return s;
  }
  return 0;
}

TEST(MoeSkipping, CalibratedThresholdsSkipTheLargestValidCountPerToken) {
  auto model = load_model(kMoeDir / "qwen3moe.gguf");  // 8 experts, top-4: skips of 1..3
  ASSERT_TRUE(model) << model.error().message;
  CpuTransformer transformer(*model);
  const auto cases = load_reference("qwen3moe");
  std::vector<std::vector<int32_t>> sequences;
  for (const auto& c : cases) sequences.push_back(c.tokens);
  auto thresholds = calibrate_moe(transformer, sequences);
  ASSERT_TRUE(thresholds) << thresholds.error().message;
  EXPECT_EQ(thresholds->tokens, 15);
  ASSERT_EQ(thresholds->thresholds.size(), 2u);

  // The thresholds are the medians of r_s over the calibration tokens, recomputed here.
  std::vector<std::vector<std::vector<double>>> ratios(2, std::vector<std::vector<double>>(3));
  for (const auto& c : cases) {
    MoeForwardStats stats;
    const ForwardContext context{nullptr, -1, nullptr, {}, nullptr, &stats};
    prefill(transformer, c.tokens, &context);
    for (const auto& layer : stats.layers) {
      for (const auto& t : layer.tokens) {
        for (int s = 1; s <= 3; ++s) {
          double skipped = 0, kept = 0;
          for (int i = 0; i < 4; ++i) (i >= 4 - s ? skipped : kept) += t.weights[static_cast<size_t>(i)];
          ratios[static_cast<size_t>(layer.layer)][static_cast<size_t>(s - 1)].push_back(skipped / kept);
        }
      }
    }
  }
  for (size_t l = 0; l < 2; ++l) {
    ASSERT_EQ(thresholds->thresholds[l].size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      auto v = ratios[l][s];
      ASSERT_EQ(v.size(), 15u);
      std::sort(v.begin(), v.end());
      EXPECT_NEAR(thresholds->thresholds[l][s], v[7], 1e-9) << "layer " << l << " s " << s + 1;
    }
  }

  // Budget 0 (or no thresholds) is bit-identical to dense verification.
  SparseConfig sparse = *sparse_preset("smoe");
  sparse.moe_thresholds = thresholds->thresholds;
  const RefCase& c = cases[0];
  const auto dense = prefill(transformer, c.tokens);
  sparse.moe_skip_budget = 0;
  ForwardContext off{nullptr, 0, &sparse, {}, nullptr, nullptr};
  EXPECT_EQ(prefill(transformer, c.tokens, &off), dense);

  for (int budget : {1, 2, 3}) {
    sparse.moe_skip_budget = budget;
    MoeForwardStats stats;
    MoeEvents events;
    SparseStats sparse_stats;
    const ForwardContext on{&events, 7, &sparse, {}, &sparse_stats, &stats};
    const auto skipped_logits = prefill(transformer, c.tokens, &on);
    ASSERT_EQ(stats.layers.size(), 2u);
    ASSERT_EQ(events.events.size(), 2u);
    int64_t total_skipped = 0, tokens_with_skips = 0, tokens_without = 0;
    for (size_t l = 0; l < 2; ++l) {
      const MoeLayerStats& layer = stats.layers[l];
      for (size_t t = 0; t < layer.tokens.size(); ++t) {
        const MoeTokenRouting& r = layer.tokens[t];
        ASSERT_EQ(r.experts.size(), 4u);
        EXPECT_EQ(r.skipped, expected_skips(r.weights, thresholds->thresholds[l], budget))
            << "layer " << l << " token " << t;
        EXPECT_LE(r.skipped, budget);
        if (l == 0) {  // layer 0's routing does not depend on skips
          EXPECT_EQ(r.experts, c.experts[0][t]);
        }
        (r.skipped > 0 ? tokens_with_skips : tokens_without) += 1;
        total_skipped += r.skipped;
      }
      EXPECT_EQ(layer.routed(), 4 * static_cast<int64_t>(c.tokens.size()));
      // The event carries the layer's union of experts that ran and of experts never run.
      const MoeStatsEvent& e = events.events[l];
      EXPECT_EQ(e.round, 7);
      EXPECT_EQ(e.layer, static_cast<int32_t>(l));
      EXPECT_EQ(e.total_experts, 8);
      EXPECT_EQ(e.routed_experts, layer.experts_run());
      EXPECT_EQ(e.skipped_experts, layer.experts_skipped());
      std::set<int32_t> chosen;
      for (const auto& r : layer.tokens) chosen.insert(r.experts.begin(), r.experts.end());
      std::set<int32_t> reported(e.routed_experts.begin(), e.routed_experts.end());
      reported.insert(e.skipped_experts.begin(), e.skipped_experts.end());
      EXPECT_EQ(reported, chosen);
      EXPECT_EQ(e.routed_experts.size() + e.skipped_experts.size(), chosen.size());
    }
    EXPECT_EQ(stats.skipped(), total_skipped);
    EXPECT_EQ(sparse_stats.moe_routed, stats.routed());
    EXPECT_EQ(sparse_stats.moe_skipped, total_skipped);
    // Median thresholds: some tokens skip and some do not.
    EXPECT_GT(tokens_with_skips, 0) << "budget " << budget;
    EXPECT_GT(tokens_without, 0) << "budget " << budget;
    EXPECT_GT(relative_l2(skipped_logits, dense), 1e-6) << "skipping experts changed nothing, budget " << budget;
  }
}

// ---- refusals -------------------------------------------------------------------------------

TEST(MoeRefusals, DenseModelRefusesMoeOptionsAndCalibration) {
  auto dense = load_model(fs::path(SPECULA_TEST_DATA_DIR) / "hf" / "tiny-llama-f16");
  ASSERT_TRUE(dense) << dense.error().message;
  EXPECT_FALSE(dense->config.is_moe());
  const int layers = static_cast<int>(dense->config.n_layers);
  SparseConfig smoe = *sparse_preset("smoe");
  EXPECT_THAT(validate(smoe, layers, dense->config.is_moe()).error().message, HasSubstr("no MoE layers"));
  SparseConfig budget_only;
  budget_only.moe_skip_budget = 2;
  EXPECT_THAT(validate(budget_only, layers, dense->config.is_moe()).error().message, HasSubstr("no MoE layers"));
  CpuTransformer transformer(*dense);
  const std::vector<std::vector<int32_t>> seqs{{1, 2, 3}};
  auto calibrated = calibrate_moe(transformer, seqs);
  ASSERT_FALSE(calibrated);
  EXPECT_THAT(calibrated.error().message, HasSubstr("has no MoE layers"));

  // On an MoE model, skipping without thresholds is refused too.
  EXPECT_THAT(validate(smoe, 2, true).error().message, HasSubstr("calibrate-moe"));
  smoe.moe_thresholds = {{0.1, 0.2, 0.3}, {0.1, 0.2, 0.3}};
  EXPECT_TRUE(validate(smoe, 2, true));
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / ("specula_moe_test_" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(MoeRefusals, ThresholdFileIsBoundToTheModel) {
  auto model = load_model(kMoeDir / "mixtral.gguf");
  ASSERT_TRUE(model);
  TempDir tmp("thresholds");
  MoeThresholds t;
  t.model_name = "mixtral";
  t.model_sha256 = "abc";
  t.n_layers = 2;
  t.n_experts = 8;
  t.experts_per_token = 2;
  t.tokens = 5;
  t.thresholds = {{0.4}, {0.5}};
  const std::string path = (tmp.path / "t.json").string();
  ASSERT_TRUE(save_moe_thresholds(t, path));
  auto loaded = load_moe_thresholds(path, "abc", model->config);
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->thresholds, t.thresholds);
  EXPECT_THAT(load_moe_thresholds(path, "def", model->config).error().message,
              HasSubstr("calibrated for another model"));
  t.thresholds = {{0.4, 0.1}, {0.5}};
  ASSERT_TRUE(save_moe_thresholds(t, path));
  EXPECT_THAT(load_moe_thresholds(path, "abc", model->config).error().message, HasSubstr("layer 0 has 2 thresholds"));
  t.thresholds = {{-1.0}, {0.5}};
  ASSERT_TRUE(save_moe_thresholds(t, path));
  EXPECT_THAT(load_moe_thresholds(path, "abc", model->config).error().message, HasSubstr("not a finite non-negative"));
  std::ofstream(path) << "{\"kind\": \"something else\"}";
  EXPECT_THAT(load_moe_thresholds(path, "abc", model->config).error().message,
              HasSubstr("not a Specula MoE thresholds"));
}

// A copy of a fixture directory with config.json edited.
fs::path edited_fixture(const TempDir& tmp, const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = tmp.path / name;
  fs::copy(kMoeDir / "qwen2moe", dir, fs::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  edit(config);
  std::ofstream(dir / "config.json") << config.dump();
  return dir;
}

std::string load_error(const fs::path& path) {
  auto model = load_model(path);
  return model ? std::string("(loaded)") : model.error().message;
}

TEST(MoeRefusals, UnsupportedVariantsGetOneClearError) {
  TempDir tmp("variants");
  EXPECT_THAT(load_error(edited_fixture(tmp, "deepseek", [](auto& c) { c["model_type"] = "deepseek_v3"; })),
              HasSubstr("unsupported architecture 'deepseek_v3' (supported: llama, mistral, mixtral, qwen2_moe"));
  EXPECT_THAT(load_error(edited_fixture(tmp, "mixed", [](auto& c) { c["mlp_only_layers"] = {1}; })),
              HasSubstr("mixing dense and MoE layers are not supported"));
  EXPECT_THAT(load_error(edited_fixture(tmp, "step", [](auto& c) { c["decoder_sparse_step"] = 2; })),
              HasSubstr("decoder_sparse_step"));
  EXPECT_THAT(load_error(edited_fixture(tmp, "gelu", [](auto& c) { c["hidden_act"] = "gelu"; })),
              HasSubstr("hidden_act \"gelu\" is not supported"));
  EXPECT_THAT(load_error(edited_fixture(tmp, "topk", [](auto& c) { c["num_experts_per_tok"] = 5; })),
              HasSubstr("experts per token is 5, must be in 1..4"));
  EXPECT_THAT(
      load_error(edited_fixture(tmp, "count", [](auto& c) { c["num_experts"] = 3; })),
      HasSubstr("model.layers.0.mlp.gate.weight' (blk.0.ffn_gate_inp.weight): shape [16, 4], expected [16, 3]"));
  EXPECT_THAT(load_error(edited_fixture(tmp, "window", [](auto& c) { c["use_sliding_window"] = true; })),
              HasSubstr("sliding-window attention is not supported"));

  namespace gw = specula::testing;
  auto gguf = [&](const std::string& name, const std::string& arch, const std::function<void(gw::GgufWriter&)>& extra,
                  uint32_t experts = 4) {
    gw::GgufWriter w;
    w.kv_str("general.architecture", arch)
        .kv_u32(arch + ".block_count", 1)
        .kv_u32(arch + ".embedding_length", 16)
        .kv_u32(arch + ".feed_forward_length", 16)
        .kv_u32(arch + ".attention.head_count", 2)
        .kv_u32(arch + ".context_length", 64)
        .kv_u32(arch + ".vocab_size", 8)
        .kv_u32(arch + ".expert_count", experts)
        .kv_u32(arch + ".expert_used_count", 2);
    extra(w);
    const fs::path path = tmp.path / name;
    w.write(path);
    return path;
  };
  EXPECT_THAT(
      load_error(gguf("ds.gguf", "deepseek2", [](auto&) {})),
      HasSubstr("unsupported architecture 'deepseek2' (supported: llama, mixtral (llama with experts), qwen2moe"));
  EXPECT_THAT(load_error(gguf("sigmoid.gguf", "qwen3moe", [](auto& w) { w.kv_u32("qwen3moe.expert_gating_func", 2); })),
              HasSubstr("expert_gating_func 2 is not supported (only 1, softmax)"));
  EXPECT_THAT(load_error(gguf("groups.gguf", "qwen3moe", [](auto& w) { w.kv_u32("qwen3moe.expert_group_count", 8); })),
              HasSubstr("grouped expert routing"));
  EXPECT_THAT(load_error(gguf(
                  "noexperts.gguf", "olmoe", [](auto&) {}, 0)),
              HasSubstr("expert count is 0"));
}

}  // namespace
}  // namespace specula

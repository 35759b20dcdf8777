// Sparse verification on the real default model: strict is bit-identical to dense tree
// verification; group-union equals per-query exactly; group-shared/first use one set per group;
// sink and local blocks are always read; bytes read fall below a dense read.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "engine/model/cpu_transformer.h"
#include "engine/model/loader.h"
#include "engine/spec/speculative.h"

namespace specula {
namespace {

struct SelectionLog final : Observer {
  std::vector<LayerSelectionEvent> selections;
  std::vector<FfnStatsEvent> ffn;
  ObserveLevel level() const override { return ObserveLevel::kFull; }
  void on_event(const Event& e) override {
    if (const auto* s = std::get_if<LayerSelectionEvent>(&e)) selections.push_back(*s);
    if (const auto* f = std::get_if<FfnStatsEvent>(&e)) ffn.push_back(*f);
  }
};

class SparseVerify : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto path = resolve_model_path("default");
    if (!std::filesystem::exists(path)) return;
    auto m = load_model(path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    model_ = new Model(std::move(*m));
    tf_ = new CpuTransformer(*model_, {0, Precision::Default});
    std::ifstream in("/usr/share/common-licenses/GPL-3");
    auto ids = model_->tokenizer.encode(std::string(std::istreambuf_iterator<char>(in), {}), false);
    ids.resize(kContext);
    auto kv = tf_->make_kv_cache(16, kContext + 32);
    ASSERT_TRUE(kv.ok());
    kv_ = new KvCache(std::move(*kv));
    std::vector<int32_t> pos(kContext);
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<float> last(static_cast<size_t>(model_->config.vocab_size));
    ASSERT_TRUE(tf_->forward(ids, pos, nullptr, *kv_, last, LogitRows::Last).ok());
    kv_->commit_all();
    // A static 2,2 tree of ordinary tokens: 2 + 4 nodes.
    tree_ = new DraftTree();
    for (int a = 0; a < 2; ++a) {
      const DraftNodeId p = *tree_->add_child(kDraftRoot, 1000 + a, 0.5f);
      for (int b = 0; b < 2; ++b) ASSERT_TRUE(tree_->add_child(p, 2000 + 10 * a + b, 0.5f).ok());
    }
  }
  static void TearDownTestSuite() {
    delete tree_;
    delete kv_;
    delete tf_;
    delete model_;
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "skipped: default model not downloaded";
  }

  // Logits of the verify forward over [pending, tree] under `config` (null: no context at all).
  std::vector<float> verify(const SparseConfig* config, SparseStats* stats = nullptr, Observer* observer = nullptr) {
    std::vector<float> logits(static_cast<size_t>((tree_->size() + 1) * model_->config.vocab_size));
    const ForwardContext context{observer, 7, config, {}, stats};
    EXPECT_TRUE(verify_forward(*tf_, *kv_, 42, *tree_, logits, config ? &context : nullptr).ok());
    kv_->rollback();
    return logits;
  }

  static SparseConfig sa(QueryMode mode, int group = 4) {
    SparseConfig c = *sparse_preset("sa");
    c.dense_below = 0;
    c.eta = 0.25;
    c.query_mode = mode;
    c.group_size = group;
    return c;
  }

  static constexpr int kContext = 640;  // 40 blocks of 16
  static inline Model* model_ = nullptr;
  static inline CpuTransformer* tf_ = nullptr;
  static inline KvCache* kv_ = nullptr;
  static inline DraftTree* tree_ = nullptr;
};

TEST_F(SparseVerify, StrictAndUnderBudgetAreBitIdenticalToDense) {
  const auto dense = verify(nullptr);
  const SparseConfig strict = *sparse_preset("strict");
  SparseStats stats;
  EXPECT_EQ(verify(&strict, &stats), dense);
  EXPECT_EQ(stats.kv_bytes_read, stats.kv_bytes_dense);
  EXPECT_EQ(stats.kv_bytes_dense, int64_t{30} * 3 * kContext * 64 * 2 * 4) << "layers × KV heads × rows × head dim × K,V × f32";
  SparseConfig under = sa(QueryMode::kFirst);
  under.dense_below = kContext + 1;  // below L_b nothing is dropped
  EXPECT_EQ(verify(&under), dense);
  SparseConfig ffn_all = *sparse_preset("sffn");
  ffn_all.ffn_threshold = 0.0;  // keeps every channel
  EXPECT_EQ(verify(&ffn_all), dense);
}

TEST_F(SparseVerify, GroupUnionEqualsPerQueryAndSharedGroupsOfOneToo) {
  const SparseConfig per_query = sa(QueryMode::kPerQuery);
  const SparseConfig union_mode = sa(QueryMode::kGroupUnion, 3);
  const SparseConfig shared_one = sa(QueryMode::kGroupShared, 1);
  const auto reference = verify(&per_query);
  EXPECT_EQ(verify(&union_mode), reference) << "each query attends to its own set; only the loads are merged";
  EXPECT_EQ(verify(&shared_one), reference);
  EXPECT_NE(reference, verify(nullptr)) << "25% of the blocks must change something";
}

TEST_F(SparseVerify, SelectionsKeepSinkAndLocalAndFollowTheMode) {
  const int64_t nb = kContext / 16, H = 3;
  const int64_t k = kept_blocks(sa(QueryMode::kFirst), kContext, 16);
  ASSERT_EQ(k, 10);
  // Rows in BFS order: node ids 0 (a0), 1, 2 (its children), 3 (a1), 4, 5 -> BFS 0, 3, 1, 2, 4, 5.
  std::vector<int32_t> order = {0};
  for (DraftNodeId id : tree_->traversal(TraversalOrder::kBfs)) order.push_back(id + 1);
  ASSERT_EQ(order, (std::vector<int32_t>{0, 1, 4, 2, 3, 5, 6}));
  std::map<QueryMode, int64_t> bytes;
  for (QueryMode mode : {QueryMode::kFirst, QueryMode::kGroupShared, QueryMode::kPerQuery}) {
    SelectionLog log;
    SparseStats stats;
    const SparseConfig config = sa(mode, 4);
    verify(&config, &stats, &log);
    bytes[mode] = stats.kv_bytes_read;
    if (mode == QueryMode::kFirst) {
      EXPECT_LT(stats.kv_bytes_read, stats.kv_bytes_dense / 2) << "one 25% load per layer";
    }
    std::map<int, std::vector<std::vector<int32_t>>> per_query;  // layer -> row -> blocks
    for (const auto& e : log.selections) {
      ASSERT_EQ(e.total_blocks, H * nb);
      EXPECT_EQ(e.round, 7);
      if (e.query < 0) continue;
      const auto ids = unpack_block_bits(e.block_bits);
      EXPECT_EQ(static_cast<int64_t>(ids.size()), H * k) << "k blocks on every KV head";
      for (int64_t h = 0; h < H; ++h) {
        EXPECT_TRUE(std::count(ids.begin(), ids.end(), h * nb)) << "sink block 0 of head " << h;
        EXPECT_TRUE(std::count(ids.begin(), ids.end(), h * nb + nb - 1)) << "local block of head " << h;
        EXPECT_TRUE(std::count(ids.begin(), ids.end(), h * nb + nb - 2));
      }
      per_query[e.layer].push_back(ids);
    }
    ASSERT_EQ(per_query.size(), 30u);
    const auto& rows = per_query[12];
    ASSERT_EQ(rows.size(), 7u) << "pending token + 6 nodes";
    if (mode == QueryMode::kFirst) {
      for (const auto& r : rows) EXPECT_EQ(r, rows[0]);
    } else if (mode == QueryMode::kGroupShared) {
      for (int i = 1; i < 4; ++i) EXPECT_EQ(rows[order[i]], rows[order[0]]) << "first group: BFS rows 0, 1, 4, 2";
      for (int i = 5; i < 7; ++i) EXPECT_EQ(rows[order[i]], rows[order[4]]) << "second group: rows 3, 5, 6";
    } else {
      int distinct = 0;
      for (const auto& r : rows) distinct += r != rows[0];
      EXPECT_GT(distinct, 0) << "per-query sets differ somewhere";
    }
  }
  // Loads: first = one set per layer, group-shared = one per group (2), per-query = one per row (7).
  EXPECT_LT(bytes[QueryMode::kFirst], bytes[QueryMode::kGroupShared]);
  EXPECT_LT(bytes[QueryMode::kGroupShared], bytes[QueryMode::kPerQuery]);
}

TEST_F(SparseVerify, ReuseLayersTakeTheirAnchorsSelection) {
  SparseConfig config = sa(QueryMode::kFirst);
  config.anchors = {0, 10, 20};
  SelectionLog log;
  verify(&config, nullptr, &log);
  std::map<int, LayerSelectionEvent> tree_level;
  for (const auto& e : log.selections) {
    if (e.query < 0 && e.group < 0) tree_level[e.layer] = e;
  }
  ASSERT_EQ(tree_level.size(), 30u);
  EXPECT_EQ(tree_level[10].mode, SelectionMode::kRefresh);
  EXPECT_EQ(tree_level[15].mode, SelectionMode::kReuse);
  EXPECT_EQ(tree_level[15].anchor_layer, 10);
  EXPECT_EQ(tree_level[15].block_bits, tree_level[10].block_bits);
  EXPECT_EQ(tree_level[29].block_bits, tree_level[20].block_bits);
}

TEST_F(SparseVerify, DenseLayersReadEverythingAndOtherLayersStillSelect) {
  SparseConfig all = sa(QueryMode::kFirst);
  all.dense_layers = 30;
  SparseStats all_stats;
  EXPECT_EQ(verify(&all, &all_stats), verify(nullptr)) << "every layer dense: bit-identical to dense attention";
  EXPECT_EQ(all_stats.kv_bytes_read, all_stats.kv_bytes_dense);
  SparseConfig two = sa(QueryMode::kFirst);
  two.dense_layers = 2;
  two.anchors = {0, 1, 10};  // layers 2..9 would reuse layer 1, which has no selection: they select
  SelectionLog log;
  SparseStats stats;
  verify(&two, &stats, &log);
  std::map<int, LayerSelectionEvent> tree_level;
  for (const auto& e : log.selections) {
    if (e.query < 0 && e.group < 0) tree_level[e.layer] = e;
  }
  ASSERT_EQ(tree_level.size(), 30u);
  const int64_t nb = kContext / 16, H = 3, k = kept_blocks(two, kContext, 16);
  EXPECT_EQ(static_cast<int64_t>(unpack_block_bits(tree_level[1].block_bits).size()), H * nb);
  EXPECT_EQ(static_cast<int64_t>(unpack_block_bits(tree_level[2].block_bits).size()), H * k);
  EXPECT_EQ(tree_level[2].mode, SelectionMode::kRefresh) << "its anchor, layer 1, is dense";
  EXPECT_EQ(tree_level[11].mode, SelectionMode::kReuse);
  EXPECT_EQ(tree_level[11].block_bits, tree_level[10].block_bits);
  EXPECT_GT(stats.kv_bytes_read, 0);
  EXPECT_LT(stats.kv_bytes_read, stats.kv_bytes_dense);
}

TEST_F(SparseVerify, SparseFfnKeepsFewerChannelsAndReportsThem) {
  SparseConfig config = *sparse_preset("sffn");
  config.ffn_threshold = 0.05;
  SelectionLog log;
  SparseStats stats;
  const auto logits = verify(&config, &stats, &log);
  EXPECT_GT(stats.ffn_total, 0);
  EXPECT_LT(stats.ffn_active, stats.ffn_total);
  ASSERT_EQ(log.ffn.size(), 30u);
  for (const auto& f : log.ffn) {
    EXPECT_EQ(f.total_channels, 1536);
    EXPECT_LE(f.active_channels, 1536);
  }
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  config.ffn_union = true;
  SparseStats union_stats;
  verify(&config, &union_stats);
  EXPECT_GE(union_stats.ffn_active, stats.ffn_active) << "the union keeps at least each row's channels";
}

TEST_F(SparseVerify, ExactScoringIsAnOracleThatPicksOtherBlocksThanTheBound) {
  const auto dense = verify(nullptr);
  const auto distance = [&](const std::vector<float>& v) {
    double num = 0, den = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      num += (static_cast<double>(v[i]) - dense[i]) * (static_cast<double>(v[i]) - dense[i]);
      den += static_cast<double>(dense[i]) * dense[i];
    }
    return std::sqrt(num / den);
  };
  SparseConfig exact = sa(QueryMode::kFirst);
  exact.scoring = "exact";
  SparseConfig keep_all = exact;
  keep_all.eta = 1.0;
  EXPECT_EQ(verify(&keep_all), dense) << "every block kept: the score does not matter";
  SelectionLog quest_log, exact_log;
  const SparseConfig quest = sa(QueryMode::kFirst);
  const auto with_quest = verify(&quest, nullptr, &quest_log);
  SparseStats exact_stats;
  const auto with_exact = verify(&exact, &exact_stats, &exact_log);
  EXPECT_GT(exact_stats.kv_bytes_read, exact_stats.kv_bytes_dense / 2) << "the oracle is charged for every key it scores";
  ASSERT_EQ(quest_log.selections.size(), exact_log.selections.size());
  int differ = 0;
  for (size_t i = 0; i < quest_log.selections.size(); ++i) {
    differ += quest_log.selections[i].block_bits != exact_log.selections[i].block_bits;
  }
  EXPECT_GT(differ, 0) << "the Quest bound and the true maximum rank blocks differently somewhere";
  EXPECT_NE(with_exact, dense);
  std::printf("25%% of blocks, logits rel L2 to dense: quest %.3e, exact %.3e; %d of %zu layer selections differ\n",
              distance(with_quest), distance(with_exact), differ, quest_log.selections.size());
}

}  // namespace
}  // namespace specula

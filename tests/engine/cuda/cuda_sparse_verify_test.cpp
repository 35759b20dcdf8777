// Sparse verification on the CUDA backend against the CPU's (engine/sparse/sparse_attention.cpp)
// on the default model: one tree verify past a small L_b, per query mode, comparing the logits
// (relative L2) and each row's selected blocks per layer (Jaccard, from the observer's
// LayerSelectionEvents that both backends emit). The CPU keeps K/V in bf16 (Precision::
// Bf16Storage) and scores in f32 from f32 queries; the CUDA side scores bf16 queries against its
// bf16 block min/max (the same values as the CPU's f32 ones: each is one of the bf16 keys), so
// blocks whose Quest bounds nearly tie may flip: the bounds below allow some of that, and the
// test prints the measured values.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda_backend.h"
#include "engine/model/loader.h"
#include "engine/spec/drafters.h"
#include "engine/spec/speculative.h"
#include "tests/engine/cuda/cuda_test_support.h"

namespace specula {
namespace {

using testing::rel_l2;

// Per (layer, query row) the block ids a verify read (query -1: the union over the tree).
class SelectionLog final : public Observer {
 public:
  void on_event(const Event& event) override {
    if (const auto* e = std::get_if<LayerSelectionEvent>(&event)) {
      if (e->group < 0 || e->query >= 0) sets[{e->layer, e->query}] = unpack_block_bits(e->block_bits);
    }
  }
  ObserveLevel level() const override { return ObserveLevel::kFull; }
  std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> sets;
};

double jaccard(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> both, either;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(either));
  return either.empty() ? 1.0 : static_cast<double>(both.size()) / static_cast<double>(either.size());
}

// About 330 tokens of varied text, so that the committed context is ~20 blocks past L_b = 64.
std::string long_prompt() {
  const char* facts[] = {"the river",        "a lighthouse",    "the old library",   "a glass bridge",
                         "the night market", "a copper kettle", "the harbour crane", "a violin maker",
                         "the clock tower",  "a salt marsh"};
  std::string text = "Notes from a travel diary, one line per day.\n";
  for (int day = 1; day <= 24; ++day) {
    text += "Day " + std::to_string(day) + ": we visited " + facts[(day * 7) % 10] + " and counted " +
            std::to_string(day * 13 % 97) + " boats near " + facts[(day * 3) % 10] + ".\n";
  }
  return text + "The code word for the trip was";
}

class CudaSparseVerify : public testing::DefaultModelOnGpu {
 protected:
  void SetUp() override {
    DefaultModelOnGpu::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cpu_ = std::make_unique<CpuBackend>(*model_, CpuTransformerOptions{0, Precision::Bf16Storage});
    prompt_.clear();
    if (model_->tokenizer.add_bos() && model_->tokenizer.bos_id() >= 0) prompt_.push_back(model_->tokenizer.bos_id());
    const auto e = model_->tokenizer.encode(long_prompt(), false);
    prompt_.insert(prompt_.end(), e.begin(), e.end());
  }

  // A 9-node tree of random tokens (seed printed): two branches, depths up to 4.
  DraftTree random_tree(uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model_->config.vocab_size) - 1);
    DraftTree t;
    const int parents[] = {kDraftRoot, kDraftRoot, 0, 0, 2, 1, 4, 5, 3};
    for (int p : parents) EXPECT_TRUE(t.add_child(p, token(rng), 0.5f).ok());
    return t;
  }

  // A tree of `nodes` random tokens, each node's parent drawn among the root and the nodes
  // before it (seeded): wide enough that a verify leaves the exact path of small ones.
  DraftTree random_wide_tree(uint64_t seed, int nodes) const {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model_->config.vocab_size) - 1);
    DraftTree t;
    for (int i = 0; i < nodes; ++i) {
      const int parent = std::uniform_int_distribution<int>(-1, i - 1)(rng);
      EXPECT_TRUE(t.add_child(parent < 0 ? kDraftRoot : parent, token(rng), 0.5f).ok());
    }
    return t;
  }

  struct Verify {
    std::vector<float> logits;
    SparseStats stats;
    SelectionLog selections;
  };

  // Prefill of the prompt, then one verify forward of `tree` after the prompt's greedy token.
  Verify verify(TransformerBackend& backend, const SparseConfig& sparse, const DraftTree& tree) {
    Verify out;
    auto session = backend.start(16, 1024);
    EXPECT_TRUE(session) << (session ? "" : session.error().message);
    if (!session) return out;
    const int64_t V = backend.config().vocab_size;
    std::vector<float> last(static_cast<size_t>(V));
    std::vector<int32_t> pos(prompt_.size());
    std::iota(pos.begin(), pos.end(), 0);
    const Status pre = (*session)->forward(prompt_, pos, nullptr, last, LogitRows::Last);
    EXPECT_TRUE(pre) << (pre ? "" : pre.error().message);
    (*session)->commit_all();
    // The same pending token on both backends (a near-tie would otherwise change the inputs).
    const int32_t pending = 12;
    out.logits.resize(static_cast<size_t>((tree.size() + 1) * V));
    const ForwardContext context{&out.selections, 0, &sparse, {}, &out.stats};
    const Status s = verify_forward(**session, pending, tree, out.logits, &context);
    EXPECT_TRUE(s) << (s ? "" : s.error().message);
    return out;
  }

  static SparseConfig config(QueryMode mode, double eta) {
    SparseConfig c = *sparse_preset("sa");
    c.dense_below = 64;
    c.eta = eta;
    c.query_mode = mode;
    c.group_size = 4;
    return c;
  }

  std::unique_ptr<CpuBackend> cpu_;
  std::vector<int32_t> prompt_;
};

TEST_F(CudaSparseVerify, LogitsAndSelectionsMatchTheCpuInEveryQueryMode) {
  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu, prompt %zu tokens\n", static_cast<unsigned long long>(seed), prompt_.size());
  ASSERT_GT(prompt_.size(), 250u);
  const DraftTree tree = random_tree(seed);
  for (QueryMode mode : {QueryMode::kFirst, QueryMode::kPerQuery, QueryMode::kGroupUnion, QueryMode::kGroupShared}) {
    SparseConfig c = config(mode, 0.2);
    if (mode == QueryMode::kFirst) {  // also: a dense first layer, and reuse of anchors 1, 4, 7, ...
      c.dense_layers = 1;
      for (int l = 1; l < model_->config.n_layers; l += 3) c.anchors.push_back(l);
    }
    const Verify cpu = verify(*cpu_, c, tree);
    const Verify gpu = verify(*cuda_, c, tree);
    ASSERT_EQ(cpu.logits.size(), gpu.logits.size());
    const double err = rel_l2(gpu.logits, cpu.logits);
    // Per (layer, row): Jaccard of the CUDA selection against the CPU's, and exact matches.
    double jac_sum = 0;
    int compared = 0, exact = 0;
    for (const auto& [key, cpu_set] : cpu.selections.sets) {
      const auto it = gpu.selections.sets.find(key);
      ASSERT_NE(it, gpu.selections.sets.end()) << "layer " << key.first << " query " << key.second << ": no CUDA event";
      const double j = jaccard(cpu_set, it->second);
      jac_sum += j;
      exact += j == 1.0 ? 1 : 0;
      ++compared;
    }
    ASSERT_GT(compared, model_->config.n_layers);
    const double cpu_share =
        static_cast<double>(cpu.stats.kv_bytes_read) / static_cast<double>(cpu.stats.kv_bytes_dense);
    const double gpu_share =
        static_cast<double>(gpu.stats.kv_bytes_read) / static_cast<double>(gpu.stats.kv_bytes_dense);
    std::printf(
        "%-12s logits rel L2 %.3e; selections: mean Jaccard %.4f, exact %d of %d (layer, row) sets; KV bytes "
        "read / dense: CPU %.3f, CUDA %.3f\n",
        std::string(to_string(mode)).c_str(), err, jac_sum / compared, exact, compared, cpu_share, gpu_share);
    // The dense CPU-vs-CUDA verify stays under 2e-2 per step (cuda_backend_test.cpp); a few
    // flipped near-tie blocks add to it.
    EXPECT_LT(err, 4e-2) << to_string(mode);
    EXPECT_GT(jac_sum / compared, 0.9) << to_string(mode);
    // Both backends count what a kernel sharing loads as the mode allows must read
    // (engine/sparse/sparse_attention.cpp); the CUDA one counts bf16 K/V and metadata where the
    // CPU counts f32 throughout, the same proportions. Per-query and the
    // group modes load per row or per group: on this short prompt with a tree of many rows they
    // read more than one shared dense pass (the CPU's figure says so too), which is the point of
    // SSV's group-union. Only the first-query mode must read less than dense here.
    EXPECT_NEAR(gpu_share, cpu_share, 0.1 * cpu_share) << to_string(mode);
    if (mode == QueryMode::kFirst) {
      EXPECT_LT(gpu_share, 0.8) << "the CUDA verify read nearly everything";
    }
    EXPECT_GT(gpu.stats.kv_bytes_dense, 0);
  }
}

// A 40-node tree (41 rows): past Impl::kExactVerifyRowsSmall, so the projections run on the
// stacked split halves and the tree-attention rows go straight into the Wo GEMM's halves
// (rows_bf16_to_split), a route the 9-node tree above never takes.
TEST_F(CudaSparseVerify, AWideTreeMatchesTheCpuInTheFirstQueryAndGroupUnionModes) {
  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const DraftTree tree = random_wide_tree(seed, 40);
  ASSERT_EQ(tree.size(), 40);
  for (QueryMode mode : {QueryMode::kFirst, QueryMode::kGroupUnion}) {
    const SparseConfig c = config(mode, 0.2);
    const Verify cpu = verify(*cpu_, c, tree);
    const Verify gpu = verify(*cuda_, c, tree);
    ASSERT_EQ(cpu.logits.size(), gpu.logits.size());
    const double err = rel_l2(gpu.logits, cpu.logits);
    std::printf("%-12s 41 rows: logits rel L2 %.3e\n", std::string(to_string(mode)).c_str(), err);
    EXPECT_GT(err, 0.0) << "bit-equal logits from two backends: is the CUDA side running at all?";
    EXPECT_LT(err, 4e-2) << to_string(mode);
    // Both count the bytes their mode must read, in the same proportions (see above).
    const double cpu_share =
        static_cast<double>(cpu.stats.kv_bytes_read) / static_cast<double>(cpu.stats.kv_bytes_dense);
    const double gpu_share =
        static_cast<double>(gpu.stats.kv_bytes_read) / static_cast<double>(gpu.stats.kv_bytes_dense);
    EXPECT_NEAR(gpu_share, cpu_share, 0.1 * cpu_share) << to_string(mode);
    if (mode == QueryMode::kFirst) {
      EXPECT_LT(gpu_share, 0.8) << "the CUDA verify read nearly everything";
    }
  }
}

TEST_F(CudaSparseVerify, KeepingEveryBlockIsTheDensePathAndDroppingOneStaysClose) {
  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const DraftTree tree = random_tree(seed);
  const Verify dense = verify(*cuda_, SparseConfig{}, tree);
  // eta = 1 keeps every block: the policy is inactive (engine/sparse/sparse_attention.cpp), and
  // the forward must be the dense one bit for bit.
  const Verify all = verify(*cuda_, config(QueryMode::kPerQuery, 1.0), tree);
  EXPECT_EQ(all.logits, dense.logits);
  EXPECT_EQ(all.stats.kv_bytes_read, all.stats.kv_bytes_dense);
  // The largest eta that still drops a block: every row reads all committed blocks but one, on
  // the sparse path (selection, visibility, listed-row counting).
  const int64_t P = static_cast<int64_t>(prompt_.size()), nb = (P + 15) / 16;
  double eta = 1.0;
  while (eta > 0.5 && kept_blocks(config(QueryMode::kPerQuery, eta), P, 16) >= nb) eta -= 0.001;
  ASSERT_EQ(kept_blocks(config(QueryMode::kPerQuery, eta), P, 16), nb - 1);
  const Verify most = verify(*cuda_, config(QueryMode::kPerQuery, eta), tree);
  const Verify most_cpu = verify(*cpu_, config(QueryMode::kPerQuery, eta), tree);
  const double err = rel_l2(most.logits, dense.logits);
  const auto share = [](const Verify& v) {
    return static_cast<double>(v.stats.kv_bytes_read) / static_cast<double>(v.stats.kv_bytes_dense);
  };
  std::printf(
      "eta %.3f (one of %lld blocks dropped per row and KV head): rel L2 to dense %.3e, bytes read / dense "
      "%.3f (CPU %.3f)\n",
      eta, static_cast<long long>(nb), err, share(most), share(most_cpu));
  EXPECT_LT(err, 2e-2);
  // Per-query loads every row's blocks apart: about rows x (nb - 1) / nb of a dense pass, plus
  // the scoring metadata, counted as the CPU counts it.
  EXPECT_NEAR(share(most), share(most_cpu), 0.1 * share(most_cpu));
  EXPECT_LT(share(most), static_cast<double>(tree.size() + 1));
}

// Sparse FFN (preset sffn, per row and union over the tree): one verify forward on both backends
// with the same threshold. The GPU's gate comes from bf16 weights and f32 activations like the
// CPU's Bf16Storage path, so channels near tau may fall either way: the kept share must agree
// closely, and the logits within the dense forward's bound.
TEST_F(CudaSparseVerify, SparseFfnKeepsTheCpusChannelsAndLogits) {
  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const DraftTree tree = random_tree(seed);
  const Verify dense = verify(*cuda_, SparseConfig{}, tree);
  for (bool union_rows : {false, true}) {
    SparseConfig c = *sparse_preset("sffn");
    c.ffn_union = union_rows;
    const Verify cpu = verify(*cpu_, c, tree);
    const Verify gpu = verify(*cuda_, c, tree);
    ASSERT_GT(cpu.stats.ffn_total, 0);
    ASSERT_EQ(gpu.stats.ffn_total, cpu.stats.ffn_total);
    const double cpu_share = static_cast<double>(cpu.stats.ffn_active) / static_cast<double>(cpu.stats.ffn_total);
    const double gpu_share = static_cast<double>(gpu.stats.ffn_active) / static_cast<double>(gpu.stats.ffn_total);
    const double err = rel_l2(gpu.logits, cpu.logits);
    std::printf(
        "sffn tau %.3g %-7s channels kept: CPU %.4f, CUDA %.4f; logits rel L2 to the CPU %.3e, to the "
        "CUDA dense forward %.3e\n",
        c.ffn_threshold, union_rows ? "union" : "per row", cpu_share, gpu_share, err, rel_l2(gpu.logits, dense.logits));
    EXPECT_NEAR(gpu_share, cpu_share, 2e-3) << (union_rows ? "union" : "per row");
    // Per row, tau 0.05 drops about 11% of the channels; the union over the tree's 10 rows keeps
    // 99.99% (H100, cuda_sparse_verify_test_h100_2026-11-24.txt), so only the per-row case must
    // show that channels were skipped.
    if (!union_rows) {
      EXPECT_LT(gpu_share, 0.95) << "the threshold skipped almost nothing: the test would not test skipping";
    }
    EXPECT_LT(err, 2e-2) << (union_rows ? "union" : "per row");
  }
}

TEST_F(CudaSparseVerify, GreedySpeculativeRunReadsFewerKvBytesThanDense) {
  auto backend = make_cuda_backend(*model_, CudaBackendOptions{});
  ASSERT_TRUE(backend) << backend.error().message;
  SpeculativeEngine engine(*model_, std::move(*backend));
  ASSERT_EQ(engine.backend().name(), "cuda");
  auto ngram = make_ngram_drafter();
  for (QueryMode mode : {QueryMode::kFirst, QueryMode::kGroupUnion}) {
    SpeculativeOptions o;
    o.max_tokens = 32;
    o.tree = *parse_tree_shape("static:3,2,1");
    o.controller.enabled = false;
    o.stop_at_eos = false;
    o.sparse = config(mode, 0.2);
    auto r = engine.generate(prompt_, ngram.get(), o, nullptr);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->tokens.size(), 32u);
    const auto& m = r->metrics;
    std::printf("%-12s %zu tokens, %lld rounds, KV bytes read %lld of %lld dense (%.3f)\n",
                std::string(to_string(mode)).c_str(), r->tokens.size(), static_cast<long long>(m.rounds),
                static_cast<long long>(m.kv_bytes_read), static_cast<long long>(m.kv_bytes_dense),
                static_cast<double>(m.kv_bytes_read) / static_cast<double>(m.kv_bytes_dense));
    EXPECT_GT(m.kv_bytes_dense, 0);
    EXPECT_LT(m.kv_bytes_read, m.kv_bytes_dense * 8 / 10);
  }
}

}  // namespace
}  // namespace specula

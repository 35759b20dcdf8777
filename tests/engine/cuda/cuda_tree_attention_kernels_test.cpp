// The tree-attention kernels inside a whole tree verify (CudaBackendOptions::tree_attention_kernels,
// head_dim 128): the planned path's queries to bf16, the kernels, and their rows back into the Wo
// GEMM's input halves, against the same backend with the kernels off (attention_at on f32
// queries, itself checked against the CPU in cuda_backend_test.cpp), and the wide-verify route
// (CudaBackendOptions::tree_attention_from_context) on the same bits. A small synthetic model of
// Llama-3.1's layout (random weights, for this check only) keeps it fast; both backends draw the
// same weights from one seed, which the prefill's equal bits confirm.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/cuda_backend.h"
#include "engine/spec/speculative.h"
#include "tests/engine/cuda/cuda_test_support.h"

namespace specula {
namespace {

using testing::rel_l2;

ModelConfig small_llama() {
  ModelConfig c = *synthetic_config("llama-3.1-8b");
  c.name = "synthetic small llama (random bf16 weights, test only)";
  c.n_layers = 3;
  c.dim = 1024;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 128;
  c.ffn_dim = 3072;
  c.vocab_size = 4096;
  c.context_length = 4096;
  return c;
}

// A tree of `nodes` random tokens, each node's parent drawn among the root and earlier nodes.
DraftTree random_tree(std::mt19937_64& rng, int nodes, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
  DraftTree t;
  for (int i = 0; i < nodes; ++i) {
    const int parent = std::uniform_int_distribution<int>(-1, i - 1)(rng);
    EXPECT_TRUE(t.add_child(parent < 0 ? kDraftRoot : parent, token(rng), 0.5f).ok());
  }
  return t;
}

struct Verified {
  std::vector<float> prefill_last, logits;
};

Verified run(CudaBackend& backend, const std::vector<int32_t>& prompt, const DraftTree& tree) {
  Verified out;
  auto session = backend.start(16, 2048);
  EXPECT_TRUE(session) << (session ? "" : session.error().message);
  if (!session) return out;
  const int64_t V = backend.config().vocab_size;
  out.prefill_last.resize(static_cast<size_t>(V));
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  const Status pre = (*session)->forward(prompt, pos, nullptr, out.prefill_last, LogitRows::Last);
  EXPECT_TRUE(pre) << (pre ? "" : pre.error().message);
  (*session)->commit_all();
  out.logits.resize(static_cast<size_t>((tree.size() + 1) * V));
  const Status s = verify_forward(**session, 7, tree, out.logits, nullptr);
  EXPECT_TRUE(s) << (s ? "" : s.error().message);
  return out;
}

TEST(CudaTreeAttentionKernels, AWholeVerifyMatchesTheVerifyWithoutThem) {
  if (!cuda_gpu_available()) {
    std::puts("skipped: no GPU");
    GTEST_SKIP() << "skipped: no GPU";
  }
  const ModelConfig config = small_llama();
  CudaBackendOptions on, off;
  on.tree_attention_kernels = true;
  off.tree_attention_kernels = false;
  off.tree_attention_from_context = 0;
  auto with = make_synthetic_cuda_backend(config, 11, on);
  ASSERT_TRUE(with) << with.error().message;
  auto without = make_synthetic_cuda_backend(config, 11, off);
  ASSERT_TRUE(without) << without.error().message;
  // The defaults: the kernels for wide verifies only, from 256 committed rows on (the prompt
  // below is longer).
  const CudaBackendOptions wide;
  ASSERT_FALSE(wide.tree_attention_kernels);
  ASSERT_GT(wide.tree_attention_from_context, 0);
  ASSERT_LT(wide.tree_attention_from_context, 700);
  auto wide_only = make_synthetic_cuda_backend(config, 11, wide);
  ASSERT_TRUE(wide_only) << wide_only.error().message;

  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<int32_t> prompt(700);
  for (auto& t : prompt)
    t = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(config.vocab_size) - 1)(rng);
  // 41 rows: our wgmma GEMM (small matrices to 48 rows); 61: cuBLAS. Both on the split row ops.
  for (const int nodes : {40, 60}) {
    const DraftTree tree = random_tree(rng, nodes, config.vocab_size);
    const Verified a = run(**with, prompt, tree), b = run(**without, prompt, tree);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(a.prefill_last, b.prefill_last) << "the two backends do not hold the same weights";
    const double err = rel_l2(a.logits, b.logits);
    std::printf("%d nodes: logits rel L2 %.3e (tree kernels' bf16 queries against f32)\n", nodes, err);
    // bf16 queries move each score by ~2^-9 relative; over 3 layers that is ~1e-3.
    EXPECT_LT(err, 1e-2) << nodes << " nodes";
    EXPECT_GT(err, 0.0) << nodes << " nodes: the same bits, so the kernels were not used";
    // A wide verify (stacked GEMMs) takes the kernels under tree_attention_from_context too.
    EXPECT_EQ(run(**wide_only, prompt, tree).logits, a.logits) << nodes << " nodes";
  }
  // A narrow one (7 rows: the exact GEMMs) keeps attention_at's bits.
  const DraftTree narrow = random_tree(rng, 6, config.vocab_size);
  const std::vector<float> narrow_off = run(**without, prompt, narrow).logits;
  EXPECT_EQ(run(**wide_only, prompt, narrow).logits, narrow_off);
  EXPECT_NE(run(**with, prompt, narrow).logits, narrow_off) << "the forced kernels did not change a narrow verify";
}

}  // namespace
}  // namespace specula

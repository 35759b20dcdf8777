// The CUDA backend (bf16 weights and KV, f32 accumulation) against the CPU backend on the
// default model: logits and greedy tokens. The reference is the CPU with the same numbers in
// storage (Precision::Bf16Storage: weights, embeddings and K/V rounded to bf16, f32 math), so
// the 1e-2 bound measures the kernels; a second test bounds the gap to the quantized file's own
// f32 numbers, which rounding the weights to bf16 opens by itself.
//
// The bound applies to each prompt's logits taken together (prefill and the decode steps while
// greedy agrees: one relative L2 over all of them); a single step must stay within twice it.
// Why not 1e-2 per step: two implementations that both round K/V to bf16 flip the rounding of
// different entries once their f32 values differ in the last bits, and SmolLM2's attention
// sinks amplify a one-ulp flip; the worst single step moved between 7.7e-3 and 1.14e-2 across
// builds that only changed a summation order, while each prompt's whole run stayed at or below
// 3.2e-3 (bench/results/cuda_backend_logits_h100_2026-11-24.txt).
#include "engine/backend/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/model/loader.h"
#include "kernels/cuda/model_ops.h"
#include "tests/engine/cuda/cuda_test_support.h"

namespace specula {
namespace {

using testing::rel_l2;

int argmax(const std::vector<float>& v, size_t offset = 0, size_t n = 0) {
  if (n == 0) n = v.size();
  return static_cast<int>(std::max_element(v.begin() + offset, v.begin() + offset + n) - v.begin() - offset);
}

// The prompt at positions 0.., committed; last-position logits into `logits`.
bool prefill(BackendSession& session, const std::vector<int32_t>& prompt, std::vector<float>& logits) {
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  const Status s = session.forward(prompt, pos, nullptr, logits, LogitRows::Last);
  if (!s) {
    ADD_FAILURE() << s.error().message;
    return false;
  }
  session.commit_all();
  return true;
}

class CudaBackendTest : public testing::DefaultModelOnGpu {
 protected:
  void SetUp() override {
    DefaultModelOnGpu::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cpu_ = std::make_unique<CpuBackend>(*model_, CpuTransformerOptions{0, Precision::Bf16Storage});
  }

  std::vector<int32_t> encode(const std::string& text) {
    std::vector<int32_t> ids;
    if (model_->tokenizer.add_bos() && model_->tokenizer.bos_id() >= 0) ids.push_back(model_->tokenizer.bos_id());
    const auto e = model_->tokenizer.encode(text, false);
    ids.insert(ids.end(), e.begin(), e.end());
    return ids;
  }

  void expect_wide_tree_verify_matches_cpu(int T);  // a T-row tree verify (below WideTreeVerifyMatchesCpu)

  std::unique_ptr<CpuBackend> cpu_;
};

struct LogitComparison {
  double worst = 0;         // largest relative L2 of one forward (a prefill or a decode step)
  double worst_prompt = 0;  // largest relative L2 of one prompt's forwards taken together
  int identical = 0;        // prompts whose 32 greedy tokens agree
  int prompts = 0;
};

// Prefill + 32 greedy decode steps on each side; logits are compared while the tokens agree.
LogitComparison compare_logits(TransformerBackend& cuda, TransformerBackend& cpu,
                               const std::function<std::vector<int32_t>(const std::string&)>& encode, double bound) {
  const std::vector<std::string> prompts = {
      "The capital of France is",
      "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
      "Once upon a time, in a small village by the sea, there lived",
      "Question: A train travels 60 km in 45 minutes. What is its speed in km/h?\nAnswer:",
      "List three primary colors:",
      "Translate to French: The weather is nice today.",
  };
  const int64_t V = cuda.config().vocab_size;
  const int kSteps = 32;
  LogitComparison out;
  out.prompts = static_cast<int>(prompts.size());
  for (const auto& text : prompts) {
    const auto prompt = encode(text);
    auto cs = cpu.start(16, 256);
    auto gs = cuda.start(16, 256);
    EXPECT_TRUE(cs && gs);
    if (!cs || !gs) return out;
    std::vector<int32_t> pos(prompt.size());
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<float> lc(V), lg(V);
    EXPECT_TRUE((*cs)->forward(prompt, pos, nullptr, lc, LogitRows::Last));
    EXPECT_TRUE((*gs)->forward(prompt, pos, nullptr, lg, LogitRows::Last));
    (*cs)->commit_all();
    (*gs)->commit_all();
    const double prefill_err = rel_l2(lg, lc);
    out.worst = std::max(out.worst, prefill_err);
    EXPECT_LT(prefill_err, 2 * bound) << text;
    double num = 0, den = 0;  // the prompt's forwards taken together
    auto add = [&] {
      for (size_t i = 0; i < lc.size(); ++i) {
        num += (static_cast<double>(lg[i]) - lc[i]) * (static_cast<double>(lg[i]) - lc[i]);
        den += static_cast<double>(lc[i]) * lc[i];
      }
    };
    add();
    // Each side decodes greedily on its own tokens; logits are compared while they agree.
    int tok_c = argmax(lc), tok_g = argmax(lg);
    int diverged_at = -1;
    double gap = 0, worst_step = 0;
    for (int step = 0; step < kSteps; ++step) {
      if (tok_c != tok_g && diverged_at < 0) {
        diverged_at = step;
        gap = lc[static_cast<size_t>(tok_c)] - lc[static_cast<size_t>(tok_g)];
      }
      int32_t p = static_cast<int32_t>((*cs)->committed());
      EXPECT_TRUE((*cs)->forward({&tok_c, 1}, {&p, 1}, nullptr, lc, LogitRows::Last));
      EXPECT_TRUE((*gs)->forward({&tok_g, 1}, {&p, 1}, nullptr, lg, LogitRows::Last));
      (*cs)->commit_all();
      (*gs)->commit_all();
      if (diverged_at < 0) {
        const double e = rel_l2(lg, lc);
        out.worst = std::max(out.worst, e);
        worst_step = std::max(worst_step, e);
        EXPECT_LT(e, 2 * bound) << text << " step " << step;
        add();
      }
      tok_c = argmax(lc);
      tok_g = argmax(lg);
    }
    const double whole = std::sqrt(num / den);
    out.worst_prompt = std::max(out.worst_prompt, whole);
    EXPECT_LT(whole, bound) << text << ": prefill and decode steps together";
    if (diverged_at < 0) {
      ++out.identical;
    } else {
      std::printf("greedy diverges at step %d for \"%s\": CPU logit gap between CPU's and GPU's token %.4f\n",
                  diverged_at, text.c_str(), gap);
    }
    std::printf("prompt \"%.30s...\": rel L2 %.2e over the run, prefill %.2e, worst decode step %.2e, greedy %s\n",
                text.c_str(), whole, prefill_err, worst_step, diverged_at < 0 ? "identical (32 tokens)" : "diverged");
  }
  std::printf("greedy 32 tokens identical on %d of %d prompts; worst prompt rel L2 %.2e, worst single forward %.2e\n",
              out.identical, out.prompts, out.worst_prompt, out.worst);
  return out;
}

TEST_F(CudaBackendTest, PrefillAndDecodeLogitsAndGreedyTokensMatchCpu) {
  const auto result = compare_logits(
      *cuda_, *cpu_, [&](const std::string& t) { return encode(t); }, 1e-2);
  EXPECT_GE(result.identical * 2, result.prompts);
}

// The quantized file's own numbers (the CPU's f32 over the dequantized Q4_1 weights): rounding
// every weight to bf16 is a slightly different model. Bounded at 5e-2 (session 4 measured up to
// 3.05e-2 before the bf16 reference existed), and greedy must still agree on most prompts.
TEST_F(CudaBackendTest, LogitsStayCloseToTheQuantizedFilesF32Numbers) {
  CpuBackend file_numbers(*model_, CpuTransformerOptions{});
  const auto result = compare_logits(
      *cuda_, file_numbers, [&](const std::string& t) { return encode(t); }, 5e-2);
  EXPECT_GE(result.identical * 2, result.prompts);
}

// A KV cache over 512 rows splits each decode step's attention over several blocks
// (kernels/cuda/model_ops.h, AttentionSplit): a 700-token context, decode steps and a tree
// verify against the CPU.
TEST_F(CudaBackendTest, LongContextSplitAttentionMatchesCpu) {
  std::vector<int32_t> prompt = encode("The history of the city begins with a small fishing village. ");
  const std::vector<int32_t> sentence(prompt.begin() + 1, prompt.end());
  while (prompt.size() < 700) prompt.insert(prompt.end(), sentence.begin(), sentence.end());
  const int64_t V = cuda_->config().vocab_size;
  auto cs = cpu_->start(16, 1024);
  auto gs = cuda_->start(16, 1024);
  ASSERT_TRUE(cs && gs);
  std::vector<float> lc(V), lg(V);
  ASSERT_TRUE(prefill(**cs, prompt, lc) && prefill(**gs, prompt, lg));
  double worst = rel_l2(lg, lc);
  for (int step = 0; step < 8; ++step) {
    int32_t tok = argmax(lc), p = static_cast<int32_t>((*cs)->committed());
    ASSERT_TRUE((*cs)->forward({&tok, 1}, {&p, 1}, nullptr, lc, LogitRows::Last));
    ASSERT_TRUE((*gs)->forward({&tok, 1}, {&p, 1}, nullptr, lg, LogitRows::Last));
    (*cs)->commit_all();
    (*gs)->commit_all();
    worst = std::max(worst, rel_l2(lg, lc));
  }
  const int32_t n0 = static_cast<int32_t>((*cs)->committed());
  const std::vector<int32_t> tree_tokens = {argmax(lc), 1000, 2000, 3000};
  const std::vector<int32_t> tree_pos = {n0, n0 + 1, n0 + 1, n0 + 2};
  const auto mask = AttentionMask::from_parents(std::vector<int>{-1, 0, 0, 1});
  std::vector<float> ac(4 * V), ag(4 * V);
  ASSERT_TRUE((*cs)->forward(tree_tokens, tree_pos, &mask, ac, LogitRows::All));
  ASSERT_TRUE((*gs)->forward(tree_tokens, tree_pos, &mask, ag, LogitRows::All));
  worst = std::max(worst, rel_l2(ag, ac));
  std::printf("700-token context: worst rel L2 %.2e over the prefill, 8 decode steps and a tree verify\n", worst);
  EXPECT_LT(worst, 1e-2);
}

// A tree-masked multi-token forward, then a commit of one path, then a decode step: same
// logits as the CPU backend doing the same.
TEST_F(CudaBackendTest, TreeMaskedForwardAndCommitMatchCpu) {
  const auto prompt = encode("The quick brown fox jumps over the lazy dog. The quick brown");
  const int64_t V = cuda_->config().vocab_size;
  auto cs = cpu_->start(16, 256);
  auto gs = cuda_->start(16, 256);
  ASSERT_TRUE(cs && gs);
  std::vector<float> lc(V), lg(V);
  ASSERT_TRUE(prefill(**cs, prompt, lc) && prefill(**gs, prompt, lg));
  const int32_t n0 = static_cast<int32_t>(prompt.size());
  // Tree: 0 root; 1,2 children of 0; 3 child of 1; 4 child of 2.
  const std::vector<int> parents = {-1, 0, 0, 1, 2};
  const std::vector<int32_t> tree_tokens = {argmax(lc), 1000, 2000, 3000, 4000};
  const std::vector<int32_t> tree_pos = {n0, n0 + 1, n0 + 1, n0 + 2, n0 + 2};
  const auto mask = AttentionMask::from_parents(parents);
  std::vector<float> ac(5 * V), ag(5 * V);
  ASSERT_TRUE((*cs)->forward(tree_tokens, tree_pos, &mask, ac, LogitRows::All));
  ASSERT_TRUE((*gs)->forward(tree_tokens, tree_pos, &mask, ag, LogitRows::All));
  EXPECT_LT(rel_l2(ag, ac), 1e-2);
  const std::vector<int> keep = {0, 2, 4};
  ASSERT_TRUE((*cs)->commit(keep));
  ASSERT_TRUE((*gs)->commit(keep));
  EXPECT_EQ((*gs)->committed(), n0 + 3);
  int32_t tok = 42, p = n0 + 3;
  ASSERT_TRUE((*cs)->forward({&tok, 1}, {&p, 1}, nullptr, lc, LogitRows::Last));
  ASSERT_TRUE((*gs)->forward({&tok, 1}, {&p, 1}, nullptr, lg, LogitRows::Last));
  const double e = rel_l2(lg, lc);
  std::printf("tree forward + commit + decode: rel L2 %.2e\n", e);
  EXPECT_LT(e, 1e-2);
  // Rollback drops the provisional row: the same step again gives the same logits.
  (*gs)->rollback();
  std::vector<float> again(V);
  ASSERT_TRUE((*gs)->forward({&tok, 1}, {&p, 1}, nullptr, again, LogitRows::Last));
  EXPECT_LT(rel_l2(again, lg), 1e-6);
}

// A verify of a wide tree (24 and 40 rows: every projection on the stacked split halves, and the
// row ops between the GEMMs fused, CudaSession::enqueue_forward's split_ops; the products run on
// kernels/cuda/verify_gemm where the GPU is an sm_90, at 40 rows in two blocks of 64 stacked rows)
// against the CPU, all rows' logits and the last row's alone, then a commit of one path and a
// decode step.
TEST_F(CudaBackendTest, WideTreeVerifyMatchesCpu) {
  for (const int T : {24, 40}) expect_wide_tree_verify_matches_cpu(T);
}

void CudaBackendTest::expect_wide_tree_verify_matches_cpu(int T) {
  const auto prompt = encode("The quick brown fox jumps over the lazy dog. The quick brown");
  const int64_t V = cuda_->config().vocab_size;
  auto cs = cpu_->start(16, 256);
  auto gs = cuda_->start(16, 256);
  ASSERT_TRUE(cs && gs);
  std::vector<float> lc(V), lg(V);
  ASSERT_TRUE(prefill(**cs, prompt, lc) && prefill(**gs, prompt, lg));
  const int32_t n0 = static_cast<int32_t>(prompt.size());
  std::vector<int> parents(T, -1), depth(T, 0);
  std::vector<int32_t> tokens(T), pos(T);
  tokens[0] = argmax(lc);
  pos[0] = n0;
  for (int i = 1; i < T; ++i) {
    parents[i] = (i - 1) / 3;  // a 3-ary tree, BFS order
    depth[i] = depth[parents[i]] + 1;
    tokens[i] = 100 + 37 * i;
    pos[i] = n0 + depth[i];
  }
  const auto mask = AttentionMask::from_parents(parents);
  std::vector<float> ac(T * V), ag(T * V);
  ASSERT_TRUE((*cs)->forward(tokens, pos, &mask, ac, LogitRows::All));
  ASSERT_TRUE((*gs)->forward(tokens, pos, &mask, ag, LogitRows::All));
  const double all = rel_l2(ag, ac);
  (*gs)->rollback();
  ASSERT_TRUE((*gs)->forward(tokens, pos, &mask, lg, LogitRows::Last));
  const std::vector<float> last_cpu(ac.end() - V, ac.end());
  const double last = rel_l2(lg, last_cpu);
  const std::vector<int> keep = {0, 1, 4, 13};  // a root-to-leaf path
  ASSERT_TRUE((*cs)->commit(keep));
  ASSERT_TRUE((*gs)->commit(keep));
  int32_t tok = 42, p = n0 + 4;
  ASSERT_TRUE((*cs)->forward({&tok, 1}, {&p, 1}, nullptr, lc, LogitRows::Last));
  ASSERT_TRUE((*gs)->forward({&tok, 1}, {&p, 1}, nullptr, lg, LogitRows::Last));
  const double after = rel_l2(lg, lc);
  std::printf("%d-row tree verify: rel L2 %.2e all rows, %.2e last row, %.2e the decode step after a commit\n", T, all,
              last, after);
  EXPECT_LT(all, 1e-2);
  EXPECT_LT(last, 1e-2);
  EXPECT_LT(after, 1e-2);
}

// Every GEMM route a verify may take (CudaBackendOptions::layer_route, head_route: our f32 skinny
// kernel, our tensor-core kernel, cuBLAS's split halves on tuned cuBLASLt or on cublasGemmEx)
// keeps a 16-row chain verify's logits, every row's, within 1e-2 of the CPU's.
TEST_F(CudaBackendTest, EveryGemmRouteOfAVerifyMatchesCpu) {
  using Route = CudaBackendOptions::GemmRoute;
  const auto prompt = encode("The quick brown fox jumps over the lazy dog. The quick brown");
  const int64_t V = cuda_->config().vocab_size;
  const int T = 16;
  std::vector<int> parents(T);
  std::vector<int32_t> tokens(T), pos(T);
  for (int i = 0; i < T; ++i) {
    parents[i] = i - 1;
    tokens[i] = 200 + 31 * i;
    pos[i] = static_cast<int32_t>(prompt.size()) + i;
  }
  const auto mask = AttentionMask::from_parents(parents);
  auto cs = cpu_->start(16, 256);
  ASSERT_TRUE(cs);
  std::vector<float> lc(V), ac(T * V);
  ASSERT_TRUE(prefill(**cs, prompt, lc));
  ASSERT_TRUE((*cs)->forward(tokens, pos, &mask, ac, LogitRows::All));
  const struct {
    Route route;
    bool lt;
    const char* name;
  } variants[] = {{Route::kSkinny, false, "skinny f32"},
                  {Route::kTensorCore, false, "tensor-core"},
                  {Route::kCublas, true, "cuBLASLt split halves"},
                  {Route::kCublas, false, "cublasGemmEx split halves"}};
  for (const auto& v : variants) {
    CudaBackendOptions options;
    options.layer_route = v.route;
    options.head_route = v.route;
    options.cublaslt_tuned = v.lt;
    auto backend = make_cuda_backend(*model_, options);
    ASSERT_TRUE(backend) << backend.error().message;
    auto gs = (*backend)->start(16, 256);
    ASSERT_TRUE(gs);
    std::vector<float> lg(V), ag(T * V);
    ASSERT_TRUE(prefill(**gs, prompt, lg));
    // Twice: the first forward of a shape runs launched (cuBLASLt tunes), the second its graph.
    for (int pass = 0; pass < 2; ++pass) {
      ASSERT_TRUE((*gs)->forward(tokens, pos, &mask, ag, LogitRows::All));
      (*gs)->rollback();
      const double e = rel_l2(ag, ac);
      std::printf("%s: 16-row verify rel L2 %.2e (pass %d)\n", v.name, e, pass);
      EXPECT_LT(e, 1e-2) << v.name;
    }
  }
}

// Decode steps and tree verifies replayed from captured CUDA graphs give the same logits, bit for
// bit, as the same kernels launched one by one: across two tree forwards of one shape with
// different masks, commits, a rollback,
// and a second session on the same backend (whose larger prefill moves the shared scratch, so
// the first session's graph must be captured again).
TEST_F(CudaBackendTest, DecodeGraphReplaysTheLaunchedKernelsExactly) {
  CudaBackendOptions no_graphs;
  no_graphs.cuda_graphs = false;
  auto plain = make_cuda_backend(*model_, no_graphs);
  ASSERT_TRUE(plain) << plain.error().message;
  const int64_t V = cuda_->config().vocab_size;
  auto run = [&](CudaBackend& backend, std::vector<float>& trace) {
    auto a = backend.start(16, 256);
    auto second = backend.start(16, 256);
    ASSERT_TRUE(a && second);
    const auto prompt = encode("The quick brown fox jumps over the lazy dog.");
    std::vector<int32_t> pos(prompt.size());
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<float> l(V);
    ASSERT_TRUE((*a)->forward(prompt, pos, nullptr, l, LogitRows::Last));
    (*a)->commit_all();
    int32_t tok = argmax(l);
    for (int step = 0; step < 24; ++step) {
      int32_t p = static_cast<int32_t>((*a)->committed());
      // A 3-node tree at step 8 (keep the root and one child), and the same shape with another
      // mask at step 10 (a chain, all kept): the graph must read the new mask.
      if (step == 8 || step == 10) {
        const bool chain = step == 10;
        const std::vector<int32_t> toks = {tok, chain ? 700 : 500, chain ? 800 : 600};
        const std::vector<int32_t> tpos = {p, p + 1, chain ? p + 2 : p + 1};
        const auto mask = AttentionMask::from_parents(std::vector<int>{-1, 0, chain ? 1 : 0});
        std::vector<float> all(3 * V);
        ASSERT_TRUE((*a)->forward(toks, tpos, &mask, all, LogitRows::All));
        ASSERT_TRUE((*a)->commit(chain ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 2}));
        trace.insert(trace.end(), all.begin(), all.end());
        tok = argmax(all, 2 * V, V);
        continue;
      }
      if (step == 12) {  // a longer prefill elsewhere grows the shared scratch
        std::vector<int32_t> long_prompt(40, 1000), long_pos(40);
        std::iota(long_pos.begin(), long_pos.end(), 0);
        ASSERT_TRUE((*second)->forward(long_prompt, long_pos, nullptr, l, LogitRows::Last));
        (*second)->commit_all();
      }
      ASSERT_TRUE((*a)->forward({&tok, 1}, {&p, 1}, nullptr, l, LogitRows::Last));
      if (step == 16) {  // rollback, then the same step again
        (*a)->rollback();
        ASSERT_TRUE((*a)->forward({&tok, 1}, {&p, 1}, nullptr, l, LogitRows::Last));
      }
      (*a)->commit_all();
      trace.insert(trace.end(), l.begin(), l.end());
      tok = argmax(l);
    }
  };
  std::vector<float> with_graph, without, plain_launches;
  run(*cuda_, with_graph);
  run(**plain, without);
  // And without programmatic dependent launch (kernels/cuda/pdl.cuh): the overlap must not let a
  // kernel read anything early.
  cuda::set_programmatic_dependent_launch(false);
  run(**plain, plain_launches);
  cuda::set_programmatic_dependent_launch(true);
  ASSERT_EQ(with_graph.size(), without.size());
  ASSERT_EQ(with_graph.size(), plain_launches.size());
  size_t differing = 0, differing_pdl = 0;
  for (size_t i = 0; i < with_graph.size(); ++i) {
    differing += with_graph[i] != without[i];
    differing_pdl += without[i] != plain_launches[i];
  }
  EXPECT_EQ(differing, 0u) << "of " << with_graph.size() << " logits";
  EXPECT_EQ(differing_pdl, 0u) << "of " << with_graph.size() << " logits, with and without programmatic launch";
}

// A finished session's KV memory and graphs go to the next session that fits (SpareKv): its
// logits must be the bits a session on a fresh backend computes, although the memory still holds
// the last sequence's longer rows and the graphs were captured by another session.
TEST_F(CudaBackendTest, NextSessionTakesOverKvAndGraphsWithTheSameLogits) {
  const int64_t V = cuda_->config().vocab_size;
  // Prefill, 6 decode steps with a 3-node verify after the third; every logit in order.
  auto run = [&](CudaBackend& backend, const std::string& text, int64_t capacity, int64_t* graphs_at_start) {
    std::vector<float> trace;
    auto s = backend.start(16, capacity);
    EXPECT_TRUE(s);
    if (!s) return trace;
    *graphs_at_start = cuda_session_graph_count(**s);
    std::vector<float> l(V);
    if (!prefill(**s, encode(text), l)) return trace;
    trace = l;
    int32_t tok = argmax(l);
    for (int step = 0; step < 6; ++step) {
      int32_t p = static_cast<int32_t>((*s)->committed());
      if (step == 3) {
        const std::vector<int32_t> toks = {tok, 500, 600}, tpos = {p, p + 1, p + 1};
        const auto mask = AttentionMask::from_parents(std::vector<int>{-1, 0, 0});
        std::vector<float> all(3 * V);
        EXPECT_TRUE((*s)->forward(toks, tpos, &mask, all, LogitRows::All));
        EXPECT_TRUE((*s)->commit(std::vector<int>{0, 2}));
        trace.insert(trace.end(), all.begin(), all.end());
        tok = argmax(all, 2 * V, V);
        continue;
      }
      EXPECT_TRUE((*s)->forward({&tok, 1}, {&p, 1}, nullptr, l, LogitRows::Last));
      (*s)->commit_all();
      trace.insert(trace.end(), l.begin(), l.end());
      tok = argmax(l);
    }
    return trace;
  };
  auto fresh = [&](const std::string& text, int64_t capacity) {
    auto backend = make_cuda_backend(*model_, CudaBackendOptions{});
    EXPECT_TRUE(backend) << backend.error().message;
    int64_t graphs = 0;
    return backend ? run(**backend, text, capacity, &graphs) : std::vector<float>{};
  };
  const std::string a = "The history of the printing press begins in the fifteenth century, when movable type "
                        "changed how books were made and who could read them.",
                    b = "Water boils at", c = "List three primary colours:";
  auto own = make_cuda_backend(*model_, CudaBackendOptions{});
  ASSERT_TRUE(own) << own.error().message;
  int64_t graphs_a = 0, graphs_b = 0, graphs_c = 0;
  run(**own, a, 400, &graphs_a);
  const auto trace_b = run(**own, b, 300, &graphs_b);   // fits A's 512 rows: takes them over
  const auto trace_c = run(**own, c, 4096, &graphs_c);  // does not fit: new memory, no graphs
  EXPECT_EQ(graphs_a, 0);
  EXPECT_GE(graphs_b, 2) << "the decode and the 3-row verify graphs of the session before";
  EXPECT_EQ(graphs_c, 0);
  const auto want_b = fresh(b, 300), want_c = fresh(c, 4096);
  ASSERT_EQ(trace_b.size(), want_b.size());
  ASSERT_EQ(trace_c.size(), want_c.size());
  EXPECT_EQ(std::memcmp(trace_b.data(), want_b.data(), trace_b.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(trace_c.data(), want_c.data(), trace_c.size() * sizeof(float)), 0);
}

TEST_F(CudaBackendTest, BadInputIsAnErrorNotACrash) {
  auto gs = cuda_->start(16, 8);
  ASSERT_TRUE(gs);
  const int64_t V = cuda_->config().vocab_size;
  std::vector<float> l(V);
  std::vector<int32_t> toks(9, 1), pos(9);
  std::iota(pos.begin(), pos.end(), 0);
  EXPECT_FALSE((*gs)->forward(toks, pos, nullptr, std::span<float>(l), LogitRows::Last));  // over capacity
  int32_t bad = static_cast<int32_t>(V), p0 = 0;
  EXPECT_FALSE((*gs)->forward({&bad, 1}, {&p0, 1}, nullptr, l, LogitRows::Last));
  EXPECT_FALSE(cuda_->start(3, 16));
}

// A chain verify's rows are a decode step's arithmetic: verifying T tokens under a chain mask
// (T = 2..16, the row counts whose projections stay on the f32 skinny kernel, and whose
// attention is attention_kernel, decode attention's bit-for-bit twin) gives row i the very bits
// of the decode step that feeds the same tokens one at a time. That is what makes greedy
// speculation on the GPU pick what plain greedy decoding picks by construction
// (engine_cuda_cuda_speculative_test checks the outcome on its prompts; cuBLAS's split halves
// from 7 rows had flipped two of its near-ties). The same check with every verify GEMM forced
// onto cuBLAS must find differing rows, or it could not have caught that.
TEST_F(CudaBackendTest, ChainVerifyRowsEqualDecodeStepsBitForBit) {
  const auto prompt = encode("The quick brown fox jumps over the lazy dog. The quick brown");
  const int64_t V = cuda_->config().vocab_size;
  const int32_t n0 = static_cast<int32_t>(prompt.size());
  // Rows of T-row chain verifies (T in 2, 5, 8, 11, 16) whose logits differ in any bit from
  // the decode step's.
  auto differing_rows = [&](TransformerBackend& backend, const char* label) {
    int differing = 0;
    auto gs = backend.start(16, 256);
    EXPECT_TRUE(gs);
    if (!gs) return -1;
    std::vector<float> last(V);
    if (!prefill(**gs, prompt, last)) return -1;
    for (int T : {2, 5, 8, 11, 16}) {
      std::vector<int32_t> tokens(T), pos(T);
      std::vector<int> parents(T);
      for (int i = 0; i < T; ++i) {
        tokens[i] = prompt[static_cast<size_t>(i) % prompt.size()] + 7 * i;  // any ids: bits are compared
        pos[i] = n0 + i;
        parents[i] = i - 1;
      }
      const auto mask = AttentionMask::from_parents(parents);
      std::vector<float> rows(static_cast<size_t>(T * V));
      EXPECT_TRUE((*gs)->forward(tokens, pos, &mask, rows, LogitRows::All));
      (*gs)->rollback();
      for (int i = 0; i < T; ++i) {
        std::vector<float> step(V);
        EXPECT_TRUE((*gs)->forward({&tokens[i], 1}, {&pos[i], 1}, nullptr, step, LogitRows::Last));
        (*gs)->commit_all();
        const std::vector<float> row(rows.begin() + i * V, rows.begin() + (i + 1) * V);
        if (std::memcmp(step.data(), row.data(), V * sizeof(float)) != 0) {
          ++differing;
          std::printf("%s: %d-row verify, row %d: rel L2 %.2e to the decode step\n", label, T, i, rel_l2(step, row));
        }
      }
      EXPECT_TRUE((*gs)->truncate(n0));
    }
    return differing;
  };
  EXPECT_EQ(differing_rows(*cuda_, "default routes"), 0);
  CudaBackendOptions cublas;
  cublas.layer_route = cublas.head_route = CudaBackendOptions::GemmRoute::kCublas;
  auto forced = make_cuda_backend(*model_, cublas);
  ASSERT_TRUE(forced) << forced.error().message;
  EXPECT_GT(differing_rows(**forced, "cuBLAS forced"), 0);
}

}  // namespace
}  // namespace specula

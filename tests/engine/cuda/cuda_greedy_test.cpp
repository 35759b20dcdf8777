// CudaSession::forward_greedy and forward_top_k on the default model against forward() and a
// host scan of its logits: a prefill's last row, decode steps and a tree verify's rows give the
// same ids as argmax_f32; the top-k gives apply_sampling_filters' most probable tokens with its
// probabilities to float rounding. Prints "skipped: no GPU" without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "engine/spec/sampling_filters.h"
#include "kernels/cpu/activation.h"
#include "tests/engine/cuda/cuda_test_support.h"

namespace specula {
namespace {

class CudaGreedy : public testing::DefaultModelOnGpu {};

std::vector<int32_t> host_argmax_rows(const std::vector<float>& logits, size_t vocab) {
  std::vector<int32_t> ids(logits.size() / vocab);
  for (size_t r = 0; r < ids.size(); ++r) {
    ids[r] = static_cast<int32_t>(argmax_f32(logits.data() + r * vocab, static_cast<int64_t>(vocab)));
  }
  return ids;
}

TEST_F(CudaGreedy, GreedyIdsEqualHostArgmaxOfTheLogits) {
  const auto V = static_cast<size_t>(cuda_->config().vocab_size);
  auto a = cuda_->start(16, 512), b = cuda_->start(16, 512);
  ASSERT_TRUE(a && b);
  std::vector<int32_t> prompt = model_->tokenizer.encode("The capital of France is", false);
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> logits(V);
  ASSERT_TRUE((*a)->forward(prompt, pos, nullptr, logits, LogitRows::Last));
  int32_t greedy = -1;
  ASSERT_TRUE((*b)->forward_greedy(prompt, pos, nullptr, {&greedy, 1}, LogitRows::Last));
  EXPECT_EQ(greedy, host_argmax_rows(logits, V)[0]) << "prefill, last row";
  (*a)->commit_all();
  (*b)->commit_all();
  // Decode steps (graph replays from the second on).
  int32_t token = greedy;
  for (int step = 0; step < 24; ++step) {
    const auto p = static_cast<int32_t>((*a)->committed());
    ASSERT_TRUE((*a)->forward({&token, 1}, {&p, 1}, nullptr, logits, LogitRows::Last));
    ASSERT_TRUE((*b)->forward_greedy({&token, 1}, {&p, 1}, nullptr, {&greedy, 1}, LogitRows::Last));
    ASSERT_EQ(greedy, host_argmax_rows(logits, V)[0]) << "decode step " << step;
    (*a)->commit_all();
    (*b)->commit_all();
    token = greedy;
  }
  // Tree verifies of 5 and 61 rows (graph replays), all rows.
  for (int T : {5, 61}) {
    std::vector<int32_t> tokens(static_cast<size_t>(T)), tpos(static_cast<size_t>(T));
    std::vector<int> parents(static_cast<size_t>(T));
    const auto P = static_cast<int32_t>((*a)->committed());
    for (int i = 0; i < T; ++i) {
      tokens[static_cast<size_t>(i)] = i == 0 ? token : 1000 + 37 * i;
      parents[static_cast<size_t>(i)] = i == 0 ? -1 : (i - 1) / 3;  // three children a node
      int depth = 0;
      for (int q = parents[static_cast<size_t>(i)]; q >= 0; q = parents[static_cast<size_t>(q)]) ++depth;
      tpos[static_cast<size_t>(i)] = P + depth;
    }
    const auto mask = AttentionMask::from_parents(parents);
    std::vector<float> all(static_cast<size_t>(T) * V);
    std::vector<int32_t> rows(static_cast<size_t>(T));
    for (int rep = 0; rep < 2; ++rep) {
      ASSERT_TRUE((*a)->forward(tokens, tpos, &mask, all, LogitRows::All));
      ASSERT_TRUE((*b)->forward_greedy(tokens, tpos, &mask, rows, LogitRows::All));
      EXPECT_EQ(rows, host_argmax_rows(all, V)) << T << " rows, rep " << rep;
      (*a)->rollback();
      (*b)->rollback();
    }
  }
}

TEST_F(CudaGreedy, TopKEqualsSamplingFiltersOfTheLogits) {
  const auto V = static_cast<size_t>(cuda_->config().vocab_size);
  auto a = cuda_->start(16, 512), b = cuda_->start(16, 512);
  ASSERT_TRUE(a && b);
  std::vector<int32_t> prompt = model_->tokenizer.encode("Once upon a time, a robot", false);
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> logits(V);
  ASSERT_TRUE((*a)->forward(prompt, pos, nullptr, logits, LogitRows::Last));
  for (float temperature : {1.0f, 0.8f}) {
    std::vector<int32_t> ids(8);
    std::vector<float> probs(8);
    ASSERT_TRUE((*b)->forward_top_k(prompt, pos, nullptr, temperature, ids, probs));
    (*b)->rollback();
    const auto q = apply_sampling_filters(logits, SamplingParams{temperature, 0, 1.0f, 0});
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return logits[x] > logits[y]; });
    for (size_t j = 0; j < ids.size(); ++j) {
      EXPECT_EQ(ids[j], order[j]) << "temperature " << temperature << " rank " << j;
      const float want = q[static_cast<size_t>(order[j])];
      EXPECT_NEAR(probs[j], want, 1e-5f * want + 1e-12f) << "temperature " << temperature << " rank " << j;
    }
  }
}

}  // namespace
}  // namespace specula

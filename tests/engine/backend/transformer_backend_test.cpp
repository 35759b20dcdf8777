// BackendSession::forward_greedy and forward_top_k against forward() and a host scan: on the CPU
// backend over a real (tiny) model for a decode step, a prefill's last row and a tree verify's
// rows, and on a session with chosen logits for exact ties, NaN and -inf.
#include "engine/backend/transformer_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/spec/sampling_filters.h"
#include "kernels/cpu/activation.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(SPECULA_TEST_DATA_DIR) / "hf/tiny-llama-f16";

std::vector<int32_t> host_argmax_rows(const std::vector<float>& logits, size_t vocab) {
  std::vector<int32_t> ids(logits.size() / vocab);
  for (size_t r = 0; r < ids.size(); ++r) {
    ids[r] = static_cast<int32_t>(argmax_f32(logits.data() + r * vocab, static_cast<int64_t>(vocab)));
  }
  return ids;
}

class CpuBackendChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = load_model(kTiny);
    ASSERT_TRUE(m) << m.error().message;
    model_ = std::make_unique<Model>(std::move(*m));
    backend_ = std::make_unique<CpuBackend>(*model_, CpuTransformerOptions{1, Precision::Default});
    V_ = static_cast<size_t>(model_->config.vocab_size);
  }
  std::unique_ptr<BackendSession> start() {
    auto s = backend_->start(16, 256);
    EXPECT_TRUE(s) << s.error().message;
    return std::move(*s);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<CpuBackend> backend_;
  size_t V_ = 0;
};

TEST_F(CpuBackendChoice, GreedyEqualsHostArgmaxOfForward) {
  // Two sessions fed the same tokens: one through forward(), one through forward_greedy().
  auto a = start(), b = start();
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 7, 250};
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> logits(V_);
  ASSERT_TRUE(a->forward(prompt, pos, nullptr, logits, LogitRows::Last));
  int32_t greedy = -1;
  ASSERT_TRUE(b->forward_greedy(prompt, pos, nullptr, {&greedy, 1}, LogitRows::Last));
  EXPECT_EQ(greedy, host_argmax_rows(logits, V_)[0]) << "prefill, last row";
  a->commit_all();
  b->commit_all();

  // Decode steps.
  int32_t token = greedy;
  for (int step = 0; step < 4; ++step) {
    const auto p = static_cast<int32_t>(a->committed());
    ASSERT_TRUE(a->forward({&token, 1}, {&p, 1}, nullptr, logits, LogitRows::Last));
    ASSERT_TRUE(b->forward_greedy({&token, 1}, {&p, 1}, nullptr, {&greedy, 1}, LogitRows::Last));
    EXPECT_EQ(greedy, host_argmax_rows(logits, V_)[0]) << "decode step " << step;
    a->commit_all();
    b->commit_all();
    token = greedy;
  }

  // A tree verify: the pending token, two children, a grandchild under each.
  const std::vector<int32_t> tokens = {token, 5, 6, 300, 301};
  const auto P = static_cast<int32_t>(a->committed());
  const std::vector<int32_t> tpos = {P, P + 1, P + 1, P + 2, P + 2};
  const auto mask = AttentionMask::from_parents(std::vector<int>{-1, 0, 0, 1, 2});
  std::vector<float> all(tokens.size() * V_);
  ASSERT_TRUE(a->forward(tokens, tpos, &mask, all, LogitRows::All));
  std::vector<int32_t> rows(tokens.size());
  ASSERT_TRUE(b->forward_greedy(tokens, tpos, &mask, rows, LogitRows::All));
  EXPECT_EQ(rows, host_argmax_rows(all, V_));

  // The wrong number of ids is an error that names both counts.
  std::vector<int32_t> short_rows(2);
  b->rollback();
  const auto wrong = b->forward_greedy(tokens, tpos, &mask, short_rows, LogitRows::All);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("room for 2 tokens, the forward gives 5"), std::string::npos)
      << wrong.error().message;
}

TEST_F(CpuBackendChoice, TopKEqualsSamplingFiltersOfForward) {
  auto a = start(), b = start();
  const std::vector<int32_t> prompt = {1, 17, 42, 99};
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> logits(V_);
  ASSERT_TRUE(a->forward(prompt, pos, nullptr, logits, LogitRows::Last));
  for (float temperature : {1.0f, 0.7f}) {
    std::vector<int32_t> ids(5);
    std::vector<float> probs(5);
    ASSERT_TRUE(b->forward_top_k(prompt, pos, nullptr, temperature, ids, probs));
    b->rollback();
    const auto q = apply_sampling_filters(logits, SamplingParams{temperature, 0, 1.0f, 0});
    std::vector<int32_t> order(V_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return q[x] > q[y]; });
    for (size_t j = 0; j < ids.size(); ++j) {
      EXPECT_EQ(ids[j], order[j]) << "temperature " << temperature << " rank " << j;
      EXPECT_EQ(probs[j], q[static_cast<size_t>(order[j])]) << "temperature " << temperature << " rank " << j;
    }
  }
}

// A session whose forward() writes chosen logits: the default forward_greedy / forward_top_k
// see exactly these rows.
class FixedLogitsSession final : public BackendSession {
 public:
  explicit FixedLogitsSession(std::vector<std::vector<float>> rows) : rows_(std::move(rows)) {}
  Status forward(std::span<const int32_t> tokens, std::span<const int32_t>, const AttentionMask*,
                 std::span<float> logits, LogitRows rows, const ForwardContext*) override {
    const size_t V = rows_[0].size();
    const size_t n = rows == LogitRows::All ? tokens.size() : 1;
    for (size_t r = 0; r < n; ++r) std::copy(rows_[r].begin(), rows_[r].end(), logits.begin() + r * V);
    return {};
  }
  Status commit(std::span<const int>) override { return {}; }
  void commit_all() override {}
  void rollback() override {}
  Status truncate(int64_t) override { return {}; }
  int64_t committed() const override { return 0; }
  int64_t capacity() const override { return 8; }
  int64_t vocab_size() const override { return static_cast<int64_t>(rows_[0].size()); }

 private:
  std::vector<std::vector<float>> rows_;
};

TEST(BackendSessionDefaults, TiesGoToTheLowestIdNanNeverWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  FixedLogitsSession s({{0.5f, 2.0f, -1.0f, 2.0f, 2.0f, 0.0f},   // exact tie at 1, 3, 4
                        {nan, 9.0f, 1.0f, 1.0f, 0.0f, 0.0f},     // a leading NaN gives 0
                        {1.0f, nan, 3.0f, nan, 3.0f, -inf},      // NaN skipped; tie 2, 4
                        {-inf, -inf, -inf, -inf, -inf, -inf}});  // all -inf: the first
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const std::vector<int32_t> pos = {0, 1, 2, 3};
  std::vector<int32_t> ids(4);
  ASSERT_TRUE(s.forward_greedy(tokens, pos, nullptr, ids, LogitRows::All));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0, 2, 0}));
  int32_t last = -1;
  ASSERT_TRUE(s.forward_greedy(tokens, pos, nullptr, {&last, 1}, LogitRows::Last));
  EXPECT_EQ(last, 1);

  // Top-3 of row 0 at temperature 1: the tie in id order, each e^2 / sum.
  std::vector<int32_t> top(3);
  std::vector<float> probs(3);
  ASSERT_TRUE(s.forward_top_k(tokens, pos, nullptr, 1.0f, top, probs));
  EXPECT_EQ(top, (std::vector<int32_t>{1, 3, 4}));
  const auto q =
      apply_sampling_filters(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f, 2.0f, 0.0f}, SamplingParams{1.0f, 0, 1.0f, 0});
  for (size_t j = 0; j < 3; ++j) EXPECT_EQ(probs[j], q[static_cast<size_t>(top[j])]);
  EXPECT_FALSE(s.forward_top_k(tokens, pos, nullptr, 0.0f, top, probs));  // temperature must be > 0
}

}  // namespace
}  // namespace specula

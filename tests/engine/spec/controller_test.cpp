// Break-even controller on synthetic timings: falls back when speculation costs more per token
// than plain decoding, probes back, backs off, and stays when it pays.
#include "engine/spec/controller.h"

#include <gtest/gtest.h>

namespace specula {
namespace {

TEST(BreakEvenController, MeasuresPlainFirstThenSpeculates) {
  BreakEvenController c;
  EXPECT_FALSE(c.speculate());
  c.record_plain(10);
  EXPECT_TRUE(c.speculate());
  EXPECT_DOUBLE_EQ(c.plain_ms_per_token(), 10);
}

TEST(BreakEvenController, PlainWarmupStepsAreNotMeasured) {
  ControllerOptions o;
  o.plain_warmup = 1;
  BreakEvenController c(o);
  c.record_plain(90);  // a first GPU step that captured its CUDA graph
  EXPECT_FALSE(c.speculate());
  EXPECT_EQ(c.plain_ms_per_token(), 0);
  c.record_plain(1);
  EXPECT_TRUE(c.speculate());
  EXPECT_DOUBLE_EQ(c.plain_ms_per_token(), 1);
  // Against the measured 1 ms, 2 ms per token does not pay (against 90 it would have).
  for (int i = 0; i < 3; ++i) c.record_speculative(2, 1, 3);
  EXPECT_FALSE(c.speculate());
  EXPECT_EQ(c.fallbacks(), 1);
}

TEST(BreakEvenController, StaysWhileItPays) {
  BreakEvenController c;
  c.record_plain(10);
  for (int i = 0; i < 20; ++i) c.record_speculative(3, 2, 13);  // 5 ms per token
  EXPECT_TRUE(c.speculate());
  EXPECT_TRUE(c.pays());
  EXPECT_EQ(c.fallbacks(), 0);
  EXPECT_DOUBLE_EQ(c.speculative_ms_per_token(), 5);
}

TEST(BreakEvenController, FallsBackProbesAndBacksOff) {
  ControllerOptions o;
  o.warmup = 2;
  o.probe_after = 3;
  BreakEvenController c(o);
  c.record_plain(10);
  c.record_speculative(1, 5, 15);  // 20 ms per token: worse than plain
  EXPECT_TRUE(c.speculate());      // still warming up
  c.record_speculative(1, 5, 15);
  EXPECT_FALSE(c.speculate());
  EXPECT_EQ(c.fallbacks(), 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(c.speculate());
    c.record_plain(10);
  }
  EXPECT_TRUE(c.speculate());  // probing
  EXPECT_EQ(c.returns(), 1);
  c.record_speculative(1, 5, 15);
  c.record_speculative(1, 5, 15);
  EXPECT_EQ(c.fallbacks(), 2);
  int plain_steps = 0;
  while (!c.speculate()) {
    c.record_plain(10);
    ++plain_steps;
  }
  EXPECT_EQ(plain_steps, 6);  // the wait doubled
  // This time it pays (4 tokens in 12 ms): no further fallback, wait reset.
  for (int i = 0; i < 10; ++i) c.record_speculative(4, 2, 10);
  EXPECT_TRUE(c.speculate());
  EXPECT_EQ(c.fallbacks(), 2);
  EXPECT_EQ(c.returns(), 2);
}

// Rounds alternate: 1 token in 6 ms, 3 tokens in 7 ms: 13 ms for 4 tokens, 3.25 ms per token,
// which beats 4 ms plain. Averaging the per-round ratios (6 and 2.33 ms) would say 4.2 ms and
// give up on speculation that pays.
TEST(BreakEvenController, WeighsRoundsByTheTokensTheyEmit) {
  BreakEvenController c;
  c.record_plain(4);
  for (int i = 0; i < 20; ++i) {
    c.record_speculative(1, 0, 6);
    c.record_speculative(3, 0, 7);
  }
  EXPECT_EQ(c.fallbacks(), 0);
  EXPECT_TRUE(c.speculate());
  EXPECT_NEAR(c.speculative_ms_per_token(), 3.25, 0.3);
  // And the opposite: 1 token in 6 ms, 2 tokens in 12 ms is 6 ms per token, worse than 4.
  BreakEvenController d;
  d.record_plain(4);
  for (int i = 0; i < 4; ++i) {
    d.record_speculative(1, 0, 6);
    d.record_speculative(2, 0, 12);
  }
  EXPECT_GE(d.fallbacks(), 1);
}

TEST(BreakEvenController, ACarriedControllerKeepsItsFallbackAcrossSequences) {
  ControllerOptions o;
  o.warmup = 2;
  o.probe_after = 4;
  BreakEvenController c(o);
  c.record_plain(10);
  c.record_speculative(1, 5, 15);
  c.record_speculative(1, 5, 15);  // 20 ms per token: falls back for 4 plain steps
  ASSERT_FALSE(c.speculate());
  c.record_plain(10);  // 3 plain steps left
  // The next sequence: its first plain step (a new session's graph capture) is not measured, and
  // the fallback and its countdown carry over instead of a fresh warmup stint.
  c.begin_sequence(1);
  EXPECT_FALSE(c.speculate());
  c.record_plain(500);
  EXPECT_DOUBLE_EQ(c.plain_ms_per_token(), 10);
  EXPECT_FALSE(c.speculate());
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(c.speculate());
    c.record_plain(10);
  }
  EXPECT_TRUE(c.speculate());  // the probe comes after the 4 plain steps of the first fallback
  EXPECT_EQ(c.fallbacks(), 1);
  EXPECT_EQ(c.returns(), 1);
}

TEST(BreakEvenController, DisabledAlwaysSpeculates) {
  ControllerOptions o;
  o.enabled = false;
  BreakEvenController c(o);
  EXPECT_TRUE(c.speculate());
  for (int i = 0; i < 10; ++i) c.record_speculative(1, 50, 50);
  EXPECT_TRUE(c.speculate());
  EXPECT_EQ(c.fallbacks(), 0);
}

}  // namespace
}  // namespace specula

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

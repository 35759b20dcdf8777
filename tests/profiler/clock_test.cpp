#include "profiler/clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace specula::profiler {
namespace {

TEST(MonotonicClock, AdvancesAcrossASleep) {
  const int64_t a = monotonic_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int64_t b = monotonic_ns();
  EXPECT_GE(b - a, 2'000'000);
  EXPECT_GT(a, 0);
}

}  // namespace
}  // namespace specula::profiler

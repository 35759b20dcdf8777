#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

namespace specula {
namespace {

TEST(ThreadPool, EveryIndexRunsOncePerRun) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.size(), n);
    for (int round = 0; round < 2000; ++round) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run([&](int index, int count) {
        EXPECT_EQ(count, n);
        hits[static_cast<size_t>(index)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
    }
  }
}

TEST(ThreadPool, WakesAfterSleeping) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // longer than the spin: workers sleep
    pool.run([&](int index, int) { total.fetch_add(index + 1); });
  }
  EXPECT_EQ(total.load(), 3 * (1 + 2 + 3));
}

TEST(ThreadPool, SplitCoversRangeInGrains) {
  for (int64_t n : {0, 1, 7, 64, 1001}) {
    for (int threads : {1, 2, 3}) {
      int64_t next = 0;
      for (int i = 0; i < threads; ++i) {
        int64_t begin, end;
        ThreadPool::split(n, 4, i, threads, begin, end);
        EXPECT_EQ(begin, next);
        EXPECT_LE(begin, end);
        if (end < n) {
          EXPECT_EQ((end - begin) % 4, 0);
        }
        next = end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

}  // namespace
}  // namespace specula

#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace specula {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// How long an idle thread waits actively before it sleeps: long enough to bridge the serial
// gaps between the parallel regions of one forward pass, short enough not to burn a shared
// core between requests. After the first few microseconds of pure spinning it yields on every
// check, so when the machine is oversubscribed (more runnable threads than cores) the thread
// we wait for gets the core instead of losing a whole scheduler slice to our spinning.
constexpr auto kPureSpinFor = std::chrono::microseconds(20);
constexpr auto kWaitFor = std::chrono::microseconds(300);

template <class Done>
bool spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  bool yielding = false;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (yielding) {
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
    if ((i & 63) == 63) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > kWaitFor) return false;
      yielding = waited > kPureSpinFor;
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(n_threads - 1);
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::split(int64_t n, int64_t grain, int index, int n_threads, int64_t& begin, int64_t& end) {
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / n_threads, extra = units % n_threads;
  const int64_t first = index * per + std::min<int64_t>(index, extra);
  const int64_t count = per + (index < extra ? 1 : 0);
  begin = std::min(n, first * grain);
  end = std::min(n, (first + count) * grain);
}

void ThreadPool::run_erased(Task task, void* ctx) {
  task_ = task;
  ctx_ = ctx;
  pending_.store(n_threads_ - 1);
  generation_.fetch_add(1);  // seq_cst: pairs with the sleepers_ check in worker_loop
  if (sleepers_.load() > 0) {
    { std::lock_guard lock(mutex_); }
    wake_.notify_all();
  }
  task(ctx, 0, n_threads_);
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lock(mutex_);
    caller_sleeping_.store(true);
    done_.wait(lock, [&] { return pending_.load() == 0; });
    caller_sleeping_.store(false);
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    task_(ctx_, index, n_threads_);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      { std::lock_guard lock(mutex_); }
      done_.notify_one();
    }
  }
}

}  // namespace specula

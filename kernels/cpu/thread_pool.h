#pragma once
// A small persistent thread pool for the CPU forward pass.
//
// Why hand-written: a decode step runs ~300 short parallel regions (a few microseconds
// each), so waking workers through a condition variable per region (~5-20 us) would cost
// more than the work. Workers spin briefly on an atomic generation counter and only then
// sleep on a condition variable; the caller runs share 0 itself. std::async / a task queue
// would allocate per region; OpenMP is not a dependency of this project.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace specula {

class ThreadPool {
 public:
  // n_threads counts the calling thread; <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on every thread (index 0 on the caller) and returns
  // when all have finished. Not reentrant: fn must not call run() on the same pool.
  template <class Fn>
  void run(Fn&& fn) {
    if (n_threads_ == 1) {
      fn(0, 1);
      return;
    }
    run_erased([](void* ctx, int i, int n) { (*static_cast<Fn*>(ctx))(i, n); }, &fn);
  }

  // Splits [0, n) into n_threads contiguous chunks, each a multiple of `grain` (except the last).
  static void split(int64_t n, int64_t grain, int index, int n_threads, int64_t& begin, int64_t& end);

 private:
  using Task = void (*)(void*, int, int);
  void run_erased(Task task, void* ctx);
  void worker_loop(int index);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  Task task_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per run(); workers wait for a change
  std::atomic<int> pending_{0};          // workers still running the current task
  std::atomic<int> sleepers_{0};         // workers blocked on wake_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;  // workers: a new generation (or stop)
  std::condition_variable done_;  // caller: pending_ reached 0
};

}  // namespace specula

#pragma once
// Recorder: the engine observer that writes a session database. on_event() only copies the
// event into a queue (a mutex held for a push_back, never for I/O); a writer thread drains the
// queue, assembles each round from its events and writes it in one transaction at RoundEnd, so
// a killed run keeps every finished round. CPU spans become NVTX_EVENTS rows (push/pop ranges on
// the monotonic clock). Kernel records (CUPTI, later) take the bulk path record_kernels().
//
// The queue is bounded: when the writer falls behind by max_queued_items, new items are
// dropped and counted (stats().dropped) rather than making the engine wait.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "engine/core/expected.h"
#include "engine/observer/observer.h"
#include "profiler/session_store.h"

namespace specula::profiler {

// GPU activity from a capture (CUPTI): the string_views in the records point into `names`, so the
// batch travels to the writer thread as one piece.
struct GpuActivityBatch {
  std::vector<KernelActivity> kernels;
  std::vector<RuntimeActivity> runtime;
  std::vector<MemcpyActivity> memcpy;
  std::vector<NvtxRange> ranges;  // NVTX ranges captured by CUPTI (MARKER), outside rounds
  std::vector<GpuInfo> gpus;
  // Behind a pointer so a batch moves without copying its strings: std::deque's move may throw,
  // which would make the recorder's queue copy batches on growth and leave the views dangling.
  std::unique_ptr<std::deque<std::string>> names = std::make_unique<std::deque<std::string>>();
  bool empty() const { return kernels.empty() && runtime.empty() && memcpy.empty() && ranges.empty() && gpus.empty(); }
};

struct RecorderOptions {
  ObserveLevel level = ObserveLevel::kSummary;
  bool overwrite = false;             // replace an existing file at the path
  size_t max_queued_items = 1 << 20;  // events + kernel batches waiting for the writer
};

struct RecorderStats {
  int64_t events = 0;          // accepted by on_event()
  int64_t rounds_written = 0;  // committed to the database
  int64_t kernels_written = 0;
  int64_t dropped = 0;         // items dropped: queue full, or after a write error
};

class Recorder final : public Observer {
 public:
  static Expected<std::shared_ptr<Recorder>> create(const std::string& path, RecorderOptions options);
  ~Recorder() override;
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  void on_event(const Event& event) override;
  ObserveLevel level() const override { return level_; }

  // Bulk path: copies the records (names included) and writes them in one transaction.
  void record_kernels(std::span<const KernelActivity> kernels);
  // A capture's batch (kernels, runtime calls, memcpys, ranges, GPU rows), moved in whole.
  void record_gpu(GpuActivityBatch batch);
  // Adds `offset_ns` to every engine event's times from now on: with CUPTI active, the engine's
  // monotonic times move onto the CUPTI clock (offset = CUPTI timestamp - monotonic, measured
  // at capture start), so phases and kernels share one timeline. Call before the run starts.
  void set_clock_offset(int64_t offset_ns) { clock_offset_ns_ = offset_ns; }

  // Blocks until everything queued before the call is written (tests, the end of a run).
  Status flush();
  // Drains the queue, stops the writer, closes the database. Idempotent; the destructor calls it.
  Status finish();

  RecorderStats stats() const;
  // The first write error, if any; recording stops writing after one.
  Status status() const;
  const std::string& path() const { return path_; }

 private:
  struct QueuedEvent {
    Event event;
    int64_t global_tid = 0;
  };
  using Item = std::variant<QueuedEvent, GpuActivityBatch>;

  // The round being assembled by the writer thread.
  struct OpenRound {
    RoundRow row;
    SessionBatch batch;
    // Last selection per (query, group) in this round, for overlap/Jaccard with the next layer.
    std::vector<std::pair<std::pair<int32_t, int32_t>, std::vector<uint8_t>>> previous;
  };

  Recorder(SessionStore store, RecorderOptions options);
  void enqueue(Item item);
  void writer_loop();
  void handle(QueuedEvent& queued);
  void handle(GpuActivityBatch& batch);
  void write(SessionBatch& batch, bool is_round);
  void fail(const Error& error);

  // Writer-thread state.
  SessionStore store_;
  SessionBatch outside_;  // rows outside any round, written with the next transaction
  std::unique_ptr<OpenRound> open_;
  ObserveLevel level_;
  std::atomic<int64_t> clock_offset_ns_{0};
  std::string path_;
  size_t max_queued_;

  mutable std::mutex mutex_;
  std::condition_variable wake_writer_;
  std::condition_variable progressed_;
  std::vector<Item> queue_;
  uint64_t enqueued_ = 0;
  uint64_t processed_ = 0;
  bool stopping_ = false;
  bool finished_ = false;
  RecorderStats stats_;
  std::optional<Error> error_;
  std::thread writer_;
};

// What the CLI calls for `--record PATH`: a recorder writing a new session (replacing one there).
Expected<std::shared_ptr<Recorder>> record_to(const std::string& path, ObserveLevel level = ObserveLevel::kSummary);

// |a ∩ b| and |a ∪ b| of two block bitsets (shorter one zero-extended).
std::pair<int64_t, int64_t> bitset_overlap(std::span<const uint8_t> a, std::span<const uint8_t> b);

}  // namespace specula::profiler

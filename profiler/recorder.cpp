#include "profiler/recorder.h"

#include <type_traits>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <unordered_map>

namespace specula::profiler {

namespace {

int64_t this_global_tid() {
  thread_local const int64_t tid = nsys_global_tid(::getpid(), static_cast<int64_t>(::syscall(SYS_gettid)));
  return tid;
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};

std::string span_text(const CpuSpanEvent& span) {
  return span.layer >= 0 ? span.name + "/L" + std::to_string(span.layer) : span.name;
}

}  // namespace

std::pair<int64_t, int64_t> bitset_overlap(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  int64_t both = 0;
  int64_t either = 0;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const uint8_t x = i < a.size() ? a[i] : 0;
    const uint8_t y = i < b.size() ? b[i] : 0;
    both += std::popcount(static_cast<uint8_t>(x & y));
    either += std::popcount(static_cast<uint8_t>(x | y));
  }
  return {both, either};
}

Expected<std::shared_ptr<Recorder>> Recorder::create(const std::string& path, RecorderOptions options) {
  auto store = SessionStore::create(path, SessionStore::CreateOptions{options.overwrite});
  if (!store) return store.error();
  return std::shared_ptr<Recorder>(new Recorder(std::move(*store), options));
}

Expected<std::shared_ptr<Recorder>> record_to(const std::string& path, ObserveLevel level) {
  RecorderOptions options;
  options.level = level;
  options.overwrite = true;
  return Recorder::create(path, options);
}

Recorder::Recorder(SessionStore store, RecorderOptions options)
    : store_(std::move(store)),
      level_(options.level),
      path_(store_.path()),
      max_queued_(options.max_queued_items) {
  writer_ = std::thread([this] { writer_loop(); });
}

Recorder::~Recorder() { (void)finish(); }

void Recorder::enqueue(Item item) {
  static_assert(std::is_nothrow_move_constructible_v<Item>, "queue growth must move items, not copy them");
  {
    std::lock_guard lock(mutex_);
    if (finished_ || stopping_ || queue_.size() >= max_queued_) {
      ++stats_.dropped;
      return;
    }
    queue_.push_back(std::move(item));
    ++enqueued_;
  }
  wake_writer_.notify_one();
}

void Recorder::on_event(const Event& event) {
  if (!admits(level_, kind_of(event))) return;
  {
    std::lock_guard lock(mutex_);
    ++stats_.events;
  }
  enqueue(QueuedEvent{event, this_global_tid()});
}

void Recorder::record_kernels(std::span<const KernelActivity> kernels) {
  GpuActivityBatch batch;
  batch.kernels.assign(kernels.begin(), kernels.end());
  std::unordered_map<std::string_view, std::string_view> copied;  // caller's name -> our copy
  for (KernelActivity& k : batch.kernels) {
    auto it = copied.find(k.demangled_name);
    if (it == copied.end()) {
      const std::string& own = batch.names->emplace_back(k.demangled_name);
      it = copied.emplace(k.demangled_name, own).first;
    }
    k.demangled_name = it->second;
  }
  enqueue(std::move(batch));
}

// The queue is a vector of items: growing it must move batches, never copy them (their records
// hold views into their own name storage).
static_assert(std::is_nothrow_move_constructible_v<GpuActivityBatch>);

void Recorder::record_gpu(GpuActivityBatch batch) {
  if (!batch.empty()) enqueue(std::move(batch));
}

Status Recorder::flush() {
  std::unique_lock lock(mutex_);
  const uint64_t target = enqueued_;
  progressed_.wait(lock, [&] { return processed_ >= target || finished_; });
  if (error_) return *error_;
  return Status::success();
}

Status Recorder::finish() {
  {
    std::lock_guard lock(mutex_);
    if (finished_) return error_ ? Status(*error_) : Status::success();
    stopping_ = true;
  }
  wake_writer_.notify_one();
  if (writer_.joinable()) writer_.join();
  // The writer has stopped: store_ is ours now.
  if (open_) {  // a run stopped mid-round: that round is not recorded, like a killed one
    std::lock_guard lock(mutex_);
    ++stats_.dropped;
    open_.reset();
  }
  if (!outside_.empty()) write(outside_, false);
  Status closed = store_.close();
  std::lock_guard lock(mutex_);
  finished_ = true;
  progressed_.notify_all();
  if (!closed && !error_) error_ = closed.error();
  return error_ ? Status(*error_) : Status::success();
}

RecorderStats Recorder::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

Status Recorder::status() const {
  std::lock_guard lock(mutex_);
  return error_ ? Status(*error_) : Status::success();
}

void Recorder::fail(const Error& error) {
  std::lock_guard lock(mutex_);
  if (!error_) error_ = error;
}

void Recorder::writer_loop() {
  std::vector<Item> items;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_writer_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty() && stopping_) return;
      items.swap(queue_);
    }
    for (Item& item : items) {
      std::visit([this](auto& it) { handle(it); }, item);
    }
    {
      std::lock_guard lock(mutex_);
      processed_ += items.size();
    }
    items.clear();
    progressed_.notify_all();
  }
}

void Recorder::write(SessionBatch& batch, bool is_round) {
  bool failed = false;
  {
    std::lock_guard lock(mutex_);
    failed = error_.has_value();
  }
  if (failed) {
    std::lock_guard lock(mutex_);
    ++stats_.dropped;
  } else if (Status s = store_.write_batch(batch); !s) {
    fail(s.error());
  } else if (is_round) {
    std::lock_guard lock(mutex_);
    ++stats_.rounds_written;
  }
  batch = SessionBatch{};
}

void Recorder::handle(GpuActivityBatch& batch) {
  if (!status().ok()) return;
  Status s = store_.write_kernels(batch.kernels);
  if (s && !batch.runtime.empty()) s = store_.write_runtime(batch.runtime);
  if (s && !batch.memcpy.empty()) s = store_.write_memcpy(batch.memcpy);
  for (const GpuInfo& gpu : batch.gpus) {
    if (s) s = store_.write_gpu_info(gpu);
  }
  if (s && !batch.ranges.empty()) {
    SessionBatch ranges;
    ranges.nvtx = std::move(batch.ranges);
    s = store_.write_batch(ranges);
  }
  if (!s) {
    fail(s.error());
    return;
  }
  std::lock_guard lock(mutex_);
  stats_.kernels_written += static_cast<int64_t>(batch.kernels.size());
}

namespace {

// Moves an event's timestamps by `offset` (engine clock -> capture clock).
void shift_times(Event& event, int64_t offset) {
  std::visit(Overloaded{[&](SessionStartEvent& e) { e.time_ns += offset; },
                        [&](PrefillEvent& e) { e.start_ns += offset; e.end_ns += offset; },
                        [&](RoundBeginEvent& e) { e.time_ns += offset; },
                        [&](DecisionEvent& e) { e.time_ns += offset; },
                        [&](CpuSpanEvent& e) { e.start_ns += offset; e.end_ns += offset; },
                        [&](RoundEndEvent& e) { e.time_ns += offset; },
                        [&](SessionEndEvent& e) { e.time_ns += offset; },
                        [](auto&) {}},
             event);
}

}  // namespace

void Recorder::handle(QueuedEvent& queued) {
  if (const int64_t offset = clock_offset_ns_.load(std::memory_order_relaxed); offset != 0) {
    shift_times(queued.event, offset);
  }
  const int64_t tid = queued.global_tid;
  // Rows of the open round go into its batch; anything else waits in outside_.
  auto batch_for = [this](int64_t round) -> SessionBatch& {
    return open_ && open_->row.round == round ? open_->batch : outside_;
  };
  std::visit(
      Overloaded{
          [&](const SessionStartEvent& e) {
            SessionInfo info;
            info.start_ns = e.time_ns;
            info.wall_start_ns = e.wall_time_ns;
            info.config_json = e.config_json.empty() ? "{}" : e.config_json;
            info.model_name = e.model_name;
            info.model_sha256 = e.model_sha256;
            info.architecture = e.architecture;
            info.backend = e.backend;
            info.device = e.device;
            info.version = e.version;
            info.level = std::string(to_string(level_));
            if (Status s = store_.write_session(info); !s) fail(s.error());
          },
          [&](const PrefillEvent& e) {
            outside_.nvtx.push_back({e.start_ns, e.end_ns, "prefill", tid, int64_t{e.tokens}});
            write(outside_, false);
          },
          [&](const RoundBeginEvent& e) {
            if (open_) {  // its RoundEnd was dropped (queue full): the round is lost
              std::lock_guard lock(mutex_);
              ++stats_.dropped;
            }
            open_ = std::make_unique<OpenRound>();
            open_->row.round = e.round;
            open_->row.start_ns = e.time_ns;
            open_->row.context_len = e.context_len;
          },
          [&](const DraftTreeEvent& e) {
            if (!open_ || open_->row.round != e.round) return;
            OpenRound& r = *open_;
            r.row.drafter = e.drafter;
            r.row.tree_nodes = static_cast<int32_t>(e.nodes.size());
            r.batch.draft_nodes.clear();
            for (size_t i = 0; i < e.nodes.size(); ++i) {
              const DraftNodeInfo& n = e.nodes[i];
              r.row.tree_depth = std::max(r.row.tree_depth, n.depth);
              r.batch.draft_nodes.push_back(
                  {e.round, static_cast<int32_t>(i), n.token, n.parent, n.depth, n.draft_prob, std::nullopt, false, false});
            }
          },
          [&](const AcceptanceEvent& e) {
            if (!open_ || open_->row.round != e.round) return;
            OpenRound& r = *open_;
            r.row.accepted_length = e.accepted_length;
            r.row.next_token = e.next_token;
            r.row.bonus = e.bonus;
            for (const NodeAcceptanceInfo& a : e.nodes) {
              if (a.node < 0 || static_cast<size_t>(a.node) >= r.batch.draft_nodes.size()) continue;
              DraftNodeRow& row = r.batch.draft_nodes[static_cast<size_t>(a.node)];
              row.target_prob = a.target_prob;
              row.visited = true;
              row.accepted = a.accepted;
            }
          },
          [&](const CommitEvent& e) {
            if (!open_ || open_->row.round != e.round) return;
            open_->row.tokens = e.tokens;
            open_->row.rollback_tokens = e.rollback_tokens;
            open_->row.rejected_kv_bytes = e.rejected_kv_bytes;
          },
          [&](const LayerSelectionEvent& e) {
            LayerSelectionRow row{e, count_block_bits(e.block_bits), std::nullopt, std::nullopt};
            if (open_ && open_->row.round == e.round) {
              auto& previous = open_->previous;
              const std::pair<int32_t, int32_t> key{e.query, e.group};
              auto it = std::find_if(previous.begin(), previous.end(), [&](const auto& p) { return p.first == key; });
              if (it != previous.end()) {
                const auto [both, either] = bitset_overlap(it->second, e.block_bits);
                row.overlap_prev = both;
                row.jaccard_prev = either ? static_cast<double>(both) / static_cast<double>(either) : 1.0;
                it->second = e.block_bits;
              } else {
                previous.emplace_back(key, e.block_bits);
              }
            }
            batch_for(e.round).selections.push_back(std::move(row));
          },
          [&](const FfnStatsEvent& e) { batch_for(e.round).ffn_stats.push_back(e); },
          [&](const MoeStatsEvent& e) { batch_for(e.round).moe_stats.push_back(e); },
          [&](const DecisionEvent& e) { batch_for(e.round).decisions.push_back(e); },
          [&](const CpuSpanEvent& e) {
            std::optional<int64_t> round;
            if (e.round >= 0) round = e.round;
            batch_for(e.round).nvtx.push_back({e.start_ns, e.end_ns, span_text(e), tid, round});
          },
          [&](const RoundEndEvent& e) {
            if (!open_ || open_->row.round != e.round) return;  // its RoundBegin was dropped
            OpenRound& r = *open_;
            r.row.end_ns = e.time_ns;
            r.row.speculative = e.speculative;
            r.row.accepted_length = e.accepted_length;
            r.row.emitted = e.emitted;
            // One transaction: rows that arrived outside the round first, then the round.
            SessionBatch& batch = r.batch;
            batch.round = r.row;
            auto append = [](auto& to, auto& from) {
              to.insert(to.begin(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
            };
            append(batch.selections, outside_.selections);
            append(batch.ffn_stats, outside_.ffn_stats);
            append(batch.moe_stats, outside_.moe_stats);
            append(batch.decisions, outside_.decisions);
            append(batch.nvtx, outside_.nvtx);
            outside_ = SessionBatch{};
            write(batch, true);
            open_.reset();
          },
          [&](const SessionEndEvent& e) {
            if (!outside_.empty()) write(outside_, false);
            if (status().ok()) {
              if (Status s = store_.finish_session(e.time_ns, e.metrics_json); !s) fail(s.error());
            }
          },
      },
      queued.event);
}

}  // namespace specula::profiler

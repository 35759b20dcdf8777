#pragma once
// The engine's observer stream (ARCHITECTURE.md "Observer"): every step of a run is emitted as a
// plain value event, and the engine never waits on whoever consumes it. The recorder (profiler/)
// and the live UI both implement Observer; a FanOut hands one stream to several of them.
//
// Volume is set by a cheap level switch. The engine asks `observer->wants(kind)` (or
// `observes(observer, kind)` when the pointer may be null) before it builds an event, so an
// off or summary run pays one virtual call and a compare per event site, not the allocation:
//
//   off      nothing
//   summary  session, prefill, rounds, draft trees, acceptance, commits, decisions, CPU spans,
//            per-layer selections of the whole tree or a query group (query < 0), FFN/MoE stats
//   full     summary + per-query layer selections (query >= 0)
//
// Times are integer nanoseconds on the profiler's monotonic clock (profiler/clock.h uses the
// same CLOCK_MONOTONIC) unless a field says otherwise. No Qt, no SQLite here.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/core/expected.h"

namespace specula {

enum class ObserveLevel : uint8_t { kOff = 0, kSummary = 1, kFull = 2 };

std::string_view to_string(ObserveLevel level);
Expected<ObserveLevel> parse_observe_level(std::string_view name);  // "off" | "summary" | "full"

// ---- Events -------------------------------------------------------------------------------

struct SessionStartEvent {
  int64_t time_ns = 0;        // monotonic
  int64_t wall_time_ns = 0;   // Unix epoch, for display only
  std::string config_json;    // the run's full configuration (options, drafter, policy, ...)
  std::string model_name;
  std::string model_sha256;   // hex, empty when unknown
  std::string architecture;   // "llama", "qwen2_moe", ...
  std::string backend;        // "cpu" | "cuda"
  std::string device;         // "AMD EPYC ...", "NVIDIA H100 80GB HBM3"
  std::string version;        // Specula's version string
};

struct PrefillEvent {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t tokens = 0;
};

struct RoundBeginEvent {
  int64_t round = 0;          // 0, 1, 2, ... in order
  int64_t time_ns = 0;
  int64_t context_len = 0;    // committed KV rows before the round
};

struct DraftNodeInfo {
  int32_t token = 0;
  int32_t parent = -1;        // -1: child of the last committed token
  int32_t depth = 1;
  float draft_prob = 0;
};

struct DraftTreeEvent {
  int64_t round = 0;
  std::string drafter;               // "ngram", "layerskip", "model:..."
  std::vector<DraftNodeInfo> nodes;  // node id = index; parents precede children
};

struct NodeAcceptanceInfo {
  int32_t node = 0;
  float target_prob = 0;
  bool accepted = false;
};

struct AcceptanceEvent {
  int64_t round = 0;
  std::vector<NodeAcceptanceInfo> nodes;  // the nodes the rule visited, in decision order
  int32_t accepted_length = 1;            // 1 + accepted draft tokens
  int32_t next_token = -1;                // correction, or bonus when `bonus`
  bool bonus = false;
};

struct CommitEvent {
  int64_t round = 0;
  std::vector<int32_t> tokens;     // emitted this round (accepted drafts + next token)
  int64_t rollback_tokens = 0;     // provisional KV rows discarded
  int64_t rejected_kv_bytes = 0;
};

enum class SelectionMode : uint8_t { kRefresh = 0, kReuse = 1 };

struct LayerSelectionEvent {
  int64_t round = 0;
  int32_t layer = 0;
  int32_t query = -1;           // draft node the selection serves; -1: the whole tree / a group
  int32_t group = -1;           // query group id under grouped modes, else -1
  SelectionMode mode = SelectionMode::kRefresh;
  int32_t anchor_layer = -1;    // reuse: the layer whose selection is taken
  int32_t total_blocks = 0;     // KV blocks the layer could read
  std::vector<uint8_t> block_bits;  // bit b (byte b / 8, bit b % 8, LSB first) = block b read
};

struct FfnStatsEvent {
  int64_t round = 0;
  int32_t layer = 0;
  int32_t active_channels = 0;
  int32_t total_channels = 0;
  bool skipped = false;         // the whole FFN was skipped
};

struct MoeStatsEvent {
  int64_t round = 0;
  int32_t layer = 0;
  int32_t total_experts = 0;
  std::vector<int32_t> routed_experts;   // experts that ran, ascending
  std::vector<int32_t> skipped_experts;  // experts the router chose but the policy skipped
};

struct DecisionEvent {
  int64_t round = -1;           // -1: before the first round
  int64_t time_ns = 0;
  std::string source;           // "planner" | "controller" | ...
  std::string decision;         // short: "fallback", "resume", "tree=chain:4"
  std::string detail_json;      // why, in numbers
};

struct CpuSpanEvent {
  std::string name;             // phase: "prefill", "draft", "verify", "accept", "commit", "layer"
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t round = -1;           // -1: outside rounds
  int32_t layer = -1;           // -1: not a per-layer span
};

struct RoundEndEvent {
  int64_t round = 0;
  int64_t time_ns = 0;
  bool speculative = false;     // false: a plain decode step
  int32_t accepted_length = 1;
  int32_t emitted = 0;
  int64_t kv_bytes_read = 0;    // committed KV the target's attention read this round (bytes)
  int64_t kv_bytes_dense = 0;   // what reading every committed row would have cost (bytes)
};

struct SessionEndEvent {
  int64_t time_ns = 0;
  std::string metrics_json;     // run metrics (SpeculativeMetrics as JSON)
};

using Event = std::variant<SessionStartEvent, PrefillEvent, RoundBeginEvent, DraftTreeEvent, AcceptanceEvent,
                           CommitEvent, LayerSelectionEvent, FfnStatsEvent, MoeStatsEvent, DecisionEvent,
                           CpuSpanEvent, RoundEndEvent, SessionEndEvent>;

// What an event site is about to emit, for the level check before the event is built.
enum class EventKind : uint8_t {
  kSessionStart, kPrefill, kRoundBegin, kDraftTree, kAcceptance, kCommit,
  kLayerSelection,       // query < 0: the tree / a group
  kQuerySelection,       // query >= 0: one draft node (full only)
  kFfnStats, kMoeStats, kDecision, kCpuSpan, kRoundEnd, kSessionEnd,
};

EventKind kind_of(const Event& event);
std::string_view to_string(EventKind kind);
// The lowest level at which an event of this kind is emitted.
ObserveLevel min_level(EventKind kind);
inline bool admits(ObserveLevel level, EventKind kind) { return level >= min_level(kind); }

// ---- Consumers ----------------------------------------------------------------------------

class Observer {
 public:
  virtual ~Observer() = default;
  // Called on the engine's thread. Must return quickly and never block on I/O: queue the event
  // and return. Events arrive in emission order.
  virtual void on_event(const Event& event) = 0;
  // The volume this observer wants; the engine skips building events above it.
  virtual ObserveLevel level() const = 0;
  bool wants(EventKind kind) const { return admits(level(), kind); }
};

inline bool observes(const Observer* observer, EventKind kind) { return observer && observer->wants(kind); }

// Hands each event to every attached observer whose level admits it. Attach before the run
// starts: attach() is not synchronised with on_event().
class FanOut final : public Observer {
 public:
  void attach(std::shared_ptr<Observer> observer);
  void on_event(const Event& event) override;
  ObserveLevel level() const override { return level_; }  // the highest of the attached
  size_t size() const { return observers_.size(); }

 private:
  std::vector<std::shared_ptr<Observer>> observers_;
  ObserveLevel level_ = ObserveLevel::kOff;
};

// Bits of a block selection (LayerSelectionEvent::block_bits).
std::vector<uint8_t> pack_block_bits(const std::vector<int32_t>& block_ids, int32_t total_blocks);
std::vector<int32_t> unpack_block_bits(const std::vector<uint8_t>& bits);
int64_t count_block_bits(const std::vector<uint8_t>& bits);

}  // namespace specula

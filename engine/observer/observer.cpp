#include "engine/observer/observer.h"

#include <algorithm>
#include <bit>

namespace specula {

std::string_view to_string(ObserveLevel level) {
  switch (level) {
    case ObserveLevel::kOff: return "off";
    case ObserveLevel::kSummary: return "summary";
    case ObserveLevel::kFull: return "full";
  }
  return "?";
}

Expected<ObserveLevel> parse_observe_level(std::string_view name) {
  if (name == "off") return ObserveLevel::kOff;
  if (name == "summary") return ObserveLevel::kSummary;
  if (name == "full") return ObserveLevel::kFull;
  return make_error("observe level '" + std::string(name) + "': expected off, summary or full");
}

namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// clang 14 (the fuzz build) has no aggregate deduction for this without the guide.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

EventKind kind_of(const Event& event) {
  return std::visit(
      Overloaded{
          [](const SessionStartEvent&) { return EventKind::kSessionStart; },
          [](const PrefillEvent&) { return EventKind::kPrefill; },
          [](const RoundBeginEvent&) { return EventKind::kRoundBegin; },
          [](const DraftTreeEvent&) { return EventKind::kDraftTree; },
          [](const AcceptanceEvent&) { return EventKind::kAcceptance; },
          [](const CommitEvent&) { return EventKind::kCommit; },
          [](const LayerSelectionEvent& e) {
            return e.query >= 0 ? EventKind::kQuerySelection : EventKind::kLayerSelection;
          },
          [](const FfnStatsEvent&) { return EventKind::kFfnStats; },
          [](const MoeStatsEvent&) { return EventKind::kMoeStats; },
          [](const DecisionEvent&) { return EventKind::kDecision; },
          [](const CpuSpanEvent&) { return EventKind::kCpuSpan; },
          [](const RoundEndEvent&) { return EventKind::kRoundEnd; },
          [](const SessionEndEvent&) { return EventKind::kSessionEnd; },
      },
      event);
}

std::string_view to_string(EventKind kind) {
  switch (kind) {
    case EventKind::kSessionStart: return "session_start";
    case EventKind::kPrefill: return "prefill";
    case EventKind::kRoundBegin: return "round_begin";
    case EventKind::kDraftTree: return "draft_tree";
    case EventKind::kAcceptance: return "acceptance";
    case EventKind::kCommit: return "commit";
    case EventKind::kLayerSelection: return "layer_selection";
    case EventKind::kQuerySelection: return "query_selection";
    case EventKind::kFfnStats: return "ffn_stats";
    case EventKind::kMoeStats: return "moe_stats";
    case EventKind::kDecision: return "decision";
    case EventKind::kCpuSpan: return "cpu_span";
    case EventKind::kRoundEnd: return "round_end";
    case EventKind::kSessionEnd: return "session_end";
  }
  return "?";
}

ObserveLevel min_level(EventKind kind) {
  return kind == EventKind::kQuerySelection ? ObserveLevel::kFull : ObserveLevel::kSummary;
}

void FanOut::attach(std::shared_ptr<Observer> observer) {
  if (!observer) return;
  level_ = std::max(level_, observer->level());
  observers_.push_back(std::move(observer));
}

void FanOut::on_event(const Event& event) {
  const EventKind kind = kind_of(event);
  for (const auto& observer : observers_) {
    if (observer->wants(kind)) observer->on_event(event);
  }
}

std::vector<uint8_t> pack_block_bits(const std::vector<int32_t>& block_ids, int32_t total_blocks) {
  std::vector<uint8_t> bits(static_cast<size_t>((std::max(total_blocks, 0) + 7) / 8), 0);
  for (const int32_t id : block_ids) {
    if (id < 0 || id >= total_blocks) continue;  // out of range ids are not representable
    bits[static_cast<size_t>(id / 8)] |= static_cast<uint8_t>(1u << (id % 8));
  }
  return bits;
}

std::vector<int32_t> unpack_block_bits(const std::vector<uint8_t>& bits) {
  std::vector<int32_t> ids;
  for (size_t byte = 0; byte < bits.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      if (bits[byte] & (1u << bit)) ids.push_back(static_cast<int32_t>(byte * 8 + static_cast<size_t>(bit)));
    }
  }
  return ids;
}

int64_t count_block_bits(const std::vector<uint8_t>& bits) {
  int64_t n = 0;
  for (const uint8_t b : bits) n += std::popcount(b);
  return n;
}

}  // namespace specula

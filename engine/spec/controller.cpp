#include "engine/spec/controller.h"

#include <algorithm>

namespace specula {

bool BreakEvenController::speculate() const {
  if (!options_.enabled) return true;
  if (plain_ms_ <= 0) return false;  // measure one plain step first
  return speculating_;
}

bool BreakEvenController::pays() const {
  return plain_ms_ > 0 && spec_ms_ > 0 && spec_ms_ < plain_ms_ * options_.margin;
}

void BreakEvenController::record_plain(double ms) {
  plain_ms_ = plain_ms_ <= 0 ? ms : options_.smoothing * ms + (1 - options_.smoothing) * plain_ms_;
  if (!options_.enabled || speculating_) return;
  if (--plain_left_ <= 0) {
    speculating_ = true;  // probe: speculation may pay again (the text may have become repetitive)
    stint_rounds_ = 0;
    spec_ms_ = 0;
    ++returns_;
  }
}

void BreakEvenController::record_speculative(int emitted_tokens, double draft_ms, double verify_ms) {
  const double ms = (draft_ms + verify_ms) / std::max(1, emitted_tokens);
  spec_ms_ = spec_ms_ <= 0 ? ms : options_.smoothing * ms + (1 - options_.smoothing) * spec_ms_;
  ++stint_rounds_;
  if (!options_.enabled || stint_rounds_ < options_.warmup || plain_ms_ <= 0) return;
  if (pays()) {
    wait_ = options_.probe_after;
    return;
  }
  speculating_ = false;
  plain_left_ = wait_;
  wait_ = std::min(wait_ * 2, options_.max_probe_after);
  ++fallbacks_;
}

}  // namespace specula

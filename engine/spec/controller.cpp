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
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  plain_ms_ = plain_ms_ <= 0 ? ms : options_.smoothing * ms + (1 - options_.smoothing) * plain_ms_;
  if (!options_.enabled || speculating_) return;
  if (--plain_left_ <= 0) {
    speculating_ = true;  // probe: speculation may pay again (the text may have become repetitive)
    stint_rounds_ = 0;
    spec_ms_ = spec_round_ms_ = spec_round_tokens_ = 0;
    ++returns_;
  }
}

void BreakEvenController::record_speculative(int emitted_tokens, double draft_ms, double verify_ms) {
  const double ms = draft_ms + verify_ms, tokens = std::max(1, emitted_tokens);
  ++stint_rounds_;
  // The plain mean of the stint's rounds until it has 1/smoothing of them, then the EMA: the
  // first rounds of a stint do not each get the full weight of the whole history.
  const double weight = std::max(options_.smoothing, 1.0 / stint_rounds_);
  spec_round_ms_ = weight * ms + (1 - weight) * spec_round_ms_;
  spec_round_tokens_ = weight * tokens + (1 - weight) * spec_round_tokens_;
  spec_ms_ = spec_round_ms_ / spec_round_tokens_;
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

#pragma once
// Break-even controller: speculate only while it pays.
//
// It compares two costs per output token, from exponential moving averages of measured time:
//   speculative  EMA of (draft_ms + verify_ms) over EMA of tokens emitted, per speculative round
//                (a ratio of averages: time per token over the recent rounds, so a round that
//                emits one token weighs no more than its share of the time)
//   plain        ms of one plain decode step (one token)
// Speculation pays while speculative < plain · margin. The first decode step is plain, to learn
// the plain cost (after plain_warmup unmeasured ones). After `warmup` speculative rounds that do
// not pay, it falls back to plain decoding for `probe_after` steps (re-measuring the plain cost),
// then returns to speculation to probe; a failed probe doubles the wait (up to max_probe_after),
// a paying one resets it.
#include <cstdint>

namespace specula {

struct ControllerOptions {
  bool enabled = true;     // false: always speculate
  double margin = 1.0;     // speculation must cost below plain · margin per token
  double smoothing = 0.3;  // weight of the newest measurement in the averages
  int warmup = 3;          // speculative rounds in a stint before judging it
  int probe_after = 8;     // plain steps before speculating again
  int max_probe_after = 128;
  // Plain steps run first but not measured: their time holds one-time costs (on the CUDA backend
  // the first decode step of a session captures its CUDA graph, several times a replayed step),
  // and a plain cost learned from them makes any speculation look paying.
  int plain_warmup = 0;
};

class BreakEvenController {
 public:
  explicit BreakEvenController(const ControllerOptions& options = {})
      : options_(options), wait_(options.probe_after), warmup_left_(options.plain_warmup) {}

  // A new sequence on a controller carried across sequences (SpeculativeOptions::
  // carried_controller): its first `plain_warmup` plain steps go unmeasured again (a new session's
  // one-time costs), and everything learned stays: the costs, whether it is speculating, and the
  // wait before the next probe, so a drafter that did not pay on earlier sequences starts in
  // fallback instead of paying for a fresh warmup and probe schedule on every one.
  void begin_sequence(int plain_warmup) { warmup_left_ = plain_warmup; }
  // The decision for the next round.
  bool speculate() const;
  void record_plain(double ms);
  void record_speculative(int emitted_tokens, double draft_ms, double verify_ms);

  int fallbacks() const { return fallbacks_; }
  int returns() const { return returns_; }
  double plain_ms_per_token() const { return plain_ms_; }       // 0 until measured
  double speculative_ms_per_token() const { return spec_ms_; }  // 0 until measured
  bool pays() const;  // the current estimate says speculation beats plain decoding

 private:
  ControllerOptions options_;
  bool speculating_ = true;
  double plain_ms_ = 0;
  double spec_ms_ = 0;            // spec_round_ms_ / spec_round_tokens_
  double spec_round_ms_ = 0;      // EMA of draft + verify ms per speculative round
  double spec_round_tokens_ = 0;  // EMA of tokens emitted per speculative round
  int stint_rounds_ = 0;          // speculative rounds since the last (re)start
  int plain_left_ = 0;            // plain steps before the next probe
  int wait_;                      // current probe_after (backs off)
  int warmup_left_ = 0;           // plain steps still to skip before measuring
  int fallbacks_ = 0;
  int returns_ = 0;
};

}  // namespace specula

#pragma once
// What users of vLLM, SGLang and llama.cpp expect to read about a speculative run: per round
// (RoundRecord) and per run (SpeculativeMetrics, summarised from the rounds).
//
// Definitions:
//  accepted length          1 + the draft tokens accepted in a speculative round (a plain
//                           decode step would score 1); mean, p50 and p90 over speculative rounds
//  acceptance_by_depth[d-1] of the speculative rounds whose tree reached depth d, the share that
//                           accepted at least d draft tokens
//  target_passes_per_token  target forward passes after prefill / output tokens after the first
//                           (plain decoding: exactly 1)
//  tpot_ms, tokens_per_s    decode wall time (after the first token) per output token after the
//                           first, and its inverse
//  rollback_tokens          target-KV rows written by verification and then discarded (tree
//                           nodes off the accepted path); rejected_kv_bytes: their bytes
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specula {

struct RoundRecord {
  bool speculative = false;  // false: one plain decode step (no drafter, controller, empty tree)
  int tree_nodes = 0;
  int tree_depth = 0;
  int accepted = 0;          // draft tokens accepted
  int emitted = 0;           // tokens the round added to the output (after EOS / max-token cuts)
  double draft_ms = 0;       // drafting, including a declined (empty) draft
  double verify_ms = 0;      // target forward over the tree + acceptance + KV commit
  double plain_ms = 0;       // target forward of a plain step + sampling
  int64_t rollback_tokens = 0;
  int64_t rejected_kv_bytes = 0;
  int64_t kv_bytes_read = 0;   // committed KV the target's attention read (sparse: selected blocks)
  int64_t kv_bytes_dense = 0;  // the same rounds reading every committed row
  int64_t ffn_active = 0;      // sparse FFN channels kept, over layers and rows
  int64_t ffn_total = 0;
  int64_t moe_routed = 0;      // MoE (token, expert) pairs routed in verification, and skipped
  int64_t moe_skipped = 0;
};

struct SpeculativeMetrics {
  int rounds = 0;
  int speculative_rounds = 0;
  int output_tokens = 0;
  double mean_accepted_length = 1;
  double accepted_length_p50 = 1;
  double accepted_length_p90 = 1;
  std::vector<double> acceptance_by_depth;
  double target_passes_per_token = 0;
  double draft_ms = 0;
  double verify_ms = 0;
  double plain_decode_ms = 0;
  double tpot_ms = 0;
  double tokens_per_s = 0;
  int64_t rollback_tokens = 0;
  int64_t rejected_kv_bytes = 0;
  int controller_fallbacks = 0;  // switches from speculation to plain decoding
  int controller_returns = 0;    // switches back
  int64_t draft_rollback_tokens = 0;  // provisional rows a draft transformer discarded
  int64_t kv_bytes_read = 0;
  int64_t kv_bytes_dense = 0;
  double ffn_active_ratio = 1;  // kept / total FFN channels (1 without sparse FFN)
  double moe_experts_run_ratio = 1;  // routed experts that ran in verification (1 without expert skipping)
};

// Nearest-rank percentile (q in (0, 1]) of values; 0 for none.
double percentile(std::vector<double> values, double q);

// output_tokens: all generated tokens (the first comes from prefill); decode_seconds: the time
// after the first token.
SpeculativeMetrics summarize_rounds(std::span<const RoundRecord> rounds, int output_tokens, double decode_seconds);

nlohmann::json to_json(const SpeculativeMetrics& metrics);
nlohmann::json to_json(const RoundRecord& round);

}  // namespace specula

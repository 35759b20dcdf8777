#include "engine/spec/metrics.h"

#include <algorithm>
#include <cmath>

namespace specula {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

SpeculativeMetrics summarize_rounds(std::span<const RoundRecord> rounds, int output_tokens, double decode_seconds) {
  SpeculativeMetrics m;
  m.rounds = static_cast<int>(rounds.size());
  m.output_tokens = output_tokens;
  std::vector<double> lengths;
  std::vector<int> reached, accepted_at;  // per depth - 1
  int64_t ffn_active = 0, ffn_total = 0, moe_routed = 0, moe_skipped = 0;
  for (const RoundRecord& r : rounds) {
    m.draft_ms += r.draft_ms;
    m.verify_ms += r.verify_ms;
    m.plain_decode_ms += r.plain_ms;
    m.rollback_tokens += r.rollback_tokens;
    m.rejected_kv_bytes += r.rejected_kv_bytes;
    m.kv_bytes_read += r.kv_bytes_read;
    m.kv_bytes_dense += r.kv_bytes_dense;
    ffn_active += r.ffn_active;
    ffn_total += r.ffn_total;
    moe_routed += r.moe_routed;
    moe_skipped += r.moe_skipped;
    if (!r.speculative) continue;
    ++m.speculative_rounds;
    lengths.push_back(1.0 + r.accepted);
    if (static_cast<int>(reached.size()) < r.tree_depth) {
      reached.resize(static_cast<size_t>(r.tree_depth));
      accepted_at.resize(static_cast<size_t>(r.tree_depth));
    }
    for (int d = 0; d < r.tree_depth; ++d) {
      ++reached[static_cast<size_t>(d)];
      if (r.accepted > d) ++accepted_at[static_cast<size_t>(d)];
    }
  }
  if (!lengths.empty()) {
    double sum = 0;
    for (double l : lengths) sum += l;
    m.mean_accepted_length = sum / static_cast<double>(lengths.size());
    m.accepted_length_p50 = percentile(lengths, 0.5);
    m.accepted_length_p90 = percentile(lengths, 0.9);
  }
  for (size_t d = 0; d < reached.size(); ++d) {
    m.acceptance_by_depth.push_back(reached[d] > 0 ? static_cast<double>(accepted_at[d]) / reached[d] : 0.0);
  }
  const int after_first = output_tokens - 1;
  if (after_first > 0) {
    m.target_passes_per_token = static_cast<double>(m.rounds) / after_first;
    if (decode_seconds > 0) {
      m.tpot_ms = decode_seconds * 1e3 / after_first;
      m.tokens_per_s = after_first / decode_seconds;
    }
  }
  if (ffn_total > 0) m.ffn_active_ratio = static_cast<double>(ffn_active) / static_cast<double>(ffn_total);
  if (moe_routed > 0) {
    m.moe_experts_run_ratio = static_cast<double>(moe_routed - moe_skipped) / static_cast<double>(moe_routed);
  }
  return m;
}

nlohmann::json to_json(const SpeculativeMetrics& m) {
  return {
      {"rounds", m.rounds},
      {"speculative_rounds", m.speculative_rounds},
      {"output_tokens", m.output_tokens},
      {"mean_accepted_length", m.mean_accepted_length},
      {"accepted_length_p50", m.accepted_length_p50},
      {"accepted_length_p90", m.accepted_length_p90},
      {"acceptance_by_depth", m.acceptance_by_depth},
      {"target_passes_per_token", m.target_passes_per_token},
      {"draft_ms", m.draft_ms},
      {"verify_ms", m.verify_ms},
      {"plain_decode_ms", m.plain_decode_ms},
      {"tpot_ms", m.tpot_ms},
      {"tokens_per_s", m.tokens_per_s},
      {"rollback_tokens", m.rollback_tokens},
      {"rejected_kv_bytes", m.rejected_kv_bytes},
      {"kv_bytes_read", m.kv_bytes_read},
      {"kv_bytes_dense", m.kv_bytes_dense},
      {"ffn_active_ratio", m.ffn_active_ratio},
      {"moe_experts_run_ratio", m.moe_experts_run_ratio},
      {"controller_fallbacks", m.controller_fallbacks},
      {"controller_returns", m.controller_returns},
      {"draft_rollback_tokens", m.draft_rollback_tokens},
  };
}

nlohmann::json to_json(const RoundRecord& r) {
  return {{"speculative", r.speculative}, {"tree_nodes", r.tree_nodes}, {"tree_depth", r.tree_depth},
          {"accepted", r.accepted},       {"emitted", r.emitted},         {"draft_ms", r.draft_ms},
          {"verify_ms", r.verify_ms},     {"plain_ms", r.plain_ms},       {"rollback_tokens", r.rollback_tokens},
          {"rejected_kv_bytes", r.rejected_kv_bytes},
          {"kv_bytes_read", r.kv_bytes_read},
          {"kv_bytes_dense", r.kv_bytes_dense}};
}

}  // namespace specula

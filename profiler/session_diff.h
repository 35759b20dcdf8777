#pragma once
// `specula-cli diff A B`: what changed between two recorded sessions.
//   config        keys (flattened JSON paths) whose values differ, or exist on one side only
//   speed         tokens/s, TPOT, target passes per token (SPECULA_METRICS), and B / A
//   acceptance    accepted-length distribution over speculative rounds: count, mean, p50, p90,
//                 histogram (length -> rounds)
//   kv            per layer: blocks read (Σ selected blocks of the whole-tree selections over
//                 rounds) and the fraction of the blocks it could have read
//   kernels       the top kernels by total time in either session: count, total, mean, in A and B
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/expected.h"
#include "profiler/session_store.h"

namespace specula::profiler {

struct DiffOptions {
  int top_kernels = 10;
};

Expected<nlohmann::json> diff_sessions(SessionStore& a, SessionStore& b, const DiffOptions& options = {});
// The JSON above as aligned text tables.
std::string format_diff(const nlohmann::json& diff);

// Every leaf of a JSON value as "path" -> value ("tree", "ngram.n", "layers[2]").
void flatten_json(const nlohmann::json& value, const std::string& prefix, std::map<std::string, nlohmann::json>& out);

}  // namespace specula::profiler

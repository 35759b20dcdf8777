#include "profiler/session_diff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

namespace specula::profiler {
namespace {

// Nearest-rank percentile of sorted values (the definition SpeculativeMetrics uses).
double percentile(const std::vector<int>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

struct SessionSummary {
  SessionInfo info;
  std::map<std::string, double> metrics;
  nlohmann::json acceptance;
  std::map<int32_t, std::pair<int64_t, int64_t>> kv;  // layer -> (blocks read, blocks readable)
  std::map<std::string, std::pair<int64_t, int64_t>> kernels;  // short name -> (count, total ns)
};

Expected<SessionSummary> summarize(SessionStore& s) {
  SessionSummary out;
  auto info = s.read_session();
  if (!info) return info.error();
  out.info = *info;
  auto metrics = s.read_metrics();
  if (!metrics) return metrics.error();
  for (const auto& [k, v] : *metrics) out.metrics[k] = v;
  auto rounds = s.read_rounds();
  if (!rounds) return rounds.error();
  std::vector<int> lengths;
  std::map<int, int> histogram;
  for (const auto& r : *rounds) {
    if (r.speculative) {
      lengths.push_back(r.accepted_length);
      ++histogram[r.accepted_length];
    }
    auto selections = s.read_layer_selections(r.round);
    if (!selections) return selections.error();
    for (const auto& sel : *selections) {
      if (sel.selection.query >= 0) continue;  // per-query rows repeat what the tree read
      auto& [read, readable] = out.kv[sel.selection.layer];
      read += sel.selected_blocks;
      readable += sel.selection.total_blocks;
    }
  }
  std::sort(lengths.begin(), lengths.end());
  double mean = 0;
  for (int l : lengths) mean += l;
  if (!lengths.empty()) mean /= static_cast<double>(lengths.size());
  nlohmann::json hist = nlohmann::json::object();
  for (const auto& [len, count] : histogram) hist[std::to_string(len)] = count;
  out.acceptance = {{"speculative_rounds", lengths.size()},
                    {"mean", lengths.empty() ? 1.0 : mean},
                    {"p50", lengths.empty() ? 1.0 : percentile(lengths, 0.5)},
                    {"p90", lengths.empty() ? 1.0 : percentile(lengths, 0.9)},
                    {"histogram", hist}};
  auto kernels = s.read_kernels();
  if (!kernels) return kernels.error();
  for (const auto& k : *kernels) {
    auto& [count, total] = out.kernels[k.short_name];
    ++count;
    total += k.end - k.start;
  }
  return out;
}

nlohmann::json ratio(double a, double b) { return a > 0 ? nlohmann::json(b / a) : nlohmann::json(nullptr); }

std::string number(const nlohmann::json& v, int precision = 3) {
  if (v.is_null()) return "-";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", precision, v.get<double>());
    return buf;
  }
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

void flatten_json(const nlohmann::json& value, const std::string& prefix, std::map<std::string, nlohmann::json>& out) {
  if (value.is_object() && !value.empty()) {
    for (const auto& [k, v] : value.items()) flatten_json(v, prefix.empty() ? k : prefix + "." + k, out);
  } else if (value.is_array() && !value.empty()) {
    for (size_t i = 0; i < value.size(); ++i) flatten_json(value[i], prefix + "[" + std::to_string(i) + "]", out);
  } else {
    out[prefix] = value;
  }
}

Expected<nlohmann::json> diff_sessions(SessionStore& a, SessionStore& b, const DiffOptions& options) {
  auto sa = summarize(a);
  if (!sa) return make_error(a.path() + ": " + sa.error().message);
  auto sb = summarize(b);
  if (!sb) return make_error(b.path() + ": " + sb.error().message);

  nlohmann::json diff;
  diff["a"] = {{"path", a.path()}, {"model", sa->info.model_name}, {"backend", sa->info.backend}, {"device", sa->info.device}};
  diff["b"] = {{"path", b.path()}, {"model", sb->info.model_name}, {"backend", sb->info.backend}, {"device", sb->info.device}};

  std::map<std::string, nlohmann::json> ca, cb;
  flatten_json(nlohmann::json::parse(sa->info.config_json, nullptr, false), "", ca);
  flatten_json(nlohmann::json::parse(sb->info.config_json, nullptr, false), "", cb);
  if (sa->info.model_sha256 != sb->info.model_sha256) {
    ca["model_sha256"] = sa->info.model_sha256;
    cb["model_sha256"] = sb->info.model_sha256;
  }
  nlohmann::json config = nlohmann::json::array();
  std::map<std::string, bool> keys;
  for (const auto& [k, v] : ca) keys[k] = true;
  for (const auto& [k, v] : cb) keys[k] = true;
  for (const auto& [k, unused] : keys) {
    const auto ia = ca.find(k), ib = cb.find(k);
    const nlohmann::json va = ia != ca.end() ? ia->second : nlohmann::json(nullptr);
    const nlohmann::json vb = ib != cb.end() ? ib->second : nlohmann::json(nullptr);
    if (va != vb) config.push_back({{"key", k}, {"a", va}, {"b", vb}});
  }
  diff["config"] = config;

  nlohmann::json speed = nlohmann::json::array();
  for (const char* key : {"tokens_per_s", "tpot_ms", "target_passes_per_token", "mean_accepted_length", "draft_ms",
                          "verify_ms", "rollback_tokens", "rejected_kv_bytes", "output_tokens"}) {
    const auto ia = sa->metrics.find(key), ib = sb->metrics.find(key);
    if (ia == sa->metrics.end() && ib == sb->metrics.end()) continue;
    const double va = ia != sa->metrics.end() ? ia->second : 0, vb = ib != sb->metrics.end() ? ib->second : 0;
    speed.push_back({{"metric", key}, {"a", va}, {"b", vb}, {"b_over_a", ratio(va, vb)}});
  }
  diff["speed"] = speed;
  diff["acceptance"] = {{"a", sa->acceptance}, {"b", sb->acceptance}};

  nlohmann::json kv = nlohmann::json::array();
  std::map<int32_t, bool> layers;
  for (const auto& [l, v] : sa->kv) layers[l] = true;
  for (const auto& [l, v] : sb->kv) layers[l] = true;
  for (const auto& [layer, unused] : layers) {
    const auto pa = sa->kv.count(layer) ? sa->kv[layer] : std::pair<int64_t, int64_t>{0, 0};
    const auto pb = sb->kv.count(layer) ? sb->kv[layer] : std::pair<int64_t, int64_t>{0, 0};
    kv.push_back({{"layer", layer},
                  {"a_blocks_read", pa.first},
                  {"a_fraction", pa.second > 0 ? nlohmann::json(double(pa.first) / double(pa.second)) : nlohmann::json(nullptr)},
                  {"b_blocks_read", pb.first},
                  {"b_fraction", pb.second > 0 ? nlohmann::json(double(pb.first) / double(pb.second)) : nlohmann::json(nullptr)}});
  }
  diff["kv"] = kv;

  // The union of each side's top kernels by total time, ordered by the larger total.
  std::vector<std::pair<int64_t, std::string>> ranked;
  for (const auto* side : {&sa->kernels, &sb->kernels}) {
    std::vector<std::pair<int64_t, std::string>> mine;
    for (const auto& [name, ct] : *side) mine.push_back({ct.second, name});
    std::sort(mine.rbegin(), mine.rend());
    if (static_cast<int>(mine.size()) > options.top_kernels) mine.resize(static_cast<size_t>(options.top_kernels));
    ranked.insert(ranked.end(), mine.begin(), mine.end());
  }
  std::map<std::string, int64_t> best;
  for (const auto& [total, name] : ranked) best[name] = std::max(best[name], total);
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [name, total] : best) order.push_back({total, name});
  std::sort(order.rbegin(), order.rend());
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& [unused, name] : order) {
    const auto ka = sa->kernels.count(name) ? sa->kernels[name] : std::pair<int64_t, int64_t>{0, 0};
    const auto kb = sb->kernels.count(name) ? sb->kernels[name] : std::pair<int64_t, int64_t>{0, 0};
    kernels.push_back({{"name", name},
                       {"a_count", ka.first},
                       {"a_total_ns", ka.second},
                       {"a_mean_ns", ka.first ? nlohmann::json(double(ka.second) / double(ka.first)) : nlohmann::json(nullptr)},
                       {"b_count", kb.first},
                       {"b_total_ns", kb.second},
                       {"b_mean_ns", kb.first ? nlohmann::json(double(kb.second) / double(kb.first)) : nlohmann::json(nullptr)},
                       {"b_over_a_total", ratio(double(ka.second), double(kb.second))}});
  }
  diff["kernels"] = kernels;
  return diff;
}

std::string format_diff(const nlohmann::json& d) {
  std::ostringstream out;
  out << "A: " << d["a"]["path"].get<std::string>() << " (" << number(d["a"]["model"]) << ", " << number(d["a"]["backend"])
      << ")\nB: " << d["b"]["path"].get<std::string>() << " (" << number(d["b"]["model"]) << ", "
      << number(d["b"]["backend"]) << ")\n\n";
  out << "configuration: " << (d["config"].empty() ? "identical" : std::to_string(d["config"].size()) + " differences") << "\n";
  for (const auto& c : d["config"]) out << "  " << c["key"].get<std::string>() << ": " << c["a"].dump() << " -> " << c["b"].dump() << "\n";
  char line[256];
  out << "\nspeed                        A            B       B/A\n";
  for (const auto& s : d["speed"]) {
    std::snprintf(line, sizeof line, "  %-24s %12s %12s %9s\n", s["metric"].get<std::string>().c_str(),
                  number(s["a"]).c_str(), number(s["b"]).c_str(), number(s["b_over_a"]).c_str());
    out << line;
  }
  out << "\naccepted length (speculative rounds)\n";
  for (const char* side : {"a", "b"}) {
    const auto& acc = d["acceptance"][side];
    out << "  " << (side[0] == 'a' ? "A" : "B") << ": " << acc["speculative_rounds"].get<int64_t>() << " rounds, mean "
        << number(acc["mean"]) << ", p50 " << number(acc["p50"], 0) << ", p90 " << number(acc["p90"], 0) << ", histogram "
        << acc["histogram"].dump() << "\n";
  }
  if (!d["kv"].empty()) {
    out << "\nKV blocks read per layer      A (fraction)           B (fraction)\n";
    for (const auto& k : d["kv"]) {
      std::snprintf(line, sizeof line, "  layer %-3d %14s (%6s) %14s (%6s)\n", k["layer"].get<int>(),
                    number(k["a_blocks_read"]).c_str(), number(k["a_fraction"]).c_str(),
                    number(k["b_blocks_read"]).c_str(), number(k["b_fraction"]).c_str());
      out << line;
    }
  }
  out << "\ntop kernels by total time    A count   A total ms   B count   B total ms   B/A\n";
  if (d["kernels"].empty()) out << "  (no kernel records in either session)\n";
  for (const auto& k : d["kernels"]) {
    std::snprintf(line, sizeof line, "  %-26.26s %8s %12.3f %9s %12.3f %6s\n", k["name"].get<std::string>().c_str(),
                  number(k["a_count"]).c_str(), k["a_total_ns"].get<double>() / 1e6, number(k["b_count"]).c_str(),
                  k["b_total_ns"].get<double>() / 1e6, number(k["b_over_a_total"], 2).c_str());
    out << line;
  }
  return out.str();
}

}  // namespace specula::profiler

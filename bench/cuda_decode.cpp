// Plain greedy decoding on the CUDA backend, timed, and where the time of a decode step goes.
//  1. Timed runs: prefill a prompt, then --tokens decode steps (one token, its argmax taken on
//     the GPU by forward_greedy), --reps times; tokens/s of the decode steps alone, and the weight
//     bytes each step reads over the step time. Each rep also runs the old loop (last logits
//     downloaded, std::max_element on the host) with the step split into forward() and the argmax
//     (decode_host_argmax), and checks both give the same tokens.
//  2. With --profile SESSION: one more run (without programmatic dependent launch) under CUPTI
//     capture (profiler/cupti_capture.h) into that session file; its kernel rows give kernels per
//     step, the summed kernel time per step against the step's wall time (the rest is launch
//     latency, gaps and the host), and the kernels that take the most time. CUPTI's own cost
//     makes this run slower; its tokens/s is reported apart from the timed runs. With
//     --verify-nodes, 10 verifies of the first size are captured too (SESSION.verify_N); with
//     --long-verify, 5 dense and 5 first-query sparse ones (SESSION.verify_dense, _sparse_first).
//  3. With --long-verify CONTEXT: one tree verify (--long-verify-nodes, default 60 nodes: 6 x 3 x 2
//     under the pending token) at CONTEXT committed tokens, dense and sparse (--sparse-eta,
//     --sparse-dense-below, each query mode; --long-verify-sparse false: dense only), against
//     the byte floor (weights + KV read) over
//     the measured device copy bandwidth. The KV cache is filled with random values by a
//     bench-only hook (cuda_fill_kv_random_for_bench), not by a prefill: the logits are
//     meaningless, only the time is measured. Dense verifies use the tree-attention kernels
//     (CudaBackendOptions::tree_attention_kernels) unless --tree-attention-kernels false. Both
//     options take lists: every context with every tree size, in one process (the profile of
//     step 2 covers the first pair only).
// --synthetic NAME times random weights in a real model's shapes; the output says "synthetic".
// Prints one JSON object (device, driver, commit, command, results); --out writes it too.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "bench/bench_info.h"
#include "engine/backend/cuda_backend.h"
#include "engine/model/loader.h"
#include "engine/sparse/sparse_config.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/model_ops.h"
#include "kernels/cuda/shared_kv_attention.h"
#include "profiler/cupti_capture.h"
#include "profiler/recorder.h"
#include "profiler/session_store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct RunResult {
  double prefill_ms = 0;
  double decode_s = 0;
  int decoded = 0;
  std::vector<int32_t> tokens;
  // Per decode step, summed: forward() or forward_greedy() (graph replay, the download, the
  // wait) and, with the host argmax, the scan of the downloaded row.
  double forward_s = 0, host_argmax_s = 0;
  // Host argmax only: non-finite logits seen over the steps, and the smallest gap between a
  // step's largest and second-largest logit (a near tie makes the two picks fragile).
  int64_t nonfinite_logits = 0;
  double min_top2_gap = std::numeric_limits<double>::infinity();
  double inspect_s = 0;  // that scan's time, left out of decode_s
};

// Counts non-finite entries of a step's logits and narrows r's top-2 gap.
void inspect_logits(const std::vector<float>& v, RunResult& r) {
  float first = -std::numeric_limits<float>::infinity(), second = first;
  for (const float x : v) {
    if (!std::isfinite(x)) {
      ++r.nonfinite_logits;
      continue;
    }
    if (x > first) {
      second = first;
      first = x;
    } else if (x > second) {
      second = x;
    }
  }
  r.min_top2_gap = std::min(r.min_top2_gap, static_cast<double>(first) - static_cast<double>(second));
}

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// How a decode step picks its token: on the GPU (forward_greedy: one id comes back), or the
// (vocab) f32 logits downloaded to a pageable vector and scanned with std::max_element, as every
// step did before forward_greedy.
enum class Pick { kDevice, kHostArgmax };

// after_prefill (may be empty) runs between the prefill and the first decode step.
// capacity: the KV cache's rows (0: just enough, prompt + tokens + 1; a larger cache makes the
// decode attention split its rows, kernels/cuda/model_ops.h attention_split_for).
specula::Expected<RunResult> run_once(specula::TransformerBackend& backend, const std::vector<int32_t>& prompt,
                                      int tokens, const std::function<specula::Status()>& after_prefill = {},
                                      int64_t capacity = 0, Pick pick = Pick::kDevice) {
  const int64_t V = backend.config().vocab_size;
  auto session = backend.start(16, std::max<int64_t>(capacity, static_cast<int64_t>(prompt.size()) + tokens + 1));
  if (!session) return session.error();
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> logits(static_cast<size_t>(V));
  RunResult r;
  const auto t0 = Clock::now();
  if (auto s = (*session)->forward(prompt, pos, nullptr, logits, specula::LogitRows::Last); !s) return s.error();
  (*session)->commit_all();
  if (after_prefill) {
    if (auto s = after_prefill(); !s) return s.error();
  }
  const auto t1 = Clock::now();
  int32_t tok = argmax(logits);
  for (int i = 0; i < tokens; ++i) {
    r.tokens.push_back(tok);
    int32_t p = static_cast<int32_t>((*session)->committed());
    const auto a = Clock::now();
    if (pick == Pick::kDevice) {
      int32_t next = -1;
      if (auto s = (*session)->forward_greedy({&tok, 1}, {&p, 1}, nullptr, {&next, 1}, specula::LogitRows::Last); !s) {
        return s.error();
      }
      r.forward_s += seconds(a, Clock::now());
      tok = next;
    } else {
      if (auto s = (*session)->forward({&tok, 1}, {&p, 1}, nullptr, logits, specula::LogitRows::Last); !s) {
        return s.error();
      }
      const auto b = Clock::now();
      tok = argmax(logits);
      r.forward_s += seconds(a, b);
      const auto c = Clock::now();
      r.host_argmax_s += seconds(b, c);
      inspect_logits(logits, r);
      r.inspect_s += seconds(c, Clock::now());
    }
    (*session)->commit_all();
  }
  const auto t2 = Clock::now();
  r.prefill_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  r.decode_s = std::chrono::duration<double>(t2 - t1).count() - r.inspect_s;
  r.decoded = tokens;
  return r;
}

// The first step where two token lists differ, -1 where they are equal.
int64_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// CUPTI capture of whatever runs between begin() and end() into a fresh session file at path,
// then its kernels summed per name and divided by `steps` (what one step of the captured work
// launches). Without programmatic launch: a kernel that starts early and waits for the one before
// would show that wait as its own duration.
class KernelProfile {
 public:
  specula::Status begin(const std::string& path) {
    path_ = path;
    std::filesystem::remove(path);
    auto recorder = specula::profiler::record_to(path, specula::ObserveLevel::kSummary);
    if (!recorder) return recorder.error();
    recorder_ = std::move(*recorder);
    specula::cuda::set_programmatic_dependent_launch(false);
    auto c = specula::profiler::CuptiCapture::start(recorder_);
    if (!c) return c.error();
    capture_ = std::move(*c);
    return specula::Status::success();
  }

  specula::Expected<nlohmann::json> end(int steps, bool pdl_after) {
    specula::cuda::set_programmatic_dependent_launch(pdl_after);
    if (!capture_) return specula::make_error("kernel profile: capture was not started");
    if (auto s = capture_->stop(); !s) return s.error();
    const auto stats = capture_->stats();
    if (auto s = recorder_->finish(); !s) return s.error();
    auto session = specula::profiler::open_session(path_);
    if (!session) return session.error();
    auto rows = session->read_kernels();
    if (!rows) return rows.error();
    std::map<std::string, std::pair<int64_t, int64_t>> by_name;  // short name -> (count, total ns)
    int64_t first = rows->empty() ? 0 : rows->front().start, last = first, total_ns = 0;
    for (const auto& k : *rows) {
      auto& e = by_name[k.short_name];
      e.first += 1;
      e.second += k.end - k.start;
      total_ns += k.end - k.start;
      first = std::min(first, k.start);
      last = std::max(last, k.end);
    }
    std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> top(by_name.begin(), by_name.end());
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& [name, e] : top) {
      kernels.push_back({{"kernel", name},
                         {"per_step", static_cast<double>(e.first) / steps},
                         {"us_per_step", e.second / 1e3 / steps},
                         {"mean_us", e.second / 1e3 / static_cast<double>(e.first)}});
    }
    const double span_us = (last - first) / 1e3;
    return nlohmann::json{{"session", path_},
                          {"kernel_rows", rows->size()},
                          {"kernels_per_step", static_cast<double>(rows->size()) / steps},
                          {"kernel_us_per_step", total_ns / 1e3 / steps},
                          {"gpu_span_us_per_step", span_us / steps},
                          {"kernel_busy_share", span_us > 0 ? total_ns / 1e3 / span_us : 0},
                          {"cupti_records", stats.records},
                          {"cupti_dropped", stats.dropped},
                          {"kernels", kernels}};
  }

 private:
  std::string path_;
  std::shared_ptr<specula::profiler::Recorder> recorder_;
  std::unique_ptr<specula::profiler::CuptiCapture> capture_;
};

// Prints the first `n` kernels of a profile's summary (the slowest per step).
void print_top_kernels(const char* what, const nlohmann::json& profile, size_t n) {
  std::fprintf(stderr, "%s: %.0f kernels, %.1f us of kernels per step, GPU busy %.0f%% of its span\n", what,
               profile["kernels_per_step"].get<double>(), profile["kernel_us_per_step"].get<double>(),
               100 * profile["kernel_busy_share"].get<double>());
  const auto& k = profile["kernels"];
  for (size_t i = 0; i < std::min(n, k.size()); ++i) {
    std::fprintf(stderr, "  %8.1f us  %5.1f x  %s\n", k[i]["us_per_step"].get<double>(), k[i]["per_step"].get<double>(),
                 k[i]["kernel"].get<std::string>().c_str());
  }
}

// The --long-verify measurement (see the header comment). Medians of 20 verifies after 3
// warm-ups, each rolled back; times are host wall time around forward(), which ends when the
// logits are on the host.
specula::Expected<nlohmann::json> time_long_verify(specula::CudaBackend& backend, int64_t context, int nodes,
                                                   double eta, int64_t dense_below, bool sparse_modes,
                                                   const std::string& profile_path, bool pdl) {
  using namespace specula;
  const auto& c = backend.config();
  const int64_t V = c.vocab_size;
  const int T = nodes + 1;
  auto session = backend.start(16, context + T + 1);
  if (!session) return session.error();
  const uint64_t seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  if (auto s = cuda_fill_kv_random_for_bench(**session, context, seed); !s) return s.error();
  // Rows: the pending token, then 6 first-level nodes, 3 children each, 2 grandchildren each.
  std::vector<int> parents = {-1};
  for (int a = 0; a < 6; ++a) parents.push_back(0);
  for (int a = 1; a <= 6; ++a) {
    for (int b = 0; b < 3; ++b) parents.push_back(a);
  }
  for (int a = 7; a <= 24; ++a) {
    for (int b = 0; b < 2; ++b) parents.push_back(a);
  }
  parents.resize(static_cast<size_t>(T));
  std::vector<int32_t> toks(static_cast<size_t>(T)), pos(static_cast<size_t>(T)), order(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) {
    toks[static_cast<size_t>(i)] = 1000 + 7 * i;
    int depth = 0;
    for (int p = parents[static_cast<size_t>(i)]; p >= 0; p = parents[static_cast<size_t>(p)]) ++depth;
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(context + depth);
    order[static_cast<size_t>(i)] = i;  // rows are already in BFS order
  }
  const auto mask = AttentionMask::from_parents(parents);
  cuda::CopyBandwidth copy{};
  std::string error;
  if (!cuda::measure_copy_bandwidth(1ull << 30, 20, &copy, &error)) return make_error(error);
  const double copy_Bps = copy.bytes_per_s;
  const double weight_bytes = static_cast<double>(backend.weight_bytes_per_token());
  const double kv_dense_bytes = static_cast<double>(c.n_layers) * c.n_kv_heads * context * c.head_dim * 2 * 2;

  nlohmann::json rows = nlohmann::json::array();
  double dense_all_ms = 0, dense_last_ms = 0;
  const auto time_one = [&](const SparseConfig& sparse, const std::string& name) -> Status {
    nlohmann::json row = {{"verify", name}};
    SparseStats stats;
    for (LogitRows which : {LogitRows::All, LogitRows::Last}) {
      std::vector<float> logits(static_cast<size_t>(which == LogitRows::All ? T * V : V));
      std::vector<double> ms;
      for (int r = 0; r < 23; ++r) {
        SparseStats step;
        const ForwardContext ctx{nullptr, 0, &sparse, order, &step};
        const auto t0 = Clock::now();
        if (auto s = (*session)->forward(toks, pos, &mask, logits, which, &ctx); !s) return s;
        (*session)->rollback();
        if (r >= 3) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        stats = step;
      }
      row[which == LogitRows::All ? "ms_all_logits" : "ms_last_logits"] = median(ms);
    }
    const double kv_read = static_cast<double>(stats.kv_bytes_read);
    const double floor_ms = (weight_bytes + kv_read) / copy_Bps * 1e3;
    row["kv_bytes_read"] = kv_read;
    row["kv_bytes_dense"] = static_cast<double>(stats.kv_bytes_dense);
    row["byte_floor_ms"] = floor_ms;
    row["last_logits_over_floor"] = row["ms_last_logits"].get<double>() / floor_ms;
    if (name == "dense") {
      dense_all_ms = row["ms_all_logits"].get<double>();
      dense_last_ms = row["ms_last_logits"].get<double>();
    } else {
      row["dense_over_sparse_all_logits"] = dense_all_ms / row["ms_all_logits"].get<double>();
      row["dense_over_sparse_last_logits"] = dense_last_ms / row["ms_last_logits"].get<double>();
    }
    std::fprintf(stderr, "long verify %-22s %.3f ms (all logits) %.3f ms (last) floor %.3f ms KV read %.0f MB\n",
                 name.c_str(), row["ms_all_logits"].get<double>(), row["ms_last_logits"].get<double>(), floor_ms,
                 kv_read / 1e6);
    rows.push_back(row);
    return {};
  };
  if (auto s = time_one(SparseConfig{}, "dense"); !s) return s.error();
  for (QueryMode mode : {QueryMode::kFirst, QueryMode::kPerQuery, QueryMode::kGroupUnion, QueryMode::kGroupShared}) {
    if (!sparse_modes) break;
    SparseConfig sparse = *sparse_preset("sa");
    sparse.eta = eta;
    sparse.dense_below = dense_below;
    sparse.query_mode = mode;
    sparse.group_size = 4;
    if (auto s = time_one(sparse, "sparse " + std::string(to_string(mode))); !s) return s.error();
  }
  // With --profile: the kernels of 5 dense and 5 first-query sparse verifies (last logits only),
  // each into its own session file next to the decode profile's.
  nlohmann::json profiles = nlohmann::json::object();
  if (!profile_path.empty()) {
    SparseConfig first = *sparse_preset("sa");
    first.eta = eta;
    first.dense_below = dense_below;
    first.query_mode = QueryMode::kFirst;
    for (const auto& [name, sparse] : {std::pair<std::string, SparseConfig>{"dense", SparseConfig{}},
                                       std::pair<std::string, SparseConfig>{"sparse_first", first}}) {
      std::vector<float> logits(static_cast<size_t>(V));
      const ForwardContext ctx{nullptr, 0, &sparse, order, nullptr};
      if (auto s = (*session)->forward(toks, pos, &mask, logits, LogitRows::Last, &ctx); !s) return s.error();
      (*session)->rollback();  // a warm-up outside the capture (graphs, scratch)
      KernelProfile profile;
      if (auto s = profile.begin(profile_path + ".verify_" + name); !s) return s.error();
      for (int r = 0; r < 5; ++r) {
        if (auto s = (*session)->forward(toks, pos, &mask, logits, LogitRows::Last, &ctx); !s) return s.error();
        (*session)->rollback();
      }
      auto summary = profile.end(5, pdl);
      if (!summary) return summary.error();
      print_top_kernels(("long verify " + name + " under CUPTI").c_str(), *summary, 8);
      profiles[name] = *summary;
    }
  }
  const SparseConfig probe = [&] {
    SparseConfig sc = *sparse_preset("sa");
    sc.eta = eta;
    sc.dense_below = dense_below;
    return sc;
  }();
  return nlohmann::json{
      {"context", context},
      {"nodes", nodes},
      {"rows", T},
      {"tree", "pending token, then 6 x 3 x 2 nodes in BFS order, cut to --long-verify-nodes"},
      {"kv_fill",
       "random bf16 K/V and their block min/max (bench-only hook cuda_fill_kv_random_for_bench), no prefill"},
      {"seed", seed},
      {"eta", eta},
      {"dense_below", dense_below},
      {"kept_blocks_per_kv_head", kept_blocks(probe, context, 16)},
      {"committed_blocks", (context + 15) / 16},
      {"sink_blocks", probe.sink_blocks},
      {"local_blocks", probe.local_blocks},
      {"group_size", 4},
      {"copy_bandwidth_GBps", copy_Bps / 1e9},
      {"weight_bytes", weight_bytes},
      {"kv_dense_bytes", kv_dense_bytes},
      {"byte_floor_note",
       "(weight bytes + KV bytes the verify reads: bf16 K/V rows, bf16 block min/max for scoring) / "
       "copy bandwidth; logits and activations not counted"},
      {"timing",
       "host wall time of forward() (ends with the logits on the host), median of 20 after 3 warm-ups, "
       "rolled back after each; all_logits downloads T x vocab f32, last_logits computes and downloads one row"},
      {"verifies", rows},
      {"profiles", profiles}};
}

int fail(const std::string& message) {
  std::fprintf(stderr, "bench_cuda_decode: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Greedy decode speed of the CUDA backend and its per-step kernel breakdown (CUPTI)"};
  std::string model_spec = "default", synthetic, profile_path, commit = "unknown", out_path;
  int tokens = 128, reps = 3, prompt_tokens = 0;
  std::vector<int> verify_nodes;
  bool graphs = true, pdl = true, fused_attention = true;
  int64_t kv_capacity = 0;
  app.add_option("--model", model_spec, "GGUF model path or name (default: the default model)");
  app.add_option("--synthetic", synthetic,
                 "time random weights in these shapes instead (llama-3.1-8b, llama-3.1-70b, llama-3.1-405b, "
                 "smollm2-135m, mixtral-8x7b, qwen1.5-moe-a2.7b, olmoe-1b-7b)");
  app.add_option("--tokens", tokens, "decode steps per run")->check(CLI::Range(1, 100000));
  app.add_option("--reps", reps, "timed runs")->check(CLI::Range(1, 100));
  app.add_option("--prompt-tokens", prompt_tokens,
                 "prompt length in tokens (0: the encoded sentence \"The capital of France is\")")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--graphs", graphs, "replay decode steps as CUDA graphs (true|false)");
  app.add_option("--pdl", pdl, "programmatic dependent launch of the decode kernels (true|false)");
  app.add_option("--fused-decode-attention", fused_attention,
                 "a decode step's RoPE, K/V append and attention in one launch (true|false)");
  app.add_option("--kv-capacity", kv_capacity,
                 "KV cache rows of the timed runs (0: prompt + tokens + 1; larger splits the decode attention)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--verify-nodes", verify_nodes,
                 "also time tree verifies of these many draft nodes (a chain after the pending token, all logits, "
                 "rolled back), median of --verify-reps")
      ->check(CLI::Range(1, 64));
  int verify_reps = 50;
  app.add_option("--verify-reps", verify_reps, "timed verifies per tree size (after 5 warm-ups)")
      ->check(CLI::Range(1, 1000));
  std::vector<int64_t> long_contexts;
  std::vector<int> long_nodes = {60};
  bool long_sparse = true;
  double sparse_eta = 0.1;
  int64_t sparse_dense_below = 1024;
  bool tree_kernels = true;
  app.add_option("--long-verify", long_contexts,
                 "also time a tree verify at each of these many committed tokens (random KV)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--long-verify-nodes", long_nodes,
                 "draft nodes of those verifies (6 x 3 x 2 tree cut to each of these sizes; default 60)")
      ->check(CLI::Range(1, 63));
  app.add_option("--long-verify-sparse", long_sparse,
                 "also time those verifies sparse, in each query mode (true|false; false: dense only)");
  app.add_option("--sparse-eta", sparse_eta, "eta of the sparse verifies")->check(CLI::Range(0.001, 1.0));
  app.add_option("--sparse-dense-below", sparse_dense_below, "L_b of the sparse verifies");
  app.add_option("--tree-attention-kernels", tree_kernels, "dense verifies on the tree-attention kernels (true|false)");
  using Route = specula::CudaBackendOptions::GemmRoute;
  const std::map<std::string, Route> routes = {
      {"auto", Route::kAuto}, {"skinny", Route::kSkinny}, {"tc", Route::kTensorCore}, {"cublas", Route::kCublas}};
  std::string layer_route = "auto", head_route = "auto";
  bool cublaslt = false;  // the engine's default (CudaBackendOptions::cublaslt_tuned)
  bool verify_gemm = true;  // the engine's default (CudaBackendOptions::verify_gemm)
  app.add_option("--layer-route", layer_route, "GEMM route of the layers' projections at 2+ rows (A/B timing)")
      ->check(CLI::IsMember({"auto", "skinny", "tc", "cublas"}));
  app.add_option("--head-route", head_route, "GEMM route of the logits GEMM at 2+ rows (A/B timing)")
      ->check(CLI::IsMember({"auto", "skinny", "tc", "cublas"}));
  app.add_option("--cublaslt", cublaslt,
                 "stacked split-halves GEMMs on tuned cuBLASLt, else cublasGemmEx (true|false)");
  app.add_option("--verify-gemm", verify_gemm,
                 "stacked split-halves GEMMs on our wgmma kernel where the GPU runs it, else cuBLAS (true|false)");
  int64_t tree_attention_from_context = specula::CudaBackendOptions{}.tree_attention_from_context;
  app.add_option("--tree-attention-from-context", tree_attention_from_context,
                 "with --tree-attention-kernels false: wide dense verifies take those kernels from this many "
                 "committed rows on (0: never; default: the engine's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  int verify_gemm_large_rows = 0;  // the engine's default
  app.add_option("--verify-gemm-large-rows", verify_gemm_large_rows,
                 "large matrices' stacked products also on that kernel up to this many rows (0: never)")
      ->check(CLI::Range(0, 64));
  bool shared_kv = true;  // the kernels' default (kernels/cuda/shared_kv_attention.h)
  int shared_kv_pairs = 0;
  app.add_option(
      "--shared-kv-attention", shared_kv,
      "attention_at's rows of a verify share each K/V load across pairs, else one pair a block (true|false)");
  app.add_option("--shared-kv-pairs", shared_kv_pairs, "pairs a block of that kernel (0: its default)")
      ->check(CLI::IsMember({0, 2, 4, 8}));
  int shared_kv_min_blocks = 0;
  app.add_option("--shared-kv-min-blocks", shared_kv_min_blocks,
                 "blocks an SM that kernel's registers are held to (0: its default, 4 at head_dim 64 and ptxas's "
                 "count at 128; 1: ptxas's count at 64; 3: 3 at 128)")
      ->check(CLI::IsMember({0, 1, 3}));
  bool kv_multicast = true;  // the kernels' default (kernels/cuda/attention.h)
  app.add_option("--kv-multicast", kv_multicast,
                 "tree attention's two row-split CTAs of groups over 192 rows share each K/V load by TMA "
                 "multicast, else each loads it (true|false)");
  bool ws_pingpong = false;  // the kernels' default (kernels/cuda/attention.h)
  app.add_option("--ws-pingpong", ws_pingpong,
                 "tree attention's warp-specialized consumer warpgroups take turns issuing their MMAs (true|false)");
  app.add_option("--profile", profile_path, "also run once under CUPTI capture into this session file");
  app.add_option("--commit", commit, "commit the binary was built from (for the JSON)");
  app.add_option("--out", out_path, "also write the JSON here");
  CLI11_PARSE(app, argc, argv);

  if (!specula::cuda_gpu_available()) return fail("no CUDA GPU found (this bench needs one)");
  specula::cuda::set_programmatic_dependent_launch(pdl);
  specula::cuda::set_shared_kv_attention(shared_kv);
  specula::cuda::set_shared_kv_attention_pairs(shared_kv_pairs);
  specula::cuda::set_shared_kv_attention_min_blocks(shared_kv_min_blocks);
  specula::cuda::set_tree_attention_kv_multicast(kv_multicast);
  specula::cuda::set_tree_attention_ws_pingpong(ws_pingpong);
  specula::CudaBackendOptions options;
  options.cuda_graphs = graphs;
  options.tree_attention_kernels = !long_contexts.empty() && tree_kernels;
  options.fused_decode_attention = fused_attention;
  options.layer_route = routes.at(layer_route);
  options.head_route = routes.at(head_route);
  options.cublaslt_tuned = cublaslt;
  options.verify_gemm = verify_gemm;
  options.verify_gemm_large_rows = verify_gemm_large_rows;
  options.tree_attention_from_context = tree_attention_from_context;
  std::unique_ptr<specula::Model> model;
  std::unique_ptr<specula::CudaBackend> backend;
  std::vector<int32_t> prompt;
  if (!synthetic.empty()) {
    auto config = specula::synthetic_config(synthetic);
    if (!config) return fail(config.error().message);
    auto b = specula::make_synthetic_cuda_backend(*config, 1234, options);
    if (!b) return fail(b.error().message);
    backend = std::move(*b);
    for (int i = 0; i < std::max(prompt_tokens, 5); ++i) prompt.push_back(1000 + i);
  } else {
    auto m = specula::load_model(specula::resolve_model_path(model_spec).string());
    if (!m) return fail(m.error().message);
    model = std::make_unique<specula::Model>(std::move(*m));
    auto b = specula::make_cuda_backend(*model, options);
    if (!b) return fail(b.error().message);
    backend = std::move(*b);
    const auto& tok = model->tokenizer;
    if (tok.add_bos() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
    const auto ids = tok.encode("The capital of France is", false);
    prompt.insert(prompt.end(), ids.begin(), ids.end());
    // Longer prompts repeat the sentence: only the context length matters for the timing.
    while (prompt_tokens > 0 && static_cast<int>(prompt.size()) < prompt_tokens) {
      prompt.push_back(ids[prompt.size() % ids.size()]);
    }
    if (prompt_tokens > 0) prompt.resize(static_cast<size_t>(prompt_tokens));
  }
  if (static_cast<int64_t>(prompt.size()) + tokens + 1 > backend->config().context_length) {
    return fail("prompt (" + std::to_string(prompt.size()) + ") + tokens (" + std::to_string(tokens) +
                ") exceed the context length " + std::to_string(backend->config().context_length));
  }

  // Warm-up: cuBLAS handles, the graph capture, clocks.
  if (auto w = run_once(*backend, prompt, std::min(tokens, 8), {}, kv_capacity); !w) return fail(w.error().message);
  if (auto w = run_once(*backend, prompt, std::min(tokens, 8), {}, kv_capacity, Pick::kHostArgmax); !w) {
    return fail(w.error().message);
  }
  // The two ways of picking a step's token, alternating run by run (same clocks, same cache).
  std::vector<double> tps, prefill_ms, host_tps, step_us, host_forward_us, host_argmax_us;
  std::vector<int32_t> first_tokens, host_first_tokens;
  // Whether every repetition of a pick gave its first run's tokens (run-to-run determinism).
  bool device_runs_equal = true, host_runs_equal = true;
  int64_t nonfinite_logits = 0;
  double min_top2_gap = std::numeric_limits<double>::infinity();
  for (int r = 0; r < reps; ++r) {
    auto run = run_once(*backend, prompt, tokens, {}, kv_capacity, Pick::kDevice);
    if (!run) return fail(run.error().message);
    tps.push_back(run->decoded / run->decode_s);
    step_us.push_back(run->forward_s / run->decoded * 1e6);
    prefill_ms.push_back(run->prefill_ms);
    if (r == 0) first_tokens = run->tokens;
    device_runs_equal = device_runs_equal && run->tokens == first_tokens;
    auto host = run_once(*backend, prompt, tokens, {}, kv_capacity, Pick::kHostArgmax);
    if (!host) return fail(host.error().message);
    host_tps.push_back(host->decoded / host->decode_s);
    host_forward_us.push_back(host->forward_s / host->decoded * 1e6);
    host_argmax_us.push_back(host->host_argmax_s / host->decoded * 1e6);
    if (r == 0) host_first_tokens = host->tokens;
    host_runs_equal = host_runs_equal && host->tokens == host_first_tokens;
    nonfinite_logits += host->nonfinite_logits;
    min_top2_gap = std::min(min_top2_gap, host->min_top2_gap);
  }
  std::fprintf(stderr,
               "decode: %.0f tokens/s with the argmax on the GPU (forward_greedy %.1f us a step); %.0f tokens/s with "
               "the logits downloaded (forward %.1f us + host argmax %.1f us a step); tokens %s\n",
               median(tps), median(step_us), median(host_tps), median(host_forward_us), median(host_argmax_us),
               first_tokens == host_first_tokens ? "equal" : "DIFFER");
  const double weight_bytes = static_cast<double>(backend->weight_bytes_per_token());
  nlohmann::json results = {
      {"model",
       synthetic.empty() ? backend->config().name : "synthetic " + synthetic + " (random weights, timing only)"},
      {"synthetic", !synthetic.empty()},
      {"cuda_graphs", graphs},
      {"programmatic_dependent_launch", pdl},
      {"fused_decode_attention", fused_attention},
      {"layer_route", layer_route},
      {"head_route", head_route},
      {"cublaslt_tuned", cublaslt},
      {"verify_gemm", verify_gemm},
      {"verify_gemm_large_rows", verify_gemm_large_rows},
      {"tree_attention_from_context", tree_attention_from_context},
      {"shared_kv_attention", shared_kv},
      {"shared_kv_pairs", shared_kv_pairs},
      {"shared_kv_min_blocks", shared_kv_min_blocks},
      {"kv_multicast", kv_multicast},
      {"ws_pingpong", ws_pingpong},
      {"kv_capacity", kv_capacity},
      {"prompt_tokens", prompt.size()},
      {"decode_tokens", tokens},
      {"token_pick", "forward_greedy: argmax per row on the GPU, one int32 id downloaded (pinned)"},
      {"decode_tokens_per_s_runs", tps},
      {"decode_tokens_per_s_median", median(tps)},
      {"decode_forward_greedy_us_per_step_median", median(step_us)},
      {"decode_host_argmax",
       {{"token_pick",
         "forward() downloads the (vocab) f32 logits to a pageable vector, std::max_element on the host (the "
         "decode loop before forward_greedy)"},
        {"decode_tokens_per_s_runs", host_tps},
        {"decode_tokens_per_s_median", median(host_tps)},
        {"forward_us_per_step_median", median(host_forward_us)},
        {"host_argmax_us_per_step_median", median(host_argmax_us)}}},
      {"tokens_equal_to_host_argmax", first_tokens == host_first_tokens},
      {"first_differing_step", first_difference(first_tokens, host_first_tokens)},
      {"device_pick_runs_equal", device_runs_equal},
      {"host_pick_runs_equal", host_runs_equal},
      {"host_pick_nonfinite_logits", nonfinite_logits},
      {"host_pick_min_top2_logit_gap", min_top2_gap},
      {"prefill_ms_runs", prefill_ms},
      {"weight_bytes_per_token", weight_bytes},
      {"weight_read_gb_per_s_median", weight_bytes * median(tps) / 1e9},
      {"first_run_first_tokens",
       std::vector<int32_t>(first_tokens.begin(), first_tokens.begin() + std::min<size_t>(16, first_tokens.size()))}};

  if (!verify_nodes.empty()) {
    // After the prompt: [pending, node 1..n] as a chain under its tree mask, every row's logits
    // (what a speculative round needs), then a rollback, so each repetition sees the same cache.
    const int64_t V = backend->config().vocab_size;
    const int max_nodes = *std::max_element(verify_nodes.begin(), verify_nodes.end());
    auto session = backend->start(16, static_cast<int64_t>(prompt.size()) + max_nodes + 2);
    if (!session) return fail(session.error().message);
    std::vector<int32_t> pos(prompt.size());
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<float> logits(static_cast<size_t>(V));
    if (auto st = (*session)->forward(prompt, pos, nullptr, logits, specula::LogitRows::Last); !st) {
      return fail(st.error().message);
    }
    (*session)->commit_all();
    nlohmann::json verifies = nlohmann::json::array();
    for (int n : verify_nodes) {
      const int T = n + 1;
      std::vector<int32_t> toks(static_cast<size_t>(T)), tpos(static_cast<size_t>(T));
      std::vector<int> parents(static_cast<size_t>(T));
      for (int i = 0; i < T; ++i) {
        toks[static_cast<size_t>(i)] = 1000 + i;
        tpos[static_cast<size_t>(i)] = static_cast<int32_t>(prompt.size()) + i;
        parents[static_cast<size_t>(i)] = i - 1;
      }
      const auto mask = specula::AttentionMask::from_parents(parents);
      std::vector<float> all(static_cast<size_t>(T * V));
      std::vector<int32_t> greedy(static_cast<size_t>(T)), host_greedy(static_cast<size_t>(T));
      std::vector<double> ms, greedy_ms;
      for (int r = 0; r < verify_reps + 5; ++r) {
        const auto t0 = Clock::now();
        if (auto st = (*session)->forward(toks, tpos, &mask, all, specula::LogitRows::All); !st) {
          return fail(st.error().message);
        }
        (*session)->rollback();
        const auto t1 = Clock::now();
        if (auto st = (*session)->forward_greedy(toks, tpos, &mask, greedy, specula::LogitRows::All); !st) {
          return fail(st.error().message);
        }
        (*session)->rollback();
        if (r >= 5) {
          ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          greedy_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t1).count());
        }
      }
      for (int i = 0; i < T; ++i) {
        const auto row = all.begin() + static_cast<std::ptrdiff_t>(i) * V;
        host_greedy[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(row, row + V) - row);
      }
      nlohmann::json row = {{"nodes", n},
                            {"rows", T},
                            {"verify_ms_median", median(ms)},
                            {"verify_ms_note", "all T x vocab f32 logits downloaded (pageable)"},
                            {"verify_greedy_ms_median", median(greedy_ms)},
                            {"verify_greedy_note", "forward_greedy: T argmax ids downloaded"},
                            {"greedy_equal_to_host_argmax", greedy == host_greedy},
                            {"over_decode_step", median(ms) * median(tps) / 1e3}};
      std::fprintf(stderr, "verify %d nodes: %.3f ms (all logits) %.3f ms (forward_greedy) ids %s\n", n, median(ms),
                   median(greedy_ms), greedy == host_greedy ? "equal" : "DIFFER");
      if (!profile_path.empty() && n == verify_nodes.front()) {
        // Where a verify's time goes: 10 verifies (and their rollbacks) under CUPTI, on a fresh
        // session whose verify graph is captured after begin() turned programmatic launch off
        // (the timed session's graph keeps its programmatic edges, so each kernel's duration
        // would include its wait for the one before).
        auto fresh = backend->start(16, static_cast<int64_t>(prompt.size()) + max_nodes + 2);
        if (!fresh) return fail(fresh.error().message);
        if (auto st = (*fresh)->forward(prompt, pos, nullptr, logits, specula::LogitRows::Last); !st) {
          return fail(st.error().message);
        }
        (*fresh)->commit_all();
        KernelProfile profile;
        if (auto st = profile.begin(profile_path + ".verify_" + std::to_string(n)); !st)
          return fail(st.error().message);
        for (int r = 0; r < 10; ++r) {
          if (auto st = (*fresh)->forward(toks, tpos, &mask, all, specula::LogitRows::All); !st) {
            return fail(st.error().message);
          }
          (*fresh)->rollback();
        }
        auto summary = profile.end(10, pdl);
        if (!summary) return fail(summary.error().message);
        print_top_kernels(("verify of " + std::to_string(n) + " nodes under CUPTI").c_str(), *summary, 10);
        row["profile"] = *summary;
      }
      verifies.push_back(row);
    }
    results["verify"] = verifies;
  }

  // One context and one tree size: results.long_verify, as before; several: results.long_verifies,
  // one record per pair, the contexts outermost.
  nlohmann::json long_verifies = nlohmann::json::array();
  for (const int64_t context : long_contexts) {
    for (const int nodes : long_nodes) {
      const bool first = long_verifies.empty();  // only the first pair is profiled
      auto long_verify = time_long_verify(*backend, context, nodes, sparse_eta, sparse_dense_below, long_sparse,
                                          first ? profile_path : std::string(), pdl);
      if (!long_verify) return fail(long_verify.error().message);
      long_verifies.push_back(*long_verify);
    }
  }
  if (long_verifies.size() == 1) {
    results["long_verify"] = long_verifies[0];
  } else if (!long_verifies.empty()) {
    results["long_verifies"] = long_verifies;
  }

  if (!profile_path.empty()) {
    // Capture only the decode steps: it starts after the prefill (whose logits came back, so
    // the GPU is idle) and stops after the last step.
    KernelProfile profile;
    auto run = run_once(
        *backend, prompt, tokens, [&]() { return profile.begin(profile_path); }, kv_capacity);
    if (!run) return fail(run.error().message);
    auto summary = profile.end(tokens, pdl);
    if (!summary) return fail(summary.error().message);
    (*summary)["tokens_per_s_under_capture"] = run->decoded / run->decode_s;
    print_top_kernels("decode step under CUPTI", *summary, 8);
    results["profile"] = *summary;
  }

  nlohmann::json out = {{"bench", "cuda_decode"},
                        {"date", specula::bench::utc_now()},
                        {"commit", commit},
                        {"command", specula::bench::command_line(argc, argv)},
                        {"device", {{"name", backend->device()}, {"driver", specula::bench::nvidia_driver()}}},
                        {"host", specula::bench::host_info()},
                        {"results", results}};
  const std::string text = out.dump(2);
  std::puts(text.c_str());
  if (!out_path.empty()) std::ofstream(out_path) << text << "\n";
  return 0;
}

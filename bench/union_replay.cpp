// Group-union exact against per-query sparse tree verify, on block selections recorded from real
// prompts (bench/selection_overlap.py export; bench/selection_replay.h builds the lists). Both
// modes give every node the same blocks; group-union loads each block once per group of
// --group-size nodes, per-query once per node. KV contents are random (they change neither the
// bytes nor the time). Per problem and mode: bytes (unique and loaded), median time, GB/s against
// the device-to-device copy bandwidth measured in the same run. One JSON object on stdout (and --out).
//
// Shapes:
//   real     the case's own KV heads (SmolLM2-135M: 3), GQA 3 (9 q heads), its committed context
//            (~4K tokens), head_dim 128 (the kernels' only one; the model's is 64)
//   llama8b  8 KV heads, 32 q heads, --context tokens: KV head h takes layer 3j + h / 3, head h % 3
//            of one round (problem j), each real block mapped to ~context / (16 · nb) blocks by
//            --mapping stretch (neighbours) or interleave (the real sequence repeated; see
//            ReplayShape) ("real overlap pattern, synthetic shape")
// Overlaps: "real" as recorded; "random" the same cases with every row's scored blocks (all but
// block 0 and the last two, which the sink and local rules force) drawn uniformly from the others,
// same counts: the overlap random data gives, at the same list sizes.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <tuple>

#include "bench/bench_info.h"
#include "bench/cuda_timing.h"
#include "bench/selection_replay.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.h"
#include "tests/kernels/cuda/attention_reference.h"

const char* const specula::bench::kBenchName = "bench_union_replay";

namespace {

using specula::bench::check_ok;
using specula::bench::dalloc;
using specula::bench::median_ms;
using specula::bench::sparse_read_bytes;

using namespace specula::cuda;
using specula::bench::HeadSource;
using specula::bench::HostLists;
using specula::bench::ReplayShape;
using specula::bench::SelectionCase;

template <class T>
T* upload(const std::vector<T>& host) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(host.size() * sizeof(T), 256)));
  CHECK_CUDA(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

// One kernel problem: KV head sources, the case that gives the tree, the shape.
struct Problem {
  std::vector<HeadSource> heads;
  int tree_case = 0;
  ReplayShape shape;
};

std::vector<Problem> problems_for(const std::vector<SelectionCase>& cases, const std::string& shape, int context,
                                  bool interleave) {
  std::vector<Problem> out;
  if (shape == "real") {
    for (int c = 0; c < static_cast<int>(cases.size()); ++c) {
      Problem p;
      p.tree_case = c;
      for (int h = 0; h < cases[size_t(c)].kv_heads; ++h) p.heads.push_back({c, h});
      p.shape.kv_heads = cases[size_t(c)].kv_heads;
      p.shape.prefix_len = cases[size_t(c)].committed_tokens;
      p.shape.committed_blocks = cases[size_t(c)].committed_blocks;
      out.push_back(p);
    }
    return out;
  }
  // llama8b: consecutive layers of one (session, round), 8 heads from 3 layers of 3 heads.
  std::map<std::pair<int, int>, std::vector<int>> by_round;
  for (int c = 0; c < static_cast<int>(cases.size()); ++c)
    by_round[{cases[size_t(c)].session, cases[size_t(c)].round}].push_back(c);
  for (auto& [key, idx] : by_round) {
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return cases[size_t(a)].layer < cases[size_t(b)].layer; });
    std::vector<HeadSource> pool;
    for (int c : idx) {
      for (int h = 0; h < cases[size_t(c)].kv_heads; ++h) pool.push_back({c, h});
    }
    const int per_layer = cases[size_t(idx[0])].kv_heads;
    const int layers_per_problem = (8 + per_layer - 1) / per_layer;
    for (size_t first = 0; first + size_t(layers_per_problem) <= idx.size(); first += size_t(layers_per_problem)) {
      Problem p;
      p.tree_case = idx[first];
      p.heads.assign(pool.begin() + static_cast<std::ptrdiff_t>(first * size_t(per_layer)),
                     pool.begin() + static_cast<std::ptrdiff_t>(first * size_t(per_layer) + 8));
      p.shape.kv_heads = 8;
      p.shape.prefix_len = context;
      p.shape.committed_blocks = (context + kAttnBlockSize - 1) / kAttnBlockSize;
      p.shape.interleave = interleave;
      out.push_back(p);
    }
  }
  return out;
}

// Mean over groups of `group_size` nodes (and heads) of the mean pairwise Jaccard, and the sum of
// union sizes over the sum of set sizes, of the mapped sets.
std::pair<double, double> overlap_of(const std::vector<std::vector<std::vector<int32_t>>>& sets, int group_size) {
  double jac = 0, union_sum = 0, size_sum = 0;
  int groups = 0;
  for (const auto& head : sets) {
    for (size_t g0 = 0; g0 < head.size(); g0 += size_t(group_size)) {
      const size_t g1 = std::min(head.size(), g0 + size_t(group_size));
      std::vector<int32_t> u;
      double pair_sum = 0;
      int pairs = 0;
      for (size_t i = g0; i < g1; ++i) {
        u.insert(u.end(), head[i].begin(), head[i].end());
        size_sum += double(head[i].size());
        for (size_t j = i + 1; j < g1; ++j) {
          std::vector<int32_t> both;
          std::set_intersection(head[i].begin(), head[i].end(), head[j].begin(), head[j].end(),
                                std::back_inserter(both));
          pair_sum += double(both.size()) / double(head[i].size() + head[j].size() - both.size());
          ++pairs;
        }
      }
      std::sort(u.begin(), u.end());
      union_sum += double(std::unique(u.begin(), u.end()) - u.begin());
      if (pairs) {
        jac += pair_sum / pairs;
        ++groups;
      }
    }
  }
  return {groups ? jac / groups : 0.0, size_sum > 0 ? union_sum / size_sum : 0.0};
}

float bf16_to_float(uint16_t x) {
  uint32_t u = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string commit = "unknown", out_path, file;
  std::vector<std::string> shapes = {"real", "llama8b"};
  std::vector<int> node_counts = {16, 32, 64};
  int iterations = 20, group_size = 8, context = 65536, max_problems = 0, copy_mb = 1024;
  uint64_t seed = 1;
  std::string mapping = "stretch";
  bool capacity_mode = false;
  CLI::App app{"bench_union_replay: group-union exact vs per-query sparse verify on recorded real selections"};
  app.add_option("--file", file, "selections (bench/selection_overlap.py export)")->required();
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  app.add_option("--shapes", shapes)->check(CLI::IsMember({"real", "llama8b"}));
  app.add_option("--nodes", node_counts)->check(CLI::Range(1, 64));
  app.add_option("--iterations", iterations)->check(CLI::Range(1, 1000));
  app.add_option("--group-size", group_size)->check(CLI::Range(2, 64));
  app.add_option("--context", context, "llama8b: committed tokens")->check(CLI::Range(1024, 1 << 20));
  app.add_option("--max-problems", max_problems, "per shape, 0 = all");
  app.add_flag("--capacity-mode", capacity_mode,
               "also time group-union with lists laid out at select_blocks' capacity (group size x per-node "
               "list size), which the kernel's plan sizes its chunks by");
  app.add_option("--mapping", mapping, "llama8b: real block -> problem blocks")
      ->check(CLI::IsMember({"stretch", "interleave"}));
  app.add_option("--seed", seed, "random overlap baseline and KV values");
  app.add_option("--copy-mb", copy_mb, "buffer of the copy-bandwidth measurement (small under compute-sanitizer)")
      ->check(CLI::Range(1, 8192));
  CLI11_PARSE(app, argc, argv);
  std::vector<SelectionCase> cases;
  std::string error;
  if (!specula::bench::read_selection_file(file, &cases, &error)) {
    std::fprintf(stderr, "bench_union_replay: %s\n", error.c_str());
    return 1;
  }
  if (device_count() == 0) {
    std::fprintf(stderr, "bench_union_replay: skipped: no GPU (%s)\n", no_device_reason().c_str());
    return 0;
  }
  const auto copy = specula::bench::measure_copy_ceiling(uint64_t(copy_mb) << 20);
  const double copy_GBps = copy.GBps();
  std::mt19937_64 rng(seed);
  const auto random_cases = specula::bench::randomize_selections(cases, rng);
  constexpr size_t kBlockBytes = size_t(kAttnBlockSize) * kAttnHeadDim * 2;  // one head, K or V

  nlohmann::json rows = nlohmann::json::array(), summary = nlohmann::json::array();
  double worst_mode_diff = 0;
  for (const std::string& shape : shapes) {
    auto problems = problems_for(cases, shape, context, mapping == "interleave");
    if (max_problems > 0 && static_cast<int>(problems.size()) > max_problems) problems.resize(size_t(max_problems));
    if (problems.empty()) continue;
    const int kv_heads = problems[0].shape.kv_heads, q_heads = kv_heads * (shape == "real" ? 3 : 4);
    int max_prefix = 0;
    for (const auto& p : problems) max_prefix = std::max(max_prefix, p.shape.prefix_len);
    // KV for the longest prefix + 64 nodes. Copies rotate so that a timed run finds no blocks of the
    // runs before it in L2 (50 MB): at least 4, and at least 512 MB of K+V in all.
    const auto kvp = specula::cuda::testing::make_problem(rng, kv_heads, q_heads, 64, max_prefix, false);
    const size_t pool_bytes = size_t(kvp.num_physical) * kv_heads * kBlockBytes;
    const int copies = static_cast<int>(std::max<size_t>(4, (512ull << 20) / (2 * pool_bytes)));
    std::vector<int32_t> table_all;
    for (int c = 0; c < copies; ++c) {
      for (int32_t x : kvp.block_table) table_all.push_back(x + c * kvp.num_physical);
    }
    uint16_t *k = nullptr, *v = nullptr;
    CHECK_CUDA(cudaMalloc(&k, pool_bytes * copies));
    CHECK_CUDA(cudaMalloc(&v, pool_bytes * copies));
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(
          cudaMemcpy(reinterpret_cast<char*>(k) + c * pool_bytes, kvp.k.data(), pool_bytes, cudaMemcpyHostToDevice));
      CHECK_CUDA(
          cudaMemcpy(reinterpret_cast<char*>(v) + c * pool_bytes, kvp.v.data(), pool_bytes, cudaMemcpyHostToDevice));
    }
    int32_t* table = upload(table_all);
    uint16_t* q = upload(kvp.q);
    uint16_t* out_pq = upload(kvp.q);
    uint16_t* out_gu = upload(kvp.q);
    auto kv_of = [&](int c) {
      return PagedKv{k, v, nullptr, nullptr, table + size_t(c) * kvp.block_table.size(), kv_heads};
    };
    // Sums per (overlap, nodes, mode) for the summary.
    std::map<std::tuple<std::string, int, std::string>, std::array<double, 5>>
        sums;  // ms, unique, loaded, problems, list entries
    for (const char* overlap_name : {"real", "random"}) {
      const std::string overlap = overlap_name;
      const auto& src = overlap == "real" ? cases : random_cases;
      for (size_t pi = 0; pi < problems.size(); ++pi) {
        const Problem& pb = problems[pi];
        const SelectionCase& tree = src[size_t(pb.tree_case)];
        for (int nodes : node_counts) {
          if (nodes > tree.rows) continue;
          ReplayShape rs = pb.shape;
          rs.nodes = nodes;
          const auto anc_host = specula::bench::ancestor_masks(tree, nodes);
          uint64_t* anc = upload(anc_host);
          const TreeQueries tq{q, anc, nodes, q_heads, rs.prefix_len, kvp.scale};
          const auto [jaccard, union_over_sizes] =
              overlap_of(specula::bench::mapped_sets(src, pb.heads, rs), group_size);
          const double io_bytes = 2.0 * nodes * q_heads * kAttnHeadDim * 2 + nodes * 8.0;
          // Each union mode's output against per-query's: the same blocks per node, so equal up to
          // summation order.
          const auto compare = [&]() {
            CHECK_CUDA(cudaDeviceSynchronize());
            std::vector<uint16_t> a(size_t(nodes) * q_heads * kAttnHeadDim), b(a.size());
            CHECK_CUDA(cudaMemcpy(a.data(), out_pq, a.size() * 2, cudaMemcpyDeviceToHost));
            CHECK_CUDA(cudaMemcpy(b.data(), out_gu, b.size() * 2, cudaMemcpyDeviceToHost));
            double num = 0, den = 0;
            for (size_t i = 0; i < a.size(); ++i) {
              const double x = bf16_to_float(a[i]), y = bf16_to_float(b[i]);
              if (!std::isfinite(x) || !std::isfinite(y)) {
                std::fprintf(stderr,
                             "bench_union_replay: %s problem %zu nodes %d: output %zu not written or not finite\n",
                             shape.c_str(), pi, nodes, i);
                std::exit(1);
              }
              num += (x - y) * (x - y);
              den += y * y;
            }
            worst_mode_diff = std::max(worst_mode_diff, std::sqrt(num / std::max(den, 1e-30)));
          };
          int per_query_max_blocks = 0;
          for (int m = 0; m < (capacity_mode ? 3 : 2); ++m) {
            const int gs = m == 0 ? 1 : group_size;
            HostLists hl = specula::bench::build_lists(src, pb.heads, rs, gs);
            if (m == 0) per_query_max_blocks = hl.max_blocks;
            if (m == 2) {
              const int all_blocks = (rs.prefix_len + nodes + kAttnBlockSize - 1) / kAttnBlockSize;
              hl = specula::bench::with_capacity(hl, std::min(all_blocks, gs * per_query_max_blocks));
            }
            const auto counts = specula::bench::count_lists(hl);
            BlockLists lists{upload(hl.blocks), upload(hl.members), upload(hl.counts),
                             hl.groups,         hl.group_size,      hl.max_blocks};
            const size_t ws_bytes = attention_workspace_bytes(tq, kv_heads, hl.groups, hl.group_size, hl.max_blocks);
            void* ws = dalloc(ws_bytes);
            uint16_t* out = m == 0 ? out_pq : out_gu;
            CHECK_CUDA(cudaMemset(out, 0xff, kvp.q.size() * 2));  // NaN: every element must be written
            const double ms = median_ms(
                [&](int i) {
                  check_ok(tree_attention_sparse(kv_of(i % copies), tq, lists, out, ws, ws_bytes, nullptr, &error),
                           error);
                },
                iterations);
            const auto bytes = sparse_read_bytes(double(counts.unique), double(counts.loaded),
                                                 double(hl.groups) * kv_heads, kBlockBytes, io_bytes);
            const std::string mode = m == 0 ? "per_query" : m == 1 ? "group_union" : "group_union_capacity";
            rows.push_back({{"shape", shape},
                            {"overlap", overlap},
                            {"problem", pi},
                            {"session", tree.session},
                            {"round", tree.round},
                            {"layer", tree.layer},
                            {"nodes", nodes},
                            {"mode", mode},
                            {"group_size", hl.group_size},
                            {"prefix_len", rs.prefix_len},
                            {"committed_blocks", rs.committed_blocks},
                            {"jaccard_in_group", jaccard},
                            {"union_over_sizes_in_group", union_over_sizes},
                            {"list_capacity", hl.max_blocks},
                            {"blocks_loaded", counts.loaded},
                            {"blocks_unique", counts.unique},
                            {"ms", ms},
                            {"bytes_unique", bytes.unique},
                            {"bytes_loaded", bytes.loaded},
                            {"GBps_unique", bytes.unique / ms / 1e6},
                            {"GBps_loaded", bytes.loaded / ms / 1e6}});
            auto& s = sums[{overlap, nodes, mode}];
            s[0] += ms, s[1] += bytes.unique, s[2] += bytes.loaded, s[3] += 1, s[4] += double(counts.loaded);
            cudaFree(ws);
            cudaFree(lists.blocks);
            cudaFree(lists.members);
            cudaFree(lists.counts);
            if (m > 0) compare();
          }
          cudaFree(anc);
        }
      }
    }
    for (const auto& [key, s] : sums) {
      const auto& [overlap, nodes, mode] = key;
      const auto& pq = sums.at({overlap, nodes, "per_query"});
      summary.push_back({{"shape", shape},
                         {"overlap", overlap},
                         {"nodes", nodes},
                         {"mode", mode},
                         {"problems", s[3]},
                         {"mean_ms", s[0] / s[3]},
                         {"mean_bytes_unique", s[1] / s[3]},
                         {"mean_bytes_loaded", s[2] / s[3]},
                         {"GBps_unique", s[1] / s[0] / 1e6},
                         {"GBps_loaded", s[2] / s[0] / 1e6},
                         {"fraction_of_copy_loaded", s[2] / s[0] / 1e6 / copy_GBps},
                         {"fraction_of_copy_unique", s[1] / s[0] / 1e6 / copy_GBps},
                         {"loaded_over_per_query", s[2] / pq[2]},
                         {"time_over_per_query", s[0] / pq[0]}});
    }
    for (void* p : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(table), static_cast<void*>(q),
                    static_cast<void*>(out_pq), static_cast<void*>(out_gu)})
      cudaFree(p);
  }
  if (worst_mode_diff > 2e-2) {
    std::fprintf(stderr, "bench_union_replay: per-query and group-union outputs differ: rel err %.3g\n",
                 worst_mode_diff);
    return 1;
  }

  nlohmann::json result = {
      {"bench", "union_replay"},
      {"date", specula::bench::utc_now()},
      {"device", specula::bench::device_json()},
      {"host", specula::bench::host_info()},
      {"commit", commit},
      {"command", specula::bench::command_line(argc, argv)},
      {"seed", seed},
      {"group_size", group_size},
      {"mapping", mapping},
      {"selections", file},
      {"cases", cases.size()},
      {"per_query_vs_group_union_output_rel_err_max", worst_mode_diff},
      {"bytes_counted",
       "unique = distinct KV blocks (K+V) per kv head over all lists; loaded = every (group, kv head) "
       "list entry; both + lists (12 B an entry) + q + out + ancestors"},
      {"timing",
       "tree_attention_sparse only (lists given), median of --iterations CUDA-event-timed calls after 3 "
       "warm-ups; KV pool copies rotate past L2"},
      {"summary", summary},
      {"rows", rows},
  };
  result.update(copy.json());
  std::printf("copy %.0f GB/s; per-query vs group-union output rel err max %.2g\n", copy_GBps, worst_mode_diff);
  std::printf("%-8s %-7s %5s %-20s %9s %10s %10s %9s %9s %8s %8s\n", "shape", "overlap", "nodes", "mode", "mean_ms",
              "MB_unique", "MB_loaded", "GBps_ld", "copy_ld", "ld/pq", "t/pq");
  for (const auto& r : summary) {
    std::printf("%-8s %-7s %5d %-20s %9.4f %10.2f %10.2f %9.0f %8.0f%% %8.3f %8.3f\n",
                r["shape"].get<std::string>().c_str(), r["overlap"].get<std::string>().c_str(), r["nodes"].get<int>(),
                r["mode"].get<std::string>().c_str(), r["mean_ms"].get<double>(),
                r["mean_bytes_unique"].get<double>() / 1e6, r["mean_bytes_loaded"].get<double>() / 1e6,
                r["GBps_loaded"].get<double>(), 100 * r["fraction_of_copy_loaded"].get<double>(),
                r["loaded_over_per_query"].get<double>(), r["time_over_per_query"].get<double>());
  }
  if (!out_path.empty()) std::ofstream(out_path) << result.dump(1) << "\n";
  return 0;
}

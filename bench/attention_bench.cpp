// Tree-verify attention on the GPU: dense and the four sparse query modes, at several contexts and
// tree sizes, Llama-3.1-8B head shape by default (32 q heads, 8 kv heads, D 128, bf16, B 16).
// Reports achieved GB/s on the bytes each kernel must read or write, against the device-to-device
// copy bandwidth measured in the same run. One JSON object on stdout (and --out).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "bench/bench_info.h"
#include "bench/cuda_timing.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.h"
#include "tests/kernels/cuda/attention_reference.h"

const char* const specula::bench::kBenchName = "bench_attention";

namespace {

using specula::bench::batched_ms;
using specula::bench::check_ok;
using specula::bench::dalloc;
using specula::bench::median_ms;
using specula::bench::sparse_read_bytes;

using namespace specula::cuda;

}  // namespace

int main(int argc, char** argv) {
  std::string commit = "unknown", out_path;
  std::vector<int> contexts = {8192, 16384, 32768, 65536, 131072}, node_counts = {8, 16, 32, 64};
  int iterations = 20, batch_calls = 50, q_heads = 32, kv_heads = 8, top_k = 128, group_size = 8;
  double keep_fraction = 0;  // > 0: top_k = ceil(keep_fraction · committed blocks) instead of --top-k
  bool dense_only = false;
  std::string kv_multicast = "on", ws_pingpong = "off";  // the kernels' defaults (kernels/cuda/attention.h)
  // Which kernels run: "dense" and the sparse modes by query_mode_name (a profiler run picks one).
  const std::vector<std::string> all_kernels = {"dense", "per_query", "first_query", "group_union", "group_shared"};
  std::vector<std::string> kernels = all_kernels;
  CLI::App app{"bench_attention: tree-verify attention (dense and sparse) bandwidth"};
  app.add_option("--commit", commit);
  app.add_option("--out", out_path);
  app.add_option("--contexts", contexts)->check(CLI::Range(16, 1 << 20));
  app.add_option("--nodes", node_counts)->check(CLI::Range(1, 64));
  app.add_option("--iterations", iterations)->check(CLI::Range(1, 1000));
  app.add_option("--batch-calls", batch_calls, "calls a batch of the dense rows' ms_batched timing")
      ->check(CLI::Range(1, 1000));
  app.add_option("--q-heads", q_heads)->check(CLI::Range(1, 128));
  app.add_option("--kv-heads", kv_heads)->check(CLI::Range(1, 128));
  app.add_option("--top-k", top_k)->check(CLI::Range(0, 1 << 16));
  app.add_option("--group-size", group_size)->check(CLI::Range(1, 64));
  app.add_option("--keep-fraction", keep_fraction,
                 "blocks kept by score as a share of the context's (plus sink, local, tree)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--dense-only", dense_only, "skip block selection and the sparse kernels (--kernels dense)");
  app.add_option("--kernels", kernels, "which of dense, per_query, first_query, group_union, group_shared run")
      ->check(CLI::IsMember(all_kernels));
  app.add_option("--kv-multicast", kv_multicast,
                 "on: the two row-split CTAs of groups over 192 rows share each K/V load by TMA multicast; off: "
                 "each loads it (A/B)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--ws-pingpong", ws_pingpong,
                 "on: the warp-specialized tier's consumer warpgroups (65..256 rows a group) take turns issuing their "
                 "MMAs; off: each issues when its stage is in (A/B)")
      ->check(CLI::IsMember({"on", "off"}));
  CLI11_PARSE(app, argc, argv);
  if (dense_only) kernels = {"dense"};
  set_tree_attention_kv_multicast(kv_multicast == "on");
  set_tree_attention_ws_pingpong(ws_pingpong == "on");
  auto runs = [&](const std::string& name) { return std::find(kernels.begin(), kernels.end(), name) != kernels.end(); };
  if (q_heads % kv_heads != 0) {
    std::fprintf(stderr, "bench_attention: --q-heads must be a multiple of --kv-heads\n");
    return 2;
  }
  if (device_count() == 0) {
    std::fprintf(stderr, "bench_attention: skipped: no GPU (%s)\n", no_device_reason().c_str());
    return 0;
  }
  const auto copy = specula::bench::measure_copy_ceiling(1ull << 30);
  const double copy_GBps = copy.GBps();
  std::string error;
  const int max_nodes = *std::max_element(node_counts.begin(), node_counts.end());
  const uint64_t seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::mt19937_64 rng(seed);
  constexpr size_t kBlockBytes = size_t(kAttnBlockSize) * kAttnHeadDim * 2;  // one head, K or V

  nlohmann::json rows = nlohmann::json::array();
  for (int ctx : contexts) {
    // KV for ctx + max_nodes tokens; copies of the pool rotate so that no run reads from L2.
    const auto p = specula::cuda::testing::make_problem(rng, kv_heads, q_heads, max_nodes, ctx, false);
    const size_t pool_bytes = size_t(p.num_physical) * kv_heads * kBlockBytes;
    const int copies = static_cast<int>(std::max<size_t>(1, (512ull << 20) / (2 * pool_bytes)));
    auto* k = static_cast<uint16_t*>(dalloc(pool_bytes * copies));
    auto* v = static_cast<uint16_t*>(dalloc(pool_bytes * copies));
    const size_t meta_bytes = size_t(p.num_physical) * kv_heads * kAttnHeadDim * 2;
    auto* bmin = static_cast<uint16_t*>(dalloc(meta_bytes * copies));
    auto* bmax = static_cast<uint16_t*>(dalloc(meta_bytes * copies));
    auto* table = static_cast<int32_t*>(dalloc(p.block_table.size() * 4 * copies));
    for (int c = 0; c < copies; ++c) {
      CHECK_CUDA(
          cudaMemcpy(reinterpret_cast<char*>(k) + c * pool_bytes, p.k.data(), pool_bytes, cudaMemcpyHostToDevice));
      CHECK_CUDA(
          cudaMemcpy(reinterpret_cast<char*>(v) + c * pool_bytes, p.v.data(), pool_bytes, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(reinterpret_cast<char*>(bmin) + c * meta_bytes, p.bmin.data(), meta_bytes,
                            cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(reinterpret_cast<char*>(bmax) + c * meta_bytes, p.bmax.data(), meta_bytes,
                            cudaMemcpyHostToDevice));
      std::vector<int32_t> t = p.block_table;
      for (auto& x : t) x += c * p.num_physical;
      CHECK_CUDA(cudaMemcpy(table + c * t.size(), t.data(), t.size() * 4, cudaMemcpyHostToDevice));
    }
    auto* q = static_cast<uint16_t*>(dalloc(p.q.size() * 2));
    auto* anc = static_cast<uint64_t*>(dalloc(p.ancestors.size() * 8));
    auto* out = static_cast<uint16_t*>(dalloc(p.q.size() * 2));
    CHECK_CUDA(cudaMemcpy(q, p.q.data(), p.q.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(anc, p.ancestors.data(), p.ancestors.size() * 8, cudaMemcpyHostToDevice));
    auto kv_of = [&](int c) { return PagedKv{k, v, bmin, bmax, table + c * p.block_table.size(), kv_heads}; };

    for (int nodes : node_counts) {
      TreeQueries tq{q, anc, nodes, q_heads, ctx, p.scale};
      const int nblocks = (ctx + nodes + kAttnBlockSize - 1) / kAttnBlockSize;
      const double io_bytes = 2.0 * nodes * q_heads * kAttnHeadDim * 2 + nodes * 8.0;  // q, out, ancestors
      double dense_ms = 0;  // 0: dense not run (the sparse rows then have no dense_over_total)
      if (runs("dense")) {
        const size_t ws_bytes = attention_workspace_bytes(tq, kv_heads, 1, nodes, nblocks);
        void* ws = dalloc(ws_bytes);
        auto call = [&](int i) {
          check_ok(tree_attention_dense(kv_of(i % copies), tq, out, ws, ws_bytes, nullptr, &error), error);
        };
        const double ms = median_ms(call, iterations);
        dense_ms = ms;
        const double batch_ms = batched_ms(call, batch_calls, 5);
        const double bytes = double(nblocks) * kv_heads * 2 * kBlockBytes + nblocks * 4.0 + io_bytes;
        rows.push_back({{"kernel", "dense"},
                        {"context", ctx},
                        {"nodes", nodes},
                        {"ms", ms},
                        {"bytes", bytes},
                        {"GBps", bytes / ms / 1e6},
                        {"fraction_of_copy", bytes / ms / 1e6 / copy_GBps},
                        {"ms_batched", batch_ms},
                        {"fraction_of_copy_batched", bytes / batch_ms / 1e6 / copy_GBps},
                        {"kv_multicast", tree_attention_kv_multicast(tq, kv_heads, 1, nodes, nblocks, false)},
                        {"ws_pingpong", tree_attention_ws_pingpong(tq, kv_heads, 1, nodes, nblocks, false)}});
        std::fprintf(stderr, "dense ctx=%d nodes=%d %.4f ms %.0f GB/s (%.0f%% of copy); batched %.4f ms (%.0f%%)\n",
                     ctx, nodes, ms, bytes / ms / 1e6, 100 * bytes / ms / 1e6 / copy_GBps, batch_ms,
                     100 * bytes / batch_ms / 1e6 / copy_GBps);
        cudaFree(ws);
      }
      // Sparse: selection, then attention over the lists, per mode.
      for (QueryMode mode :
           {QueryMode::kPerQuery, QueryMode::kFirstQuery, QueryMode::kGroupUnion, QueryMode::kGroupShared}) {
        if (!runs(query_mode_name(mode))) continue;
        SelectParams sp;
        sp.mode = mode;
        sp.group_size = group_size;
        sp.top_k = keep_fraction > 0 ? static_cast<int>(std::ceil(keep_fraction * ctx / kAttnBlockSize)) : top_k;
        int groups = 0, gs = 0, max_blocks = 0;
        select_list_shape(tq, sp, &groups, &gs, &max_blocks);
        const size_t list_n = size_t(groups) * kv_heads * max_blocks;
        BlockLists lists{static_cast<int32_t*>(dalloc(list_n * 4)),
                         static_cast<uint64_t*>(dalloc(list_n * 8)),
                         static_cast<int32_t*>(dalloc(size_t(groups) * kv_heads * 4)),
                         groups,
                         gs,
                         max_blocks};
        const size_t sws_bytes = select_workspace_bytes(tq, kv_heads, sp);
        const size_t aws_bytes = attention_workspace_bytes(tq, kv_heads, groups, gs, max_blocks);
        void* sws = dalloc(sws_bytes);
        void* aws = dalloc(aws_bytes);
        auto select = [&](int i) {
          check_ok(select_blocks(kv_of(i % copies), tq, sp, &lists, sws, sws_bytes, nullptr, nullptr, &error), error);
        };
        const double select_ms = median_ms(select, iterations);
        select(0);
        CHECK_CUDA(cudaDeviceSynchronize());
        // Bytes: loaded = every (group, kv head) entry; unique = distinct blocks per kv head.
        std::vector<int32_t> hb(list_n), hc(size_t(groups) * kv_heads);
        CHECK_CUDA(cudaMemcpy(hb.data(), lists.blocks, list_n * 4, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(hc.data(), lists.counts, hc.size() * 4, cudaMemcpyDeviceToHost));
        double loaded = 0, unique = 0;
        for (int h = 0; h < kv_heads; ++h) {
          std::set<int> u;
          for (int g = 0; g < groups; ++g) {
            const int c = hc[size_t(g) * kv_heads + h];
            loaded += c;
            for (int e = 0; e < c; ++e) u.insert(hb[(size_t(g) * kv_heads + h) * max_blocks + e]);
          }
          unique += double(u.size());
        }
        auto attend = [&](int i) {
          check_ok(tree_attention_sparse(kv_of(i % copies), tq, lists, out, aws, aws_bytes, nullptr, &error), error);
        };
        const double attn_ms = median_ms(attend, iterations);
        const double attn_batch_ms = batched_ms(attend, batch_calls, 5);
        const auto [unique_bytes, loaded_bytes, list_bytes] =
            sparse_read_bytes(unique, loaded, double(groups) * kv_heads, kBlockBytes, io_bytes);
        const int selectors = (nodes + selector_stride(tq, sp) - 1) / selector_stride(tq, sp);
        const double select_bytes = 2.0 * nblocks * kv_heads * kAttnHeadDim * 2 + nblocks * 4.0 +
                                    selectors * (q_heads * kAttnHeadDim * 2.0) + list_bytes;
        const bool paired = tree_attention_kv_multicast(tq, kv_heads, groups, gs, max_blocks, true);
        nlohmann::json row = {{"kernel", std::string("sparse_") + query_mode_name(mode)},
                              {"context", ctx},
                              {"nodes", nodes},
                              {"top_k", sp.top_k},
                              {"group_size", gs},
                              {"ms", attn_ms},
                              {"ms_batched", attn_batch_ms},
                              {"select_ms", select_ms},
                              {"total_ms", select_ms + attn_ms},
                              {"blocks_loaded_per_kv_head", loaded / kv_heads},
                              {"blocks_unique_per_kv_head", unique / kv_heads},
                              {"bytes_unique", unique_bytes},
                              {"bytes_loaded", loaded_bytes},
                              {"GBps", unique_bytes / attn_ms / 1e6},
                              {"fraction_of_copy", unique_bytes / attn_ms / 1e6 / copy_GBps},
                              {"GBps_loaded", loaded_bytes / attn_ms / 1e6},
                              {"select_bytes", select_bytes},
                              {"select_GBps", select_bytes / select_ms / 1e6},
                              {"kv_multicast", paired},
                              {"ws_pingpong", tree_attention_ws_pingpong(tq, kv_heads, groups, gs, max_blocks, true)}};
        if (dense_ms > 0) row["dense_over_total"] = dense_ms / (select_ms + attn_ms);
        rows.push_back(row);
        std::fprintf(stderr,
                     "%-13s ctx=%d nodes=%d attn %.4f ms (batched %.4f) %.0f GB/s unique (%.0f%%), %.0f GB/s loaded; "
                     "select %.4f ms",
                     query_mode_name(mode), ctx, nodes, attn_ms, attn_batch_ms, unique_bytes / attn_ms / 1e6,
                     100 * unique_bytes / attn_ms / 1e6 / copy_GBps, loaded_bytes / attn_ms / 1e6, select_ms);
        if (dense_ms > 0) std::fprintf(stderr, "; dense / (select + attn) %.2fx", dense_ms / (select_ms + attn_ms));
        std::fputc('\n', stderr);
        cudaFree(sws);
        cudaFree(aws);
        cudaFree(lists.blocks);
        cudaFree(lists.members);
        cudaFree(lists.counts);
      }
    }
    for (void* ptr :
         {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(bmin), static_cast<void*>(bmax),
          static_cast<void*>(table), static_cast<void*>(q), static_cast<void*>(anc), static_cast<void*>(out)})
      cudaFree(ptr);
  }

  nlohmann::json result = {
      {"bench", "attention"},
      {"date", specula::bench::utc_now()},
      {"device", specula::bench::device_json()},
      {"host", specula::bench::host_info()},
      {"commit", commit},
      {"command", specula::bench::command_line(argc, argv)},
      {"seed", seed},
      {"shape",
       {{"q_heads", q_heads},
        {"kv_heads", kv_heads},
        {"head_dim", kAttnHeadDim},
        {"block_size", kAttnBlockSize},
        {"dtype", "bf16"}}},
      {"bytes_counted",
       "unique KV blocks (K+V) per kv head + block table/lists + q + out + ancestors; "
       "loaded = every (group, kv head) list entry"},
      {"keep_fraction", keep_fraction},
      {"timing",
       "ms (primary, per-call latency): median of --iterations CUDA-event-timed calls after 3 warm-ups, each "
       "call's host launch latency included; ms_batched (secondary, the kernels' own GPU time): median "
       "of 5 batches of --batch-calls back-to-back calls between two events, divided by --batch-calls "
       "(launches overlap the previous call's tail); KV pool copies rotate past L2 in both"},
      {"rows", rows},
  };
  // The kernels' A/B switches (kernels/cuda/tree_attention.cu), so a result says which path it timed.
  nlohmann::json switches = nlohmann::json::object();
  for (const char* name : {"SPECULA_TREE_ATTN", "SPECULA_TREE_ATTN_PER_SM", "SPECULA_SPARSE_WHOLE_STAGES"}) {
    const char* value = std::getenv(name);
    switches[name] = value ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  switches["kv_multicast"] = kv_multicast;
  switches["ws_pingpong"] = ws_pingpong;
  result["switches"] = switches;
  result.update(copy.json());
  std::puts(result.dump(2).c_str());
  if (!out_path.empty()) std::ofstream(out_path) << result.dump(2) << "\n";
  return 0;
}

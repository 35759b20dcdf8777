// GPU tree-verify attention and Quest block selection against the double-precision CPU reference
// (attention_reference.h), on fresh random inputs each run (the seed is printed).
#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <set>
#include <string>

#include "kernels/cuda/device.h"
#include "tests/kernels/cuda/attention_reference.h"

namespace specula::cuda {
namespace {

using testing::from_bf16;
using testing::Problem;

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    if (cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (ptr) cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> to_host() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

uint64_t fresh_seed() {
  const uint64_t seed = static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  std::printf("seed: %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

struct DeviceProblem {
  DeviceBuffer<uint16_t> k, v, bmin, bmax, q, out;
  DeviceBuffer<int32_t> table;
  DeviceBuffer<uint64_t> anc;
  PagedKv kv;
  TreeQueries tq;
  explicit DeviceProblem(const Problem& p)
      : k(p.k),
        v(p.v),
        bmin(p.bmin),
        bmax(p.bmax),
        q(p.q),
        out(size_t(p.nodes) * p.q_heads * kAttnHeadDim),
        table(p.block_table),
        anc(p.ancestors) {
    kv = {k.ptr, v.ptr, bmin.ptr, bmax.ptr, table.ptr, p.kv_heads};
    tq = {q.ptr, anc.ptr, p.nodes, p.q_heads, p.prefix_len, p.scale};
    cudaMemset(out.ptr, 0xff, out.n * sizeof(uint16_t));  // poison: bf16 NaN
  }
};

// ||gpu - ref|| / ||ref|| over all nodes and heads, with every element written (no NaN left).
template <class Allowed>
double relative_error(const Problem& p, const std::vector<uint16_t>& gpu, Allowed allowed) {
  double num = 0, den = 0;
  for (int n = 0; n < p.nodes; ++n) {
    for (int h = 0; h < p.q_heads; ++h) {
      const auto ref = testing::reference_attention(p, n, h, [&](int b) { return allowed(n, h, b); });
      for (int d = 0; d < kAttnHeadDim; ++d) {
        const double x = from_bf16(gpu[(size_t(n) * p.q_heads + h) * kAttnHeadDim + d]);
        if (!std::isfinite(x)) return INFINITY;
        num += (x - ref[d]) * (x - ref[d]);
        den += ref[d] * ref[d];
      }
    }
  }
  return std::sqrt(num / den);
}

TEST(CudaTreeAttention, DenseMatchesReferenceOnRandomTrees) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  std::mt19937_64 rng(fresh_seed());
  struct Case {
    int nodes, prefix;
  };
  // The long contexts give each CTA several pipeline stages and a partial last one. Row counts
  // (nodes x 4 q heads a kv head) cover each kernel variant: <= 64 (mma.sync; from 768 blocks and
  // 17 rows the warp-specialized wgmma kernel ws2s3 with one consumer warpgroup: 12 nodes at
  // 33001), 65..128 (29, 32 nodes: ws2s3), 129..192 (33..48 nodes: ws3s4, three consumer
  // warpgroups) and 193..256 (57..64 nodes: ws2s3 over two CTAs); their 64-row warpgroups see
  // padding rows at 12, 29, 33, 37, 41, 57, 63 nodes. SPECULA_TREE_ATTN runs the same cases on the
  // other variants (bench/tree_attention_variants.sh).
  for (Case c : {Case{1, 37}, Case{5, 0}, Case{8, 1000}, Case{16, 3001}, Case{29, 7001}, Case{32, 2048}, Case{64, 517},
                 Case{64, 4096}, Case{37, 20011}, Case{64, 30000}, Case{33, 95}, Case{41, 0}, Case{48, 1234},
                 Case{57, 9001}, Case{63, 16003}, Case{64, 65}, Case{12, 33001}}) {
    const Problem p = testing::make_problem(rng, 2, 8, c.nodes, c.prefix);
    DeviceProblem dp(p);
    const int max_blocks = p.nblocks;
    DeviceBuffer<unsigned char> ws(attention_workspace_bytes(dp.tq, p.kv_heads, 1, p.nodes, max_blocks));
    std::string error;
    ASSERT_TRUE(tree_attention_dense(dp.kv, dp.tq, dp.out.ptr, ws.ptr, ws.n, nullptr, &error)) << error;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const double err = relative_error(p, dp.out.to_host(), [](int, int, int) { return true; });
    EXPECT_LT(err, 1e-2) << "nodes " << c.nodes << " prefix " << c.prefix;
    std::printf("dense nodes=%d prefix=%d rel_err=%.2e\n", c.nodes, c.prefix, err);
  }
}

// A kernel switch of attention.h (set, and whether a call's plan takes the path) that must not
// change a bit: each case runs with it off, then on, dense or sparse (first-query lists: every
// node of the tree in one group), and the dense reference holds.
struct SwitchCase {
  int nodes, prefix;
  bool sparse;
};
using SetSwitch = void (*)(bool);
using SwitchTaken = bool (*)(const TreeQueries&, int, int, int, int, bool);
void expect_same_bits_either_way(const char* what, SetSwitch set, SwitchTaken taken, bool default_on,
                                 std::initializer_list<SwitchCase> cases) {
  std::mt19937_64 rng(fresh_seed());
  struct Restore {
    SetSwitch set;
    bool on;
    ~Restore() { set(on); }
  } restore{set, default_on};
  for (SwitchCase c : cases) {
    SCOPED_TRACE(std::string(what) + ": nodes " + std::to_string(c.nodes) + " prefix " + std::to_string(c.prefix) +
                 (c.sparse ? " sparse" : " dense"));
    const Problem p = testing::make_problem(rng, 2, 8, c.nodes, c.prefix);
    DeviceProblem dp(p);
    std::string error;
    SelectParams sp;  // sparse: node 0's top 10% for the whole tree
    sp.mode = QueryMode::kFirstQuery;
    sp.top_k = p.nblocks / 10;
    int groups = 1, gs = p.nodes, max_blocks = p.nblocks;
    if (c.sparse) select_list_shape(dp.tq, sp, &groups, &gs, &max_blocks);
    DeviceBuffer<int32_t> blocks(size_t(groups) * p.kv_heads * max_blocks), counts(size_t(groups) * p.kv_heads);
    DeviceBuffer<uint64_t> members(size_t(groups) * p.kv_heads * max_blocks);
    BlockLists lists{blocks.ptr, members.ptr, counts.ptr, 0, 0, 0};
    if (c.sparse) {
      DeviceBuffer<unsigned char> sws(select_workspace_bytes(dp.tq, p.kv_heads, sp));
      ASSERT_TRUE(select_blocks(dp.kv, dp.tq, sp, &lists, sws.ptr, sws.n, nullptr, nullptr, &error)) << error;
    }
    DeviceBuffer<unsigned char> ws(attention_workspace_bytes(dp.tq, p.kv_heads, groups, gs, max_blocks));
    std::vector<uint16_t> out[2];
    bool took[2] = {};
    for (int on = 0; on < 2; ++on) {
      set(on == 1);
      took[on] = taken(dp.tq, p.kv_heads, groups, gs, max_blocks, c.sparse);
      cudaMemset(dp.out.ptr, 0xff, dp.out.n * sizeof(uint16_t));
      const bool ok = c.sparse ? tree_attention_sparse(dp.kv, dp.tq, lists, dp.out.ptr, ws.ptr, ws.n, nullptr, &error)
                               : tree_attention_dense(dp.kv, dp.tq, dp.out.ptr, ws.ptr, ws.n, nullptr, &error);
      ASSERT_TRUE(ok) << error;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      out[on] = dp.out.to_host();
    }
    EXPECT_FALSE(took[0]);
    EXPECT_TRUE(took[1]) << "the call did not take the switched path";
    EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(uint16_t)));
    // (The sparse lists' own reference is EveryQueryModeMatchesReference's, on the same path.)
    const double err = c.sparse ? 0.0 : relative_error(p, out[1], [](int, int, int) { return true; });
    EXPECT_LT(err, 1e-2);
    std::printf("%s nodes=%d prefix=%d %s taken=%d dense rel_err=%.2e\n", what, c.nodes, c.prefix,
                c.sparse ? "sparse" : "dense", int(took[1]), err);
  }
}

// Groups of more than 192 rows (49..64 nodes at GQA 4) run as two row-split CTAs a chunk, by
// default a cluster that multicasts each K/V stage to both (tree_attention_ws.cuh); with
// set_tree_attention_kv_multicast(false) each loads it.
TEST(CudaTreeAttention, KvMulticastGivesTheSameBits) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  expect_same_bits_either_way(
      "kv multicast", set_tree_attention_kv_multicast, tree_attention_kv_multicast, true,
      {SwitchCase{64, 30000, false}, SwitchCase{60, 9001, false}, SwitchCase{57, 517, false}, SwitchCase{49, 0, false},
       SwitchCase{64, 20000, true}, SwitchCase{60, 7001, true}, SwitchCase{52, 3000, true}});
}

// The warp-specialized tier's consumer warpgroups taking turns (FA3's ping-pong; off by default)
// against each issuing freely: two warpgroups (29..32 nodes: ws2s3, one CTA; 49..64: two CTAs, multicast
// pairs) and three (33..48: ws3s4), with padding rows at 29, 33, 41 and 57 nodes.
TEST(CudaTreeAttention, WsPingPongGivesTheSameBits) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  expect_same_bits_either_way("ws ping-pong", set_tree_attention_ws_pingpong, tree_attention_ws_pingpong, false,
                              {SwitchCase{29, 7001, false}, SwitchCase{32, 2048, false}, SwitchCase{33, 95, false},
                               SwitchCase{41, 20011, false}, SwitchCase{48, 1234, false}, SwitchCase{57, 9001, false},
                               SwitchCase{64, 30000, false}, SwitchCase{40, 20000, true}, SwitchCase{64, 20000, true}});
}

TEST(CudaTreeAttention, RejectsTooManyNodes) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  std::mt19937_64 rng(fresh_seed());
  const Problem p = testing::make_problem(rng, 2, 8, 4, 64);
  DeviceProblem dp(p);
  dp.tq.nodes = 65;
  std::string error;
  EXPECT_FALSE(tree_attention_dense(dp.kv, dp.tq, dp.out.ptr, nullptr, 0, nullptr, &error));
  EXPECT_NE(error.find("nodes"), std::string::npos) << error;
}

// Each node's block set, decoded from the lists' member masks.
std::vector<std::set<int>> node_sets(const Problem& p, const BlockLists& L, const std::vector<int32_t>& blocks,
                                     const std::vector<uint64_t>& members, const std::vector<int32_t>& counts,
                                     int kvh) {
  std::vector<std::set<int>> sets(p.nodes);
  for (int g = 0; g < L.groups; ++g) {
    const size_t base = (size_t(g) * p.kv_heads + kvh) * L.max_blocks;
    for (int e = 0; e < counts[g * p.kv_heads + kvh]; ++e) {
      for (int n = 0; n < p.nodes; ++n) {
        if ((members[base + e] >> n) & 1ull) {
          EXPECT_EQ(n / L.group_size, g) << "node " << n << " listed in another group's blocks";
          sets[n].insert(blocks[base + e]);
        }
      }
      if (e > 0) {
        EXPECT_LT(blocks[base + e - 1], blocks[base + e]) << "lists must ascend";
      }
    }
  }
  return sets;
}

// ties: the scored blocks' metadata repeats every 3 blocks, so most scores tie and the top-k must
// take the lower block ids among equal scores (the metadata no longer bounds K; the selection and
// the attention over the chosen blocks are still checked).
void check_sparse_mode(QueryMode mode, int nodes, int prefix, std::mt19937_64& rng, bool ties = false) {
  SCOPED_TRACE(std::string("mode ") + query_mode_name(mode) + " nodes " + std::to_string(nodes) +
               (ties ? " tied scores" : ""));
  Problem p = testing::make_problem(rng, 2, 8, nodes, prefix);
  if (ties) {
    const size_t row = size_t(p.kv_heads) * kAttnHeadDim;  // one physical block's [Hk][D] metadata
    for (int b = 4; b < prefix / 16; ++b) {
      const size_t to = p.block_table[b] * row, from = p.block_table[1 + b % 3] * row;
      std::copy_n(p.bmin.begin() + from, row, p.bmin.begin() + to);
      std::copy_n(p.bmax.begin() + from, row, p.bmax.begin() + to);
    }
  }
  DeviceProblem dp(p);
  SelectParams sp;
  sp.mode = mode;
  sp.group_size = 4;
  sp.top_k = 7;
  sp.sink_blocks = 1;
  sp.local_blocks = 2;
  int groups = 0, gs = 0, max_blocks = 0;
  select_list_shape(dp.tq, sp, &groups, &gs, &max_blocks);
  DeviceBuffer<int32_t> blocks(size_t(groups) * p.kv_heads * max_blocks), counts(size_t(groups) * p.kv_heads);
  DeviceBuffer<uint64_t> members(size_t(groups) * p.kv_heads * max_blocks);
  BlockLists lists{blocks.ptr, members.ptr, counts.ptr, 0, 0, 0};
  const int stride = selector_stride(dp.tq, sp), selectors = (nodes + stride - 1) / stride;
  DeviceBuffer<float> scores(size_t(selectors) * p.kv_heads * p.nblocks);
  DeviceBuffer<unsigned char> sws(select_workspace_bytes(dp.tq, p.kv_heads, sp));
  std::string error;
  ASSERT_TRUE(select_blocks(dp.kv, dp.tq, sp, &lists, sws.ptr, sws.n, scores.ptr, nullptr, &error)) << error;
  {
    // Up to 16 selectors score on the row-per-thread kernel, more on the staged one; the staged
    // kernel must give the row kernel's scores to the bit, and so the same lists.
    DeviceBuffer<int32_t> blocks2(blocks.n), counts2(counts.n);
    DeviceBuffer<uint64_t> members2(members.n);
    DeviceBuffer<float> scores2(scores.n);
    BlockLists lists2{blocks2.ptr, members2.ptr, counts2.ptr, 0, 0, 0};
    setenv("SPECULA_SELECT_SCORE", "staged", 1);
    const bool ok = select_blocks(dp.kv, dp.tq, sp, &lists2, sws.ptr, sws.n, scores2.ptr, nullptr, &error);
    unsetenv("SPECULA_SELECT_SCORE");
    ASSERT_TRUE(ok) << error;
    const auto a = scores.to_host(), b = scores2.to_host();
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "staged and row scores differ";
    const auto c1 = counts.to_host(), c2 = counts2.to_host();
    const auto b1 = blocks.to_host(), b2 = blocks2.to_host();
    const auto m1 = members.to_host(), m2 = members2.to_host();
    ASSERT_EQ(c1, c2);
    for (size_t list = 0; list < c1.size(); ++list) {  // entries past a list's count are never written
      const size_t at = list * lists.max_blocks;
      EXPECT_TRUE(std::equal(b1.begin() + at, b1.begin() + at + c1[list], b2.begin() + at)) << "list " << list;
      EXPECT_TRUE(std::equal(m1.begin() + at, m1.begin() + at + c1[list], m2.begin() + at)) << "list " << list;
    }
  }
  DeviceBuffer<unsigned char> aws(attention_workspace_bytes(dp.tq, p.kv_heads, groups, gs, max_blocks));
  ASSERT_TRUE(tree_attention_sparse(dp.kv, dp.tq, lists, dp.out.ptr, aws.ptr, aws.n, nullptr, &error)) << error;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // Scores: forced blocks +inf, the rest the Quest bound.
  const int first_forced = std::max(0, prefix / 16 - sp.local_blocks);
  auto forced = [&](int b) { return b < sp.sink_blocks || b >= first_forced; };
  const auto hs = scores.to_host();
  for (int s = 0; s < selectors; ++s) {
    for (int h = 0; h < p.kv_heads; ++h) {
      for (int b = 0; b < p.nblocks; ++b) {
        const float got = hs[(size_t(s) * p.kv_heads + h) * p.nblocks + b];
        if (forced(b)) {
          EXPECT_TRUE(std::isinf(got) && got > 0) << "block " << b;
        } else {
          const double want = testing::reference_quest_score(p, s * stride, h, b);
          EXPECT_NEAR(got, want, 1e-4 * (1 + std::fabs(want))) << "sel " << s << " kvh " << h << " block " << b;
        }
      }
    }
  }

  // Every node's set: all forced blocks, exactly `take` blocks, and a top set of its selector's
  // scores (no unselected block scores higher than a selected one, up to float rounding).
  int n_forced = 0;
  for (int b = 0; b < p.nblocks; ++b) n_forced += forced(b) ? 1 : 0;
  const int take = std::min(p.nblocks, n_forced + sp.top_k);
  const auto hb = blocks.to_host();
  const auto hm = members.to_host();
  const auto hc = counts.to_host();
  std::vector<std::vector<std::set<int>>> sets(p.kv_heads);
  for (int h = 0; h < p.kv_heads; ++h) {
    sets[h] = node_sets(p, lists, hb, hm, hc, h);
    for (int n = 0; n < nodes; ++n) {
      const auto& set = sets[h][n];
      ASSERT_EQ(static_cast<int>(set.size()), take) << "node " << n << " kvh " << h;
      const int sel_node = (n / stride) * stride;
      // Exactly the `take` best of the GPU's own scores, ties to the lower block id.
      std::vector<int> order(p.nblocks);
      std::iota(order.begin(), order.end(), 0);
      const float* own = hs.data() + (size_t(n / stride) * p.kv_heads + h) * p.nblocks;
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return own[a] > own[b]; });
      EXPECT_EQ(set, std::set<int>(order.begin(), order.begin() + take)) << "node " << n << " kvh " << h;
      double worst_in = INFINITY, best_out = -INFINITY;
      for (int b = 0; b < p.nblocks; ++b) {
        if (forced(b)) {
          EXPECT_TRUE(set.count(b)) << "forced block " << b << " missing for node " << n;
          continue;
        }
        const double sc = testing::reference_quest_score(p, sel_node, h, b);
        if (set.count(b))
          worst_in = std::min(worst_in, sc);
        else
          best_out = std::max(best_out, sc);
      }
      if (worst_in != INFINITY && best_out != -INFINITY) {
        EXPECT_GE(worst_in, best_out - 1e-3);
      }
      if (mode == QueryMode::kGroupShared || mode == QueryMode::kFirstQuery) {
        EXPECT_EQ(set, sets[h][sel_node]);
      }
    }
  }

  const double err = relative_error(
      p, dp.out.to_host(), [&](int n, int h, int b) { return sets[h / (p.q_heads / p.kv_heads)][n].count(b) > 0; });
  EXPECT_LT(err, 1e-2);
  std::printf("sparse %s nodes=%d prefix=%d rel_err=%.2e\n", query_mode_name(mode), nodes, prefix, err);
}

TEST(CudaSparseAttention, EveryQueryModeMatchesReference) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  std::mt19937_64 rng(fresh_seed());
  for (QueryMode mode :
       {QueryMode::kPerQuery, QueryMode::kFirstQuery, QueryMode::kGroupUnion, QueryMode::kGroupShared}) {
    check_sparse_mode(mode, 13, 1500 + static_cast<int>(rng() % 700), rng);
    check_sparse_mode(mode, 64, 900, rng);
  }
  check_sparse_mode(QueryMode::kGroupUnion, 3, 40, rng);  // fewer blocks than top-k
  check_sparse_mode(QueryMode::kFirstQuery, 9, 3000, rng);
  check_sparse_mode(QueryMode::kGroupUnion, 40, 2100, rng);
  // Whole trees as one group on the wgmma tiers (116 rows with padding: ws2s3; 160: ws3s4), their
  // committed stages whole (MaskedStagesMatchReference runs them with every stage masked).
  check_sparse_mode(QueryMode::kFirstQuery, 29, 2100, rng);
  check_sparse_mode(QueryMode::kFirstQuery, 40, 2500, rng);
  for (QueryMode mode : {QueryMode::kPerQuery, QueryMode::kFirstQuery}) check_sparse_mode(mode, 8, 5000, rng, true);
}

// By default a stage whose listed blocks hold every node of a warp's rows skips the per-score mask
// (tree_attention.cu, read_stage); SPECULA_SPARSE_WHOLE_STAGES=0 masks every sparse stage (the
// A/B path). The same references must hold there on every tier: m1b4 (13 nodes; group-union's
// 8-node groups), ws2s3 (29, and 64 over two CTAs), ws3s4 (40).
TEST(CudaSparseAttention, MaskedStagesMatchReference) {
  if (device_count() == 0) GTEST_SKIP() << "skipped: no GPU (" << no_device_reason() << ")";
  std::mt19937_64 rng(fresh_seed());
  setenv("SPECULA_SPARSE_WHOLE_STAGES", "0", 1);
  struct Unset {
    ~Unset() { unsetenv("SPECULA_SPARSE_WHOLE_STAGES"); }
  } unset;  // also when a check returns early
  for (QueryMode mode :
       {QueryMode::kPerQuery, QueryMode::kFirstQuery, QueryMode::kGroupUnion, QueryMode::kGroupShared}) {
    check_sparse_mode(mode, 13, 1500 + static_cast<int>(rng() % 700), rng);
    check_sparse_mode(mode, 64, 900, rng);
  }
  check_sparse_mode(QueryMode::kFirstQuery, 29, 2100, rng);
  check_sparse_mode(QueryMode::kFirstQuery, 40, 2500, rng);
  check_sparse_mode(QueryMode::kGroupUnion, 40, 2100, rng);
  check_sparse_mode(QueryMode::kFirstQuery, 8, 5000, rng, true);
}

}  // namespace
}  // namespace specula::cuda

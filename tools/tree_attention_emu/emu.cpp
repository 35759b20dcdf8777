// Host emulation of the tree-attention kernels (tools/tree_attention_emu/run.sh builds and runs it):
// threads = std::threads, warp operations through per-warp barriers, cp.async deferred until its
// wait so that a read before the wait sees stale (poisoned) shared memory. Fragment layouts follow
// the PTX ISA for mma.m16n8k16 and ldmatrix (.trans included).
#include <cuda_bf16.h>
#include <vector_types.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cuda/attention.h"
#include "tests/kernels/cuda/attention_reference.h"

namespace emu {
struct Warp {
  std::barrier<> bar{32};
  uint64_t slot[32][8];
};
thread_local unsigned char* smem;
thread_local dim3 tIdx, bIdx, bDim;
thread_local Warp* warp;
thread_local int lane;
thread_local std::barrier<>* cta_bar;
struct Copy { void* dst; const void* src; };
thread_local std::vector<std::vector<Copy>> groups;
thread_local std::vector<Copy> open_group;
thread_local unsigned char* smem_lo;
thread_local size_t smem_size;
}  // namespace emu

#define threadIdx emu::tIdx
#define blockIdx emu::bIdx
#define blockDim emu::bDim
inline void __syncthreads() { emu::cta_bar->arrive_and_wait(); }
template <class T>
T shfl_from(T v, int src) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  emu::warp->slot[emu::lane][7] = bits;
  emu::warp->bar.arrive_and_wait();
  uint64_t got = emu::warp->slot[src][7];
  emu::warp->bar.arrive_and_wait();
  T out;
  std::memcpy(&out, &got, sizeof(T));
  return out;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int x) { return shfl_from(v, emu::lane ^ x); }
template <class T>
T __shfl_sync(unsigned, T v, int j) { return shfl_from(v, j); }
inline uint32_t __reduce_or_sync(unsigned, uint32_t v) {
  emu::warp->slot[emu::lane][6] = v;
  emu::warp->bar.arrive_and_wait();
  uint32_t all = 0;
  for (int i = 0; i < 32; ++i) all |= uint32_t(emu::warp->slot[i][6]);
  emu::warp->bar.arrive_and_wait();
  return all;
}
inline bool __any_sync(unsigned, bool p) {
  emu::warp->slot[emu::lane][6] = p;
  emu::warp->bar.arrive_and_wait();
  bool any = false;
  for (int i = 0; i < 32; ++i) any = any || emu::warp->slot[i][6];
  emu::warp->bar.arrive_and_wait();
  return any;
}

namespace specula::cuda {
namespace {
using std::max;
using std::min;
constexpr int B = kAttnBlockSize;
constexpr int D = kAttnHeadDim;
constexpr int kRowPad = D + 8;
constexpr int kTile = B * kRowPad;
constexpr int kPieces = 2 * B * D / 8;
constexpr int kMaxRows = 256;

void check_smem(const void* p, size_t n) {
  auto* c = static_cast<const unsigned char*>(p);
  if (c < emu::smem_lo || c + n > emu::smem_lo + emu::smem_size) {
    std::fprintf(stderr, "smem access out of range\n");
    std::abort();
  }
}
inline void cp_async16(void* s, const void* g) {
  check_smem(s, 16);
  if (reinterpret_cast<uintptr_t>(s) % 16) { std::fprintf(stderr, "cp.async misaligned\n"); std::abort(); }
  emu::open_group.push_back({s, g});
}
inline void cp_async_commit() {
  emu::groups.push_back(emu::open_group);
  emu::open_group.clear();
}
template <int N>
inline void cp_async_wait() {
  while (emu::groups.size() > size_t(N)) {
    for (auto& c : emu::groups.front()) std::memcpy(c.dst, c.src, 16);
    emu::groups.erase(emu::groups.begin());
  }
}
inline void pdl_wait() {}
inline void pdl_trigger() {}
inline float bf(uint32_t bits16) { return testing::from_bf16(static_cast<uint16_t>(bits16)); }
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  auto& s = emu::warp->slot[emu::lane];
  for (int i = 0; i < 4; ++i) s[i] = a[i];
  s[4] = b0;
  s[5] = b1;
  emu::warp->bar.arrive_and_wait();
  float A[16][16], Bm[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    auto& q = emu::warp->slot[l];
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = bf(uint32_t(q[0]) >> (16 * h));
      A[g + 8][2 * t + h] = bf(uint32_t(q[1]) >> (16 * h));
      A[g][2 * t + 8 + h] = bf(uint32_t(q[2]) >> (16 * h));
      A[g + 8][2 * t + 8 + h] = bf(uint32_t(q[3]) >> (16 * h));
      Bm[2 * t + h][g] = bf(uint32_t(q[4]) >> (16 * h));
      Bm[2 * t + 8 + h][g] = bf(uint32_t(q[5]) >> (16 * h));
    }
  }
  emu::warp->bar.arrive_and_wait();
  const int g = emu::lane / 4, t = emu::lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float acc = 0;
    for (int k = 0; k < 16; ++k) acc += A[row][k] * Bm[k][col];
    c[i] += acc;
  }
}
inline void ldm(uint32_t (&r)[4], const void* p, bool trans) {
  emu::warp->slot[emu::lane][0] = reinterpret_cast<uintptr_t>(p);
  emu::warp->bar.arrive_and_wait();
  const int T = emu::lane;
  for (int i = 0; i < 4; ++i) {
    auto elem = [&](int row, int col) {
      auto* rp = reinterpret_cast<const uint16_t*>(emu::warp->slot[8 * i + row][0]);
      check_smem(rp, 16);
      if (reinterpret_cast<uintptr_t>(rp) % 16) { std::fprintf(stderr, "ldmatrix row misaligned\n"); std::abort(); }
      return uint32_t(rp[col]);
    };
    uint32_t lo, hi;
    if (!trans) { lo = elem(T / 4, 2 * (T % 4)); hi = elem(T / 4, 2 * (T % 4) + 1); }
    else { lo = elem(2 * (T % 4), T / 4); hi = elem(2 * (T % 4) + 1, T / 4); }
    r[i] = lo | (hi << 16);
  }
  emu::warp->bar.arrive_and_wait();
}
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) { ldm(r, p, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) { ldm(r, p, true); }
inline float ex2(float x) { return std::exp2(x); }
inline uint32_t pack_bf16(float lo, float hi) {
  return uint32_t(testing::to_bf16(lo)) | (uint32_t(testing::to_bf16(hi)) << 16);
}
#include "kernels.inc"
}  // namespace
}  // namespace specula::cuda

using namespace specula::cuda;

// Runs grid x block threads of `body`, one CTA at a time.
void run_grid(dim3 grid, int threads, size_t smem_bytes, const std::function<void()>& body) {
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::vector<unsigned char> smem(smem_bytes + 16, 0xff);  // poison: bf16 NaN
        std::barrier<> cta(threads);
        std::vector<std::unique_ptr<emu::Warp>> warps(threads / 32);
        for (auto& w : warps) w = std::make_unique<emu::Warp>();
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t) {
          ts.emplace_back([&, t] {
            emu::tIdx = dim3(t, 0, 0);
            emu::bIdx = dim3(x, y, z);
            emu::bDim = dim3(threads, 1, 1);
            emu::smem = smem.data();
            emu::smem_lo = smem.data();
            emu::smem_size = smem_bytes;
            emu::warp = warps[t / 32].get();
            emu::lane = t % 32;
            emu::cta_bar = &cta;
            emu::groups.clear();
            emu::open_group.clear();
            body();
            if (!emu::groups.empty() || !emu::open_group.empty()) {
              // cp.async groups left pending at exit are a bug only if they were not empty
              for (auto& g : emu::groups) if (!g.empty()) { std::fprintf(stderr, "pending cp.async at exit\n"); std::abort(); }
            }
          });
        }
        for (auto& t : ts) t.join();
      }
}

template <int MT, int NB, int NBC, int STAGES, int WARPS, bool QS, int KS = 1>
double run_case(std::mt19937_64& rng, int nodes, int prefix, int per_chunk_target, bool sparse, int group_size,
                int q_heads = 8) {
  const int kv_heads = 2, gqa = q_heads / kv_heads;
  const auto p = testing::make_problem(rng, kv_heads, q_heads, nodes, prefix);
  const int groups = sparse ? (nodes + group_size - 1) / group_size : 1;
  const int gs = sparse ? group_size : nodes;
  // Lists: each node of a group takes each block with probability 0.4 plus its own tree blocks;
  // the group loads the union.
  std::vector<std::vector<std::vector<char>>> node_allowed(nodes, std::vector<std::vector<char>>(kv_heads, std::vector<char>(p.nblocks, 1)));
  std::vector<int32_t> lb, lc;
  std::vector<uint64_t> lm;
  int max_blocks = p.nblocks;
  if (sparse) {
    lb.assign(size_t(groups) * kv_heads * max_blocks, -7);
    lm.assign(lb.size(), 0);
    lc.assign(size_t(groups) * kv_heads, 0);
    for (int g = 0; g < groups; ++g)
      for (int h = 0; h < kv_heads; ++h) {
        std::vector<uint64_t> mem(p.nblocks, 0);
        for (int n = g * gs; n < std::min(nodes, (g + 1) * gs); ++n)
          for (int b = 0; b < p.nblocks; ++b) {
            const bool take = (b + 1) * 16 > prefix || (rng() % 10) < 4;
            node_allowed[n][h][b] = take;
            if (take) mem[b] |= 1ull << n;
          }
        int c = 0;
        for (int b = 0; b < p.nblocks; ++b)
          if (mem[b]) {
            const size_t i = (size_t(g) * kv_heads + h) * max_blocks + c++;
            lb[i] = b;
            lm[i] = mem[b];
          }
        lc[g * kv_heads + h] = c;
      }
  }
  const int rows = gs * gqa, tile = 16 * MT, rows_pad = (rows + tile - 1) / tile * tile;
  const int most = tile * WARPS / KS, splits = (rows_pad + most - 1) / most, cta_rows = std::min(rows_pad, most);
  const int warps = std::max(4, cta_rows / tile * KS), threads = warps * 32;
  int per_chunk = (per_chunk_target + NB - 1) / NB * NB;
  const int chunks = (max_blocks + per_chunk - 1) / per_chunk;
  std::vector<float> part_o(size_t(groups) * kv_heads * chunks * rows_pad * D, NAN);
  std::vector<float2> part_ml(size_t(groups) * kv_heads * chunks * rows_pad, make_float2(NAN, NAN));
  std::vector<uint16_t> out(size_t(nodes) * q_heads * D, 0xffff);
  KernelArgs a{};
  a.k = reinterpret_cast<const __nv_bfloat16*>(p.k.data());
  a.v = reinterpret_cast<const __nv_bfloat16*>(p.v.data());
  a.block_table = p.block_table.data();
  a.q = reinterpret_cast<const __nv_bfloat16*>(p.q.data());
  a.ancestors = p.ancestors.data();
  a.list_blocks = sparse ? lb.data() : nullptr;
  a.list_members = sparse ? lm.data() : nullptr;
  a.list_counts = sparse ? lc.data() : nullptr;
  a.part_o = part_o.data();
  a.part_ml = part_ml.data();
  a.kv_heads = kv_heads; a.q_heads = q_heads; a.nodes = nodes; a.prefix_len = prefix; a.group_size = gs;
  a.max_blocks = max_blocks; a.stage_blocks = NB; a.chunks = chunks; a.rows = rows; a.rows_pad = rows_pad;
  a.cta_rows = cta_rows; a.row_splits = splits;
  a.scale_log2 = p.scale * 1.4426950408889634f;
  const size_t smem = (size_t(STAGES) * NB * (2 * kTile * 2 + 12) + 15) / 16 * 16 + (QS ? size_t(cta_rows) * kRowPad * 2 : 0);
  run_grid(dim3(chunks, kv_heads, groups * splits), threads, smem, [&] { tree_attention_chunk_kernel<MT, NB, NBC, STAGES, WARPS, QS, KS>(a); });
  const int items = nodes * q_heads;
  const int split = merge_split(chunks), merge_rows = kMergeWarps / split;
  run_grid(dim3((items + merge_rows - 1) / merge_rows, 1, 1), kMergeWarps * 32, kMergeSmem, [&] { tree_attention_merge_kernel(a, split, reinterpret_cast<__nv_bfloat16*>(out.data())); });
  double num = 0, den = 0;
  for (int n = 0; n < nodes; ++n)
    for (int h = 0; h < q_heads; ++h) {
      const auto ref = testing::reference_attention(p, n, h, [&](int b) { return node_allowed[n][h / gqa][b] != 0; });
      for (int d = 0; d < D; ++d) {
        const double x = testing::from_bf16(out[(size_t(n) * q_heads + h) * D + d]);
        if (!std::isfinite(x)) return INFINITY;
        num += (x - ref[d]) * (x - ref[d]);
        den += ref[d] * ref[d];
      }
    }
  const double err = std::sqrt(num / den);
  std::printf("MT%d NB%d NBC%d ST%d W%d QS%d KS%d %s nodes=%d q_heads=%d prefix=%d per_chunk=%d chunks=%d rel_err=%.2e %s\n", MT,
              NB, NBC, STAGES, WARPS, int(QS), KS, sparse ? "sparse" : "dense", nodes, q_heads, prefix, per_chunk, chunks, err,
              err < 1e-2 ? "ok" : "FAIL");
  return err;
}

template <int MT, int NB, int NBC, int STAGES, int WARPS, bool QS, int KS = 1>
int run_variant(std::mt19937_64& rng) {
  int fails = 0;
  auto chk = [&](double e) { fails += !(e < 1e-2); };
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 5, 0, 3, false, 0));
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 8, 1000, 13, false, 0));
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 37, 517, 9, false, 0));
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 64, 700, 24, false, 0));
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 1, 37, 1, false, 0));
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 13, 600, 5, true, 4));
  if (MT == 2) chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 40, 300, 7, true, 16));
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 23, 200, 6, false, 0, 2));  // gqa 1
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 29, 150, 5, false, 0, 4));  // gqa 2
  // Ranges past the kernel's first EntryWindows (32 entries each): 126 and ~80 entries a CTA.
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 8, 2000, 200, false, 0));
  chk(run_case<MT, NB, NBC, STAGES, WARPS, QS, KS>(rng, 13, 3000, 400, true, 13));
  return fails;
}

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int fails = 0;
  if (std::getenv("EMU_QUICK")) {
    fails += !(run_case<2, 4, 4, 4, 8, true>(rng, 8, 1000, 13, false, 0) < 1e-2);
    fails += !(run_case<2, 4, 4, 4, 8, true>(rng, 13, 600, 5, true, 4) < 1e-2);
    fails += !(run_case<1, 4, 4, 3, 8, false>(rng, 8, 2000, 200, false, 0) < 1e-2);
    fails += !(run_case<1, 4, 4, 3, 8, false>(rng, 13, 3000, 400, true, 13) < 1e-2);
    fails += !(run_case<1, 4, 2, 3, 8, false, 2>(rng, 8, 1000, 13, false, 0) < 1e-2);
    fails += !(run_case<1, 4, 2, 3, 8, false, 2>(rng, 13, 600, 5, true, 4) < 1e-2);
    std::printf("%s (%d failing cases)\n", fails ? "FAILED" : "PASSED", fails);
    return fails ? 1 : 0;
  }
  // The variants of kernels/cuda/tree_attention.cu (kVariants).
  fails += run_variant<1, 4, 4, 3, 8, false>(rng);
  fails += run_variant<2, 4, 4, 2, 4, true>(rng);
  fails += run_variant<2, 4, 4, 4, 8, true>(rng);
  fails += run_variant<1, 4, 2, 3, 8, false, 2>(rng);
  std::printf("%s (%d failing cases)\n", fails ? "FAILED" : "PASSED", fails);
  return fails ? 1 : 0;
}

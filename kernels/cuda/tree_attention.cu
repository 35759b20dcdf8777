// Tree-verify attention (dense and block-sparse) over the paged KV: split-K (flash-decoding).
// One CTA = one (group of tree nodes, kv head, chunk of the group's block list). It streams the
// chunk's K/V blocks through shared memory once (cp.async, kStages stages of NB blocks each) and
// every query row of the group -- gqa q heads x group nodes, up to 4 x 64 = 256 rows -- uses each
// load: warp w owns MT 16-row tiles and runs QK^T and PV on the tensor cores (mma.sync m16n8k16
// bf16, f32 accumulate; K and V fragments through ldmatrix, shared by the warp's MT tiles), with
// the online softmax in registers, once per stage of NB x 16 keys. A second kernel merges the chunks.
// That mma.sync kernel serves groups of up to 64 query rows; wider groups and long dense lists run
// the warp-specialized wgmma kernels of tree_attention_ws.cuh (Choice below has the tiers).
// Hand-written rather than CUTLASS/FlashInfer: neither is a Debian package, and the tree mask plus
// per-node block membership is not an option of theirs.
#include <cuda.h>  // CUtensorMap (the wgmma tier's producer/consumer variant)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/hopper.cuh"
#include "kernels/cuda/mma_sync.cuh"
#include "kernels/cuda/pdl.cuh"

namespace specula::cuda {
namespace {

constexpr int B = kAttnBlockSize;
constexpr int D = kAttnHeadDim;
constexpr int kRowPad = D + 8;          // bf16 per smem row: 272 B keeps ldmatrix reads conflict-free
constexpr int kTile = B * kRowPad;      // bf16 per (block, K or V) smem tile
constexpr int kPieces = 2 * B * D / 8;  // 16-byte cp.async pieces per block (K then V): 512
constexpr int kMaxRows = 256;           // 64 nodes x 4 q heads per kv head

struct KernelArgs {
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  const int32_t* block_table;
  const __nv_bfloat16* q;
  const uint64_t* ancestors;
  const int32_t* list_blocks;  // null: dense (entry i = logical block i, every node a member)
  const uint64_t* list_members;
  const int32_t* list_counts;
  float* part_o;    // [groups][Hk][chunks][rows_pad][D]
  float2* part_ml;  // [groups][Hk][chunks][rows_pad]  (running max x scale, in log2 units; sum)
  int kv_heads, q_heads, nodes, prefix_len, group_size, max_blocks, chunks, rows, rows_pad;
  int stage_blocks;          // a chunk's entries come in whole stages of this many blocks (the variant's NB)
  int cta_rows, row_splits;  // rows a CTA covers; CTAs splitting one (group, kv head, chunk)'s rows
  float scale_log2;
  bool whole_sparse;  // sparse stages may be whole (read_stage); on unless SPECULA_SPARSE_WHOLE_STAGES=0
  // tree_attention_ws.cuh's kernels with row_splits 2 only: the two row-split CTAs of a (group, kv
  // head, chunk) are one (1, 1, 2) cluster, and each stage's K/V reaches both by TMA multicast.
  bool kv_pair;
  // tree_attention_ws.cuh's kernels with two or three consumer warpgroups: they take turns issuing
  // their MMAs (FA3's warpgroup ping-pong), so one's softmax runs under the other's MMAs. Off
  // unless set_tree_attention_ws_pingpong(true): it measured slower (g_ws_pingpong).
  bool pingpong;
};

// Entries a chunk of a (group, kv head) list takes: its real count spread over the planned chunks
// in whole stages. The host plans chunks from the lists' capacity (it cannot read the counts
// without a sync); sizing the chunks by capacity left most CTAs idle on short sparse lists.
// For a dense list (count = max_blocks) this is the host plan's own chunk size.
__device__ __forceinline__ int chunk_entries(const KernelArgs& a, int count) {
  const int per = max(1, (count + a.chunks - 1) / a.chunks);
  return (per + a.stage_blocks - 1) / a.stage_blocks * a.stage_blocks;
}

// A chunk kernel CTA's share of its (group, kv head) list: entries [begin, begin + n_entries) of
// the list at list_base (a dense list is logical blocks 0..max_blocks-1, no storage).
struct ChunkRange {
  size_t list_base;
  int begin, n_entries;
};
__device__ __forceinline__ ChunkRange chunk_range(const KernelArgs& a, int chunk, int kvh, int group) {
  const int count = a.list_blocks ? a.list_counts[group * a.kv_heads + kvh] : a.max_blocks;
  const int per_chunk = chunk_entries(a, count);
  const int begin = chunk * per_chunk;
  return {(size_t(group) * a.kv_heads + kvh) * a.max_blocks, begin, max(0, min(count, begin + per_chunk) - begin)};
}

// Entry `entry` (< r.n_entries) of a CTA's range: its logical block.
__device__ __forceinline__ int entry_logical(const KernelArgs& a, const ChunkRange& r, int entry) {
  return a.list_blocks ? a.list_blocks[r.list_base + r.begin + entry] : r.begin + entry;
}

// Entry `entry` of a CTA's range: its logical block (-1 past the range) and physical block, and,
// where want_members (one thread of a loading team) and the list is sparse, its member nodes.
__device__ __forceinline__ void fetch_entry(const KernelArgs& a, const ChunkRange& r, int entry, bool want_members,
                                            int& logical, int& phys, uint64_t& members) {
  logical = -1;
  if (entry >= r.n_entries) return;
  logical = entry_logical(a, r, entry);
  phys = a.block_table[logical];
  if (a.list_blocks && want_members) members = a.list_members[r.list_base + r.begin + entry];
}

// A warp's view of its CTA's range, 32 entries (a window) at a time: lane i holds entry 32w + i
// of the current window w and of window w + 1 (logical, physical, members), and the list reads of
// window w + 2 are in flight. Why: fetch_entry one stage ahead makes every stage wait on two
// dependent round trips (list, then block table) before its copies can issue, so a short sparse
// list's CTA (4-6 stages at 64K, 10% kept) spent most of its time on that chain; here the chain is
// paid once at the start, with all 32 lanes' loads in flight, and each later window's lookups have
// a whole window's stages to land. Every lane of the warp calls start() / stage(), at warp-uniform
// points (they shuffle). The stages must come in order from 0, NB dividing 32.
struct EntryWindow {
  int cur_logical, cur_phys, next_logical, next_phys, far_logical;
  uint64_t cur_members, next_members, far_members;
  int window = 0;  // the current window's index

  __device__ __forceinline__ static void read(const KernelArgs& a, const ChunkRange& r, int entry, int& logical,
                                              uint64_t& members) {
    logical = -1;
    members = ~0ull;
    if (entry >= r.n_entries) return;
    logical = entry_logical(a, r, entry);
    if (a.list_blocks) members = a.list_members[r.list_base + r.begin + entry];
  }
  __device__ __forceinline__ static int lookup(const KernelArgs& a, int logical) {
    return logical >= 0 ? a.block_table[logical] : 0;
  }
  __device__ __forceinline__ void start(const KernelArgs& a, const ChunkRange& r, int lane) {
    read(a, r, lane, cur_logical, cur_members);
    read(a, r, 32 + lane, next_logical, next_members);
    read(a, r, 64 + lane, far_logical, far_members);
    cur_phys = lookup(a, cur_logical);
    next_phys = lookup(a, next_logical);
  }
  // Entry st * NB + blk (blk < NB) of stage st: its logical block (-1 past the range), physical
  // block and members, from lane (st * NB + blk) % 32 of the window that holds it.
  template <int NB>
  __device__ __forceinline__ void stage(const KernelArgs& a, const ChunkRange& r, int lane, int st, int blk,
                                        int& logical, int& phys, uint64_t& members) {
    static_assert(32 % NB == 0, "a stage lies in one window");
    if (st * NB / 32 != window) {  // the next window: shift, look up the one after, read the third
      ++window;
      cur_logical = next_logical, cur_phys = next_phys, cur_members = next_members;
      next_logical = far_logical, next_members = far_members;
      next_phys = lookup(a, next_logical);
      read(a, r, 32 * (window + 2) + lane, far_logical, far_members);
    }
    const int src = (st * NB + blk) % 32;
    logical = __shfl_sync(0xffffffffu, cur_logical, src);
    phys = __shfl_sync(0xffffffffu, cur_phys, src);
    members = __shfl_sync(0xffffffffu, cur_members, src);
  }
};

// The nodes whose rows a warp computes (bit n: node n; -1 entries are padding rows), the same
// value in every lane: what read_stage asks of a sparse stage's members.
template <int N>
__device__ __forceinline__ uint64_t warp_nodes(const int (&nodes)[N]) {
  uint64_t mine = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) mine |= nodes[i] >= 0 ? 1ull << nodes[i] : 0ull;
  const uint32_t lo = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(mine));
  const uint32_t hi = __reduce_or_sync(0xffffffffu, static_cast<uint32_t>(mine >> 32));
  return uint64_t{hi} << 32 | lo;
}

// A stage's logical block ids (-1: absent) from its slot's metadata, and whether the stage is
// whole for a warp: every block present and wholly in the committed prefix, and of a dense list
// or (a.whole_sparse) listed for every node of the warp's rows (`need`, warp_nodes), so no key of
// the warp needs a mask (block presence, sparse membership, context end, tree ancestors). A
// first-query or group-shared list holds every node of its group, so with whole_sparse all its
// committed stages but a partial last one are whole: the per-score mask makes each sparse stage
// cost ~2x a dense one (attention_notes.md, 12-07). On by default since it ran on the H100
// (bench/results/sparse_whole_stages_ab_s25_h100_2026-12-07.json: first-query at 64K and 64 nodes
// 50 -> 30 us batched); SPECULA_SPARSE_WHOLE_STAGES=0 gives the masked stages back, for A/B.
template <int NB>
__device__ __forceinline__ bool read_stage(const KernelArgs& a, const int32_t* slot_logical,
                                           const uint64_t* slot_members, uint64_t need, int (&logical)[NB]) {
#pragma unroll
  for (int b = 0; b < NB; ++b) logical[b] = slot_logical[b];
  bool whole = true;
#pragma unroll
  for (int b = 0; b < NB; ++b) whole = whole && logical[b] >= 0 && (logical[b] + 1) * B <= a.prefix_len;
  if (a.list_blocks) {
    whole = whole && a.whole_sparse;
#pragma unroll
    for (int b = 0; b < NB; ++b) whole = whole && (slot_members[b] & need) == need;
  }
  return whole;
}

// MT: 16-row tiles per warp (B fragments shared by them); NB: KV blocks per pipeline stage (one
// barrier per stage); NBC: blocks per softmax update (NB / NBC updates a stage; fewer live S
// registers); STAGES: stages in the ring (STAGES - 1 in flight); WARPS: most warps a CTA may have
// (rows past them go to further CTAs, KernelArgs::row_splits); QS: Q lives in shared memory and
// its A fragments are ldmatrix'ed each step (frees the 32 * MT registers that hold Q otherwise,
// for 64-key softmax steps at 32 rows a warp). KS: warps a row tile, splitting each stage's
// blocks (warp part p takes blocks p * NB / KS .. (p + 1) * NB / KS - 1) and meeting in shared
// memory at the end: a short list's CTA of few row tiles (8 nodes: 2 tiles) otherwise left
// half its warps loading only, while every stage's softmax ran on the other half.
template <int MT, int NB, int NBC, int STAGES, int WARPS, bool QS, int KS = 1>
__global__ void __launch_bounds__(WARPS * 32, 1) tree_attention_chunk_kernel(KernelArgs a) {
  static_assert(NB % (KS * NBC) == 0, "a warp part is whole softmax steps");
  static_assert(NB % NBC == 0, "a stage is whole softmax steps");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);                        // [STAGES][NB][B][kRowPad]
  __nv_bfloat16* vs = ks + STAGES * NB * kTile;                                 // [STAGES][NB][B][kRowPad]
  auto* meta_members = reinterpret_cast<uint64_t*>(vs + STAGES * NB * kTile);   // [STAGES][NB]
  auto* meta_logical = reinterpret_cast<int32_t*>(meta_members + STAGES * NB);  // [STAGES][NB], -1: none
  // [cta_rows][kRowPad] when QS, 16-byte aligned after the metadata
  auto* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw + (STAGES * NB * (4 * kTile + 12) + 15) / 16 * 16);

  // Everything below reads what earlier kernels wrote (q, K/V, lists) or writes the workspace the
  // previous call's merge may still read.
  pdl_wait();

  const int chunk = blockIdx.x, kvh = blockIdx.y, group = blockIdx.z / a.row_splits;
  const int cta_row0 = blockIdx.z % a.row_splits * a.cta_rows;
  const int gqa = a.q_heads / a.kv_heads;
  const ChunkRange range = chunk_range(a, chunk, kvh, group);
  const int n_stages = (range.n_entries + NB - 1) / NB;

  // Loading: the CTA's threads form NB teams, team b copies block b of each stage, so each thread
  // needs one physical block id per stage, taken from its warp's EntryWindow one stage early.
  const int team = blockDim.x / NB, my_blk = threadIdx.x / team, my_t = threadIdx.x % team;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int next_logical = -1, next_phys = -1;
  uint64_t next_members = ~0ull;
  EntryWindow entries;
  entries.start(a, range, lane);
  auto fetch = [&](int st) { entries.stage<NB>(a, range, lane, st, my_blk, next_logical, next_phys, next_members); };
  auto issue = [&](int slot) {
    if (next_logical >= 0) {
      const size_t head_off = (size_t(next_phys) * a.kv_heads + kvh) * B * D;
      const __nv_bfloat16* kg = a.k + head_off;
      const __nv_bfloat16* vg = a.v + head_off;
      __nv_bfloat16* kd = ks + (slot * NB + my_blk) * kTile;
      __nv_bfloat16* vd = vs + (slot * NB + my_blk) * kTile;
      for (int p = my_t; p < kPieces; p += team) {
        const int which = p / (kPieces / 2), key = (p % (kPieces / 2)) / (D / 8), col = p % (D / 8) * 8;
        cp_async16((which ? vd : kd) + key * kRowPad + col, (which ? vg : kg) + key * D + col);
      }
    } else {
      // An absent block (partial last stage) reads as zeros: the mask sets its scores to -inf and
      // P = 0 times zero V adds nothing, so the mma loops take every block without a branch.
      __nv_bfloat16* kd = ks + (slot * NB + my_blk) * kTile;
      __nv_bfloat16* vd = vs + (slot * NB + my_blk) * kTile;
      for (int p = my_t; p < kPieces; p += team) {
        const int which = p / (kPieces / 2), key = (p % (kPieces / 2)) / (D / 8), col = p % (D / 8) * 8;
        *reinterpret_cast<uint4*>((which ? vd : kd) + key * kRowPad + col) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    if (my_t == 0) {
      meta_logical[slot * NB + my_blk] = next_logical;
      meta_members[slot * NB + my_blk] = next_members;
    }
  };

  const int g = lane / 4, t = lane % 4;
  const int tiles = a.cta_rows / (16 * MT);  // row tiles a part
  const int part = warp / tiles;             // KS > 1: which blocks of a stage this warp takes
  const int row0 = cta_row0 + warp % tiles * 16 * MT;
  const bool computes = part < KS && row0 < a.rows;
  const int node0 = group * a.group_size;
  const int total_len = a.prefix_len + a.nodes;

  // This thread's rows: g and g+8 of each of its MT tiles; node -1 for padding rows.
  int row_node[MT][2];
  uint32_t qf[QS ? 1 : MT][QS ? 1 : 8][4];  // !QS: Q as the A operand, 16 rows x 128 dims a tile, loaded once
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + m * 16 + g + 8 * r;
      const int local = row / gqa;
      const bool valid = row < a.rows && node0 + local < a.nodes;
      row_node[m][r] = valid ? node0 + local : -1;
      if constexpr (!QS) {
        const __nv_bfloat16* src =
            a.q + (size_t(valid ? node0 + local : 0) * a.q_heads + kvh * gqa + row % gqa) * D + 2 * t;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            // a0: row g, a1: row g+8, a2: g cols+8, a3: g+8 cols+8
            qf[m][kk][r + 2 * half] = valid ? *reinterpret_cast<const uint32_t*>(src + kk * 16 + half * 8) : 0u;
          }
        }
      }
    }
  }

  // The ring's first stages (the !QS Q loads above are in flight meanwhile: they do not wait on the
  // entries' chain).
  fetch(0);
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_stages) issue(s);
    cp_async_commit();
    fetch(s + 1);
  }

  // QS: the group's Q rows (zeros for padding) into shared memory, 16 bytes a thread a step; the
  // main loop's first barrier publishes them. After the ring's first copies: these loads wait.
  if constexpr (QS) {
    for (int i = threadIdx.x; i < a.cta_rows * (D / 8); i += blockDim.x) {
      const int row = cta_row0 + i / (D / 8), col = i % (D / 8) * 8, local = row / gqa;
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (row < a.rows && node0 + local < a.nodes)
        x = *reinterpret_cast<const uint4*>(a.q + (size_t(node0 + local) * a.q_heads + kvh * gqa + row % gqa) * D +
                                            col);
      *reinterpret_cast<uint4*>(qs + (row - cta_row0) * kRowPad + col) = x;
    }
  }

  int row_nodes[2 * MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) row_nodes[2 * m] = row_node[m][0], row_nodes[2 * m + 1] = row_node[m][1];
  const uint64_t need = warp_nodes(row_nodes);

  float o[MT][16][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < 16; ++i) o[m][i][0] = o[m][i][1] = o[m][i][2] = o[m][i][3] = 0.f;
  float m_run[MT][2], l_run[MT][2];  // running max of the unscaled scores, running sum
#pragma unroll
  for (int m = 0; m < MT; ++m) m_run[m][0] = m_run[m][1] = -INFINITY, l_run[m][0] = l_run[m][1] = 0.f;

  // ldmatrix lane addresses: K (non-transposed) gives b0/b1 of two 8-key n-tiles per 16 dims;
  // V (transposed) gives b0/b1 of two 8-dim n-tiles per 16 keys.
  const int k_row = (lane >> 4) * 8 + (lane & 7), k_col = ((lane >> 3) & 1) * 8;
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;

  for (int st = 0; st < n_stages; ++st) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (st + STAGES - 1 < n_stages) issue((st + STAGES - 1) % STAGES);
    cp_async_commit();
    fetch(st + STAGES);
    if (!computes) continue;

    const int slot = st % STAGES;
    int logical[NB];
    const bool whole = read_stage(a, meta_logical + slot * NB, meta_members + slot * NB, need, logical);

    // The stage's blocks in steps of NBC: QK^T, one softmax update, PV per step.
#pragma unroll
    for (int b0 = 0; b0 < NB; b0 += NBC) {
      if constexpr (KS > 1) {
        if (b0 / (NB / KS) != part) continue;  // warp-uniform; indices stay compile-time
      }
      // S = Q K^T (unscaled): per tile, 16 rows x NBC*16 keys as 2*NBC n-tiles of 8 keys.
      float s[MT][2 * NBC][4];
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < 2 * NBC; ++j) s[m][j][0] = s[m][j][1] = s[m][j][2] = s[m][j][3] = 0.f;
      if constexpr (QS) {
        // dims outer: each Q A fragment (ldmatrix, same lane layout as V's) serves the step's
        // blocks.
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
          uint32_t qa[MT][4];
#pragma unroll
          for (int m = 0; m < MT; ++m)
            ldmatrix_x4(qa[m], qs + (row0 - cta_row0 + m * 16 + v_row) * kRowPad + kk * 16 + v_col);
#pragma unroll
          for (int bb = 0; bb < NBC; ++bb) {
            uint32_t kf[4];
            ldmatrix_x4(kf, ks + (slot * NB + b0 + bb) * kTile + k_row * kRowPad + k_col + kk * 16);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
              mma16816(s[m][2 * bb], qa[m], kf[0], kf[1]);
              mma16816(s[m][2 * bb + 1], qa[m], kf[2], kf[3]);
            }
          }
        }
      } else {
#pragma unroll
        for (int bb = 0; bb < NBC; ++bb) {
          const int b = b0 + bb;
          const __nv_bfloat16* kt = ks + (slot * NB + b) * kTile + k_row * kRowPad + k_col;
          uint32_t kf[2][4];  // double-buffered: the next ldmatrix is in flight during this mma
          ldmatrix_x4(kf[0], kt);
#pragma unroll
          for (int kk = 0; kk < 8; ++kk) {
            if (kk + 1 < 8) ldmatrix_x4(kf[(kk + 1) % 2], kt + (kk + 1) * 16);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
              mma16816(s[m][2 * bb], qf[m][kk], kf[kk % 2][0], kf[kk % 2][1]);
              mma16816(s[m][2 * bb + 1], qf[m][kk], kf[kk % 2][2], kf[kk % 2][3]);
            }
          }
        }
      }

      // Online softmax on the unscaled scores, all of the thread's rows at once (independent
      // chains, one vote): masked keys become -inf; max over the row; p = 2^(s*scale - max*scale)
      // as one FFMA and one MUFU a score.
      float mx[MT][2];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[m][r] = -INFINITY;
          if (whole) {
            mx[m][r] = row_max(reinterpret_cast<const float(&)[2 * NBC * 4]>(s[m]), r);
          } else {
            const int node = row_node[m][r];
#pragma unroll
            for (int bb = 0; bb < NBC; ++bb) {
              const int b = b0 + bb;
              const bool member = node >= 0 && logical[b] >= 0 &&
                                  ((a.list_blocks ? (meta_members[slot * NB + b] >> node) & 1ull : 1ull) != 0);
              const bool tree = member && (logical[b] + 1) * B > a.prefix_len;
              const uint64_t anc = tree ? a.ancestors[node] : 0ull;
#pragma unroll
              for (int jj = 0; jj < 2; ++jj) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                  float& x = s[m][2 * bb + jj][2 * r + c];
                  const int pos = logical[b] * B + jj * 8 + 2 * t + c;
                  bool visible = member && pos < total_len;
                  if (visible && pos >= a.prefix_len) visible = (anc >> (pos - a.prefix_len)) & 1ull;
                  if (!visible) x = -INFINITY;
                  mx[m][r] = fmaxf(mx[m][r], x);
                }
              }
            }
          }
        }
      }
#pragma unroll
      for (int x = 1; x <= 2; x *= 2)
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
          for (int r = 0; r < 2; ++r) mx[m][r] = fmaxf(mx[m][r], __shfl_xor_sync(0xffffffffu, mx[m][r], x));
      bool moved = false;
      float alpha[MT][2];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float m_new = fmaxf(m_run[m][r], mx[m][r]);
          // A row with nothing visible yet keeps max -inf: offset 0, so its -inf scores give p = 0.
          const float offset = m_new == -INFINITY ? 0.f : m_new * a.scale_log2;
          alpha[m][r] = m_new == m_run[m][r] ? 1.f : ex2(fmaf(m_run[m][r], a.scale_log2, -offset));
          moved = moved || m_new != m_run[m][r];
          m_run[m][r] = m_new;
          l_run[m][r] = fmaf(l_run[m][r], alpha[m][r],
                             exp_row(reinterpret_cast<float(&)[2 * NBC * 4]>(s[m]), r, a.scale_log2, offset));
        }
      }
      // Once the running maxima settle, alpha is 1 for whole warps: skip the rescale.
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            o[m][i][0] *= alpha[m][0];
            o[m][i][1] *= alpha[m][0];
            o[m][i][2] *= alpha[m][1];
            o[m][i][3] *= alpha[m][1];
          }
        }
      }

      // O += P V: P (16 rows x 16 keys of block b) re-packed from the S accumulators as the A operand.
#pragma unroll
      for (int bb = 0; bb < NBC; ++bb) {
        const int b = b0 + bb;
        uint32_t pf[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          pf[m][0] = pack_bf16(s[m][2 * bb][0], s[m][2 * bb][1]);
          pf[m][1] = pack_bf16(s[m][2 * bb][2], s[m][2 * bb][3]);
          pf[m][2] = pack_bf16(s[m][2 * bb + 1][0], s[m][2 * bb + 1][1]);
          pf[m][3] = pack_bf16(s[m][2 * bb + 1][2], s[m][2 * bb + 1][3]);
        }
        const __nv_bfloat16* vt = vs + (slot * NB + b) * kTile + v_row * kRowPad + v_col;
        uint32_t vf[2][4];  // double-buffered like K
        ldmatrix_x4_trans(vf[0], vt);
#pragma unroll
        for (int dp = 0; dp < 8; ++dp) {
          if (dp + 1 < 8) ldmatrix_x4_trans(vf[(dp + 1) % 2], vt + (dp + 1) * 16);
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma16816(o[m][2 * dp], pf[m], vf[dp % 2][0], vf[dp % 2][1]);
            mma16816(o[m][2 * dp + 1], pf[m], vf[dp % 2][2], vf[dp % 2][3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  pdl_trigger();
  if constexpr (KS > 1) {
    // Parts 1.. leave (m, l, O) in the drained ring, a lane's own values; part 0 folds them in:
    // M = max of the parts' maxima, each part scaled by 2^((m_p - M) x scale) (0 for m_p = -inf).
    constexpr int kVals = MT * (64 + 4);  // a lane's O, m and l
    static_assert((KS - 1) * (WARPS / KS) * kVals * 32 * sizeof(float) <= STAGES * NB * 2 * kTile * sizeof(__nv_bfloat16),
                  "the parts' exchange fits in the K/V ring");
    float* xs = reinterpret_cast<float*>(smem_raw);  // [KS - 1][tiles][kVals][32]
    __syncthreads();                                 // every warp is past its last ring read
    if (computes && part > 0) {
      float* mine = xs + ((part - 1) * tiles + warp % tiles) * kVals * 32 + lane;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
          for (int c = 0; c < 4; ++c) mine[((m * 16 + i) * 4 + c) * 32] = o[m][i][c];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mine[(MT * 64 + m * 4 + r) * 32] = m_run[m][r];
          mine[(MT * 64 + m * 4 + 2 + r) * 32] = l_run[m][r];
        }
      }
    }
    __syncthreads();
    if (!computes || part > 0) return;
#pragma unroll
    for (int p = 1; p < KS; ++p) {
      const float* theirs = xs + ((p - 1) * tiles + warp % tiles) * kVals * 32 + lane;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        float f_mine[2], f_theirs[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float m_p = theirs[(MT * 64 + m * 4 + r) * 32], l_p = theirs[(MT * 64 + m * 4 + 2 + r) * 32];
          const float m_new = fmaxf(m_run[m][r], m_p);
          const float offset = m_new == -INFINITY ? 0.f : m_new * a.scale_log2;
          f_mine[r] = m_run[m][r] == -INFINITY ? 0.f : ex2(fmaf(m_run[m][r], a.scale_log2, -offset));
          f_theirs[r] = m_p == -INFINITY ? 0.f : ex2(fmaf(m_p, a.scale_log2, -offset));
          m_run[m][r] = m_new;
          l_run[m][r] = l_run[m][r] * f_mine[r] + l_p * f_theirs[r];
        }
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
          for (int c = 0; c < 4; ++c)
            o[m][i][c] = o[m][i][c] * f_mine[c / 2] + theirs[((m * 16 + i) * 4 + c) * 32] * f_theirs[c / 2];
      }
    }
  }
  if (!computes) return;

  const size_t part_row0 = ((size_t(group) * a.kv_heads + kvh) * a.chunks + chunk) * a.rows_pad;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l_run[m][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      const int row = row0 + m * 16 + g + 8 * r;
      if (row >= a.rows_pad) continue;
      float* dst = a.part_o + (part_row0 + row) * D;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        *reinterpret_cast<float2*>(dst + i * 8 + 2 * t) = make_float2(o[m][i][2 * r], o[m][i][2 * r + 1]);
      }
      if (t == 0) a.part_ml[part_row0 + row] = make_float2(m_run[m][r] * a.scale_log2, lr);
    }
  }
}

// Merges the chunks of one (node, q head) row: out = sum_c 2^(m_c - M) o_c / sum_c 2^(m_c - M) l_c.
// `split` warps a row (merge_split: enough that each warp has at most kMergeBatch chunks, up to
// kMergeWarps), kMergeWarps / split rows a CTA; warp part p of a row takes chunks p, p + split, ...
// (a lane 4 dims). Every load of a warp's first kMergeBatch chunks -- their o, their (m, l) and
// the (m, l) that give the row's max -- is issued before any is used, so up to split x kMergeBatch
// chunks cost one L2 round trip. A row's warps meet in shared memory. (At a610378's parent one warp a row walked all
// chunks, 8 loads in flight: ~9 us at 8K / 8 nodes, 32 CTAs for 33 chunks x 256 rows, latency-bound on L2.)
constexpr int kMergeWarps = 8, kMergeBatch = 8;
constexpr size_t kMergeSmem = kMergeWarps * 32 * sizeof(float4) + kMergeWarps * sizeof(float);
// Warps a row for `chunks` chunks: a power of two, kMergeBatch chunks a warp where kMergeWarps allow.
inline int merge_split(int chunks) {
  int split = 1;
  while (split < kMergeWarps && split * kMergeBatch < chunks) split *= 2;
  return split;
}
__global__ void __launch_bounds__(kMergeWarps * 32)
    tree_attention_merge_kernel(KernelArgs a, int split, __nv_bfloat16* out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* sum_o = reinterpret_cast<float4*>(smem_raw);                 // [kMergeWarps][32]: a lane's 4 dims
  auto* sum_l = reinterpret_cast<float*>(sum_o + kMergeWarps * 32);  // [kMergeWarps]
  pdl_wait();  // the partials come from the chunk kernel just before
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % split;
  const int item = blockIdx.x * (kMergeWarps / split) + warp / split;
  const bool valid = item < a.nodes * a.q_heads;  // the last CTA's rows may run past the last row
  const int node = valid ? item / a.q_heads : 0, head = valid ? item % a.q_heads : 0;
  const int gqa = a.q_heads / a.kv_heads, kvh = head / gqa;
  const int group = node / a.group_size;
  const int row = (node - group * a.group_size) * gqa + head % gqa;
  const int count = a.list_blocks ? a.list_counts[group * a.kv_heads + kvh] : a.max_blocks;
  const int per_chunk = chunk_entries(a, count);
  const int used = valid ? (count + per_chunk - 1) / per_chunk : 0;
  const size_t base = (size_t(group) * a.kv_heads + kvh) * a.chunks;
  const float2* ml = a.part_ml + base * a.rows_pad + row;
  const size_t stride4 = size_t(a.rows_pad) * D / 4;  // float4s from one chunk's row to the next's
  const float4* po = reinterpret_cast<const float4*>(a.part_o + (base * a.rows_pad + row) * D) + lane;
  const int mine = used > part ? (used - part + split - 1) / split : 0;  // this warp's chunks
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float den = 0.f;
  // The row's max over all chunks, its first 64 chunks' loads issued here and used after the first
  // batch's loads below are issued too.
  float mmax = lane < used ? ml[size_t(lane) * a.rows_pad].x : -INFINITY;
  const float mmax_hi = lane + 32 < used ? ml[size_t(lane + 32) * a.rows_pad].x : -INFINITY;
  for (int i0 = 0; i0 < mine; i0 += kMergeBatch) {
    float4 oc[kMergeBatch];  // the batch's chunks' o, 4 dims a lane
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      oc[j] = i0 + j < mine ? po[size_t(part + split * (i0 + j)) * stride4] : make_float4(0.f, 0.f, 0.f, 0.f);
    // Lane j < kMergeBatch: the (m, l) of this batch's chunk j.
    float2 v = make_float2(-INFINITY, 0.f);
    if (lane < kMergeBatch && i0 + lane < mine) v = ml[size_t(part + split * (i0 + lane)) * a.rows_pad];
    if (i0 == 0) {
      mmax = fmaxf(mmax, mmax_hi);
      for (int c = lane + 64; c < used; c += 32) mmax = fmaxf(mmax, ml[size_t(c) * a.rows_pad].x);
#pragma unroll
      for (int x = 16; x >= 1; x /= 2) mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, x));
    }
    // A chunk with no visible key has m = -inf, l = 0 and o = 0 (so has every chunk if mmax is -inf).
    const float w = v.x == -INFINITY ? 0.f : exp2f(v.x - mmax);
    den += w * v.y;
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const float wj = __shfl_sync(0xffffffffu, w, j);
      acc.x += wj * oc[j].x;
      acc.y += wj * oc[j].y;
      acc.z += wj * oc[j].z;
      acc.w += wj * oc[j].w;
    }
  }
#pragma unroll
  for (int x = 16; x >= 1; x /= 2) den += __shfl_xor_sync(0xffffffffu, den, x);
  sum_o[warp * 32 + lane] = acc;
  if (lane == 0) sum_l[warp] = den;
  __syncthreads();
  if (!valid || part != 0) return;
  for (int p = 1; p < split; ++p) {
    const float4 o = sum_o[(warp + p) * 32 + lane];
    acc.x += o.x;
    acc.y += o.y;
    acc.z += o.z;
    acc.w += o.w;
    den += sum_l[warp + p];
  }
  const float inv = den > 0.f ? 1.f / den : 0.f;
  __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
  uint2 packed;
  packed.x = *reinterpret_cast<uint32_t*>(&lo);
  packed.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(out + (size_t(node) * a.q_heads + head) * D + lane * 4) = packed;
}

// The wgmma kernels: a fragment of this file's anonymous namespace (it uses KernelArgs and the helpers above).
#include "kernels/cuda/tree_attention_wgmma.cuh"  // NOLINT(build/include)
// The warp-specialized wgmma kernels (a TMA producer warpgroup, setmaxnreg): a fragment of the same kind.
#include "kernels/cuda/tree_attention_ws.cuh"  // NOLINT(build/include)

// One compiled configuration of the chunk kernel.
struct Variant {
  const char* name;
  int mt, nb, stages, max_warps;
  bool qs;
  void (*kernel)(KernelArgs);
  int warpgroups = 0;  // > 0: the wgmma kernel (tree_attention_wgmma.cuh), 64 rows a warpgroup
  void (*tma_kernel)(KernelArgs, CUtensorMap, CUtensorMap) = nullptr;  // set: the producer/consumer wgmma kernel
  int producer_warps = 0;  // > 0: tree_attention_ws.cuh's kernel, its producer warps after the consumers
  int ks = 1;              // the chunk kernel's KS: warps a row tile, each taking part of every stage
};

constexpr Variant kVariants[] = {
    {"m1b4", 1, 4, 3, 8, false, tree_attention_chunk_kernel<1, 4, 4, 3, 8, false>},
    {"q2b4w4", 2, 4, 2, 4, true, tree_attention_chunk_kernel<2, 4, 4, 2, 4, true>},
    {"q2b4s4", 2, 4, 4, 8, true, tree_attention_chunk_kernel<2, 4, 4, 4, 8, true>},
    // wgmma: wgWsS = W warpgroups (64 rows each) a CTA, further rows on further CTAs; S stages.
    {"wg4s4", 1, wg::kNB, 4, 16, true, tree_attention_wgmma_kernel<4, 4, 1>, 4},
    // wgmma with one producer (TMA loads on full/empty mbarriers, no CTA barrier in the loop): S slots.
    {"wg4p4", 1, wg::kNB, 4, 16, true, nullptr, 4, tree_attention_wgmma_tma_kernel<4, 4>},
    // warp-specialized (tree_attention_ws.cuh): 2 consumer warpgroups, 128-key stages, 3 slots (2
    // slots ran 1.3-1.8x slower at 48-64 nodes: attention_notes.md, 11-25 session 14).
    {"ws2s3", 1, 8, 3, 8, true, nullptr, 2, tree_attention_ws_kernel<2, 8, 3>, ws::kProducerWarps},
    // 3 consumer warpgroups (192 rows: 48 nodes in one CTA), 64-key stages, 4 slots.
    {"ws3s4", 1, 4, 4, 12, true, nullptr, 3, tree_attention_ws_kernel<3, 4, 4>, ws::kProducerWarps},
    // m1b4 with two warps a row tile, each taking 2 blocks of a stage (KS 2; up to 4 row tiles).
    {"m1b4k2", 1, 4, 3, 8, false, tree_attention_chunk_kernel<1, 4, 2, 3, 8, false, 2>, 0, nullptr, 0, 2},
};
constexpr int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr bool variant_is(int i, const char* name) {
  const char* s = kVariants[i].name;
  while (*s && *s == *name) ++s, ++name;
  return *s == *name;
}

// Query rows a CTA's row tile: what rows_pad rounds to (a wgmma warpgroup takes 64).
int variant_tile_rows(const Variant& v) { return v.warpgroups ? 64 : 16 * v.mt; }

// The chunk kernel's shared memory: K/V stages, their metadata, then (QS) the CTA's Q rows.
size_t variant_smem(const Variant& v, int cta_rows) {
  if (v.producer_warps) return ws::smem_bytes(v.stages, v.nb, (cta_rows + 63) / 64 * 64);
  if (v.tma_kernel) return wg::smem_bytes_tma(v.stages, (cta_rows + 63) / 64 * 64);
  if (v.warpgroups) return wg::smem_bytes(v.stages, (cta_rows + 63) / 64 * 64);
  const size_t stages =
      size_t(v.stages) * v.nb * (2 * kTile * sizeof(__nv_bfloat16) + sizeof(uint64_t) + sizeof(int32_t));
  return (stages + 15) / 16 * 16 + (v.qs ? size_t(cta_rows) * kRowPad * sizeof(__nv_bfloat16) : 0);
}

// Variant choice by query rows a (group, kv head): <= 64 rows (16 nodes at GQA 4), <= 128, <= 192,
// more (up to 256). SPECULA_TREE_ATTN=<a>,<b>,<c>,<d> overrides them (A/B timing on the device; a
// shorter list sets the first tiers only).
constexpr int kLongList = 768;  // blocks (12K tokens; at 8K, 8-12 nodes ran 3-6% slower on ws2s3)
struct Choice {
  // m1b4, ws2s3, ws3s4 (129-192 rows in one CTA), ws2s3 (two CTAs of 128 rows; ws3s4's 192 + 64
  // split ran 1.05-1.4x slower) (attention_notes.md, 11-25 session 14). long_tier0 replaces
  // tier 0 for dense lists of kLongList blocks and more when a group has more than 16 rows: ws2s3
  // there too (8-16 nodes, 12K-128K: 4-16% faster). Sparse lists of up to 64 rows stay off ws2s3:
  // group-union lists (8 nodes a group at 64K) ran 6-13% slower there, and one-node groups
  // (per-query) slower still.
  int tier[4] = {0, 5, 6, 5};
  int long_tier0 = 5;
  // Sparse lists of kShortRows rows or fewer a group take m1b4k2 (two warps a row tile): at 4-8
  // nodes 4-10% faster than m1b4 at 8K and 64K, first-query at 16 nodes (64 rows) 4-8% slower
  // (bench/results/kernel_builds_s30_m1b4k2_h100_2026-12-08.json).
  int sparse_short_tier0 = 7;
};
constexpr int kShortRows = 32;
static_assert(variant_is(0, "m1b4") && variant_is(5, "ws2s3") && variant_is(6, "ws3s4") && variant_is(7, "m1b4k2"),
              "Choice's tiers name kVariants by index");
Choice variant_choice() {
  static const Choice choice = [] {
    Choice c;
    auto find = [](const char* s, size_t n) {
      for (int i = 0; i < kNumVariants; ++i)
        if (std::strlen(kVariants[i].name) == n && std::strncmp(kVariants[i].name, s, n) == 0) return i;
      return -1;
    };
    if (const char* env = std::getenv("SPECULA_TREE_ATTN")) {
      const char* p = env;
      for (int t = 0; t < 4 && *p; ++t) {
        const char* comma = std::strchr(p, ',');
        const size_t n = comma ? size_t(comma - p) : std::strlen(p);
        const int v = find(p, n);
        if (v >= 0) c.tier[t] = v;
        p += n + (comma ? 1 : 0);
      }
      c.long_tier0 = c.sparse_short_tier0 = c.tier[0];  // an explicit setting holds at every list length
      std::fprintf(stderr, "tree_attention: SPECULA_TREE_ATTN=%s -> %s,%s,%s,%s\n", env, kVariants[c.tier[0]].name,
                   kVariants[c.tier[1]].name, kVariants[c.tier[2]].name, kVariants[c.tier[3]].name);
    }
    return c;
  }();
  return choice;
}

// Resident CTAs per SM for (variant, warps), from the occupancy calculator, cached; also raises
// the kernels' dynamic shared-memory limit once.
struct DeviceShape {
  int sms = 132;
  int ctas_per_sm[kNumVariants][kMaxRows / 16 + 1] = {};
};
const DeviceShape& device_shape() {
  static DeviceShape shape;
  static std::once_flag once;
  std::call_once(once, [] {
    int dev = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&shape.sms, cudaDevAttrMultiProcessorCount, dev);
    for (int i = 0; i < kNumVariants; ++i) {
      const Variant& v = kVariants[i];
      const int most = static_cast<int>(variant_smem(v, 16 * v.mt * v.max_warps));
      const void* fn =
          v.tma_kernel ? reinterpret_cast<const void*>(v.tma_kernel) : reinterpret_cast<const void*>(v.kernel);
      cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
      for (int w = 1; w <= kMaxRows / 16; ++w) {
        int n = 0;
        const size_t smem = variant_smem(v, 16 * v.mt * w);
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, (w + v.producer_warps) * 32, smem) != cudaSuccess)
          n = 1;
        shape.ctas_per_sm[i][w] = std::max(1, n);
      }
    }
    cudaGetLastError();  // a failed query above is not the caller's launch error
  });
  return shape;
}

struct Plan {
  int variant = 0;
  int rows = 0, rows_pad = 0, warps = 0, threads = 0, cta_rows = 0, row_splits = 1;
  int chunks = 0;  // a list's entries spread over these (chunk_entries)
  size_t smem = 0;
  bool kv_pair = false;   // KernelArgs::kv_pair
  bool pingpong = false;  // KernelArgs::pingpong
};

// The row-split CTAs of the warp-specialized tiers share their K/V loads by multicast unless
// set_tree_attention_kv_multicast(false).
std::atomic<bool> g_kv_multicast{true};
// The warp-specialized tiers' consumer warpgroups take turns at the tensor cores only after
// set_tree_attention_ws_pingpong(true): 2-8% slower at 48-64 nodes on the H100
// (bench/results/ws_pingpong_ab_s27_h100_2026-12-07.json), kept for A/B.
std::atomic<bool> g_ws_pingpong{false};

// CTA pairs (clusters of 2) of a variant's shape the device holds at once: a pair must fit in one
// GPC, so this need not be half the CTAs an SM count allows. Queried once per shape; 0 if refused.
int resident_pairs(int variant, int threads, size_t smem) {
  static std::mutex m;
  static std::map<std::tuple<int, int, size_t>, int> known;
  const std::lock_guard<std::mutex> hold(m);
  const auto key = std::tuple{variant, threads, smem};
  if (auto found = known.find(key); found != known.end()) return found->second;
  int pairs = 0;
  if (const auto kernel = kVariants[variant].tma_kernel) {
    const LaunchConfig l(dim3(1, 1, 2), dim3(unsigned(threads)), smem, nullptr, dim3(1, 1, 2));
    if (cudaOccupancyMaxActiveClusters(&pairs, kernel, &l.config) != cudaSuccess) pairs = 0;
  }
  (void)cudaGetLastError();  // a refused query is a plan not to take, not the caller's error
  known.emplace(key, pairs);
  return pairs;
}

// sparse: block lists given (else every block of the context, in order).
Plan make_plan(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks, bool sparse) {
  Plan p;
  const int gqa = tq.q_heads / kv_heads;
  p.rows = group_size * gqa;
  const Choice choice = variant_choice();
  p.variant = choice.tier[p.rows <= 64 ? 0 : p.rows <= 128 ? 1 : p.rows <= 192 ? 2 : 3];
  if (!sparse && p.rows > 16 && p.rows <= 64 && max_blocks >= kLongList) p.variant = choice.long_tier0;
  if (sparse && p.rows <= kShortRows) p.variant = choice.sparse_short_tier0;
  const Variant& v = kVariants[p.variant];
  const int tile_rows = variant_tile_rows(v);
  p.rows_pad = (p.rows + tile_rows - 1) / tile_rows * tile_rows;
  // Rows past what one CTA's warps hold go to further CTAs over the same KV chunk (their second
  // read of it mostly hits L2: they run in the same wave).
  const int most_rows = v.warpgroups ? 64 * v.warpgroups : tile_rows * v.max_warps / v.ks;
  p.row_splits = (p.rows_pad + most_rows - 1) / most_rows;
  p.cta_rows = std::min(p.rows_pad, most_rows);
  p.warps = v.warpgroups ? p.cta_rows / 16 : std::max(4, p.cta_rows / tile_rows * v.ks);
  p.threads = (p.warps + v.producer_warps) * 32;
  p.smem = variant_smem(v, p.cta_rows);
  // One full wave of CTAs (at most 4 per SM: more only adds partials to merge; rounded down to a
  // multiple of the (group, kv head) pairs, so no CTA waits for a second wave); each CTA takes at
  // least one stage, and whole stages.
  const DeviceShape& shape = device_shape();
  int per_sm = std::min(4, shape.ctas_per_sm[p.variant][std::min(p.warps, kMaxRows / 16)]);
  // SPECULA_TREE_ATTN_PER_SM=<n>: at most n CTAs an SM (A/B of the chunk count on the device).
  static const int per_sm_cap = [] {
    const char* env = std::getenv("SPECULA_TREE_ATTN_PER_SM");
    return env ? std::max(1, std::atoi(env)) : 4;
  }();
  per_sm = std::min(per_sm, per_sm_cap);
  const int ctas_wanted = shape.sms * per_sm;
  const int base = std::max(1, groups * kv_heads * p.row_splits);
  const int chunks = std::max(1, ctas_wanted / base);
  const int per_chunk = (std::max(1, (max_blocks + chunks - 1) / chunks) + v.nb - 1) / v.nb * v.nb;
  p.chunks = std::max(1, (max_blocks + per_chunk - 1) / per_chunk);
  // Two row-split CTAs over one chunk read the same K/V: as a pair they load it once (multicast)
  // where the device holds every pair of the grid at once.
  p.kv_pair = v.producer_warps && p.row_splits == 2 && g_kv_multicast.load() &&
              resident_pairs(p.variant, p.threads, p.smem) * 2 >= p.chunks * base;
  p.pingpong = v.producer_warps && p.cta_rows > 64 && g_ws_pingpong.load();
  return p;
}

// K or V (paged: [physical block][kv head][B keys][D] bf16) as a 2D tensor map for the TMA
// variant: D dims x rows (row (block x kv heads + head) x B + key, 256 B), box 64 dims x B keys,
// 128B swizzle (the wgmma tiles' layout). The pool's block count is not known here (PagedKv has no
// size), so the row extent is 2^31: rows past the pool are never addressed (the block table holds
// only pool blocks), and the absent-block loads at row -B fall wholly outside, which reads zeros.
bool encode_kv_map(CUtensorMap* map, const void* base) {
  return hopper::encode_bf16_map(map, base, D, uint64_t(1) << 31, D * sizeof(__nv_bfloat16), 64, B);
}

bool check_queries(const PagedKv& kv, const TreeQueries& tq, std::string* error) {
  auto fail = [&](const char* what) {
    if (error) *error = std::string("tree_attention: ") + what;
    return false;
  };
  if (tq.nodes < 1 || tq.nodes > kAttnMaxNodes) return fail("nodes must be 1..64");
  if (kv.kv_heads < 1 || tq.q_heads % kv.kv_heads != 0) return fail("q_heads must be a multiple of kv_heads");
  if (tq.prefix_len < 0) return fail("prefix_len must be >= 0");
  // The kernels take the row max of unscaled scores: right only for a positive scale.
  if (!(tq.scale > 0.f)) return fail("scale must be > 0");
  if (!kv.k || !kv.v || !kv.block_table || !tq.q || !tq.ancestors) return fail("null input pointer");
  return true;
}

bool launch(const PagedKv& kv, const TreeQueries& tq, const int32_t* blocks, const uint64_t* members,
            const int32_t* counts, int groups, int group_size, int max_blocks, uint16_t* out, void* workspace,
            size_t workspace_bytes, void* stream, std::string* error) {
  if (!check_queries(kv, tq, error)) return false;
  if (group_size * (tq.q_heads / kv.kv_heads) > kMaxRows) {
    if (error) *error = "tree_attention: group has more than 256 query rows";
    return false;
  }
  const Plan p = make_plan(tq, kv.kv_heads, groups, group_size, max_blocks, blocks != nullptr);
  const size_t need = attention_workspace_bytes(tq, kv.kv_heads, groups, group_size, max_blocks);
  if (workspace_bytes < need) {
    if (error)
      *error = "tree_attention: workspace too small (" + std::to_string(workspace_bytes) + " < " +
               std::to_string(need) + " bytes)";
    return false;
  }
  KernelArgs a{};
  a.k = reinterpret_cast<const __nv_bfloat16*>(kv.k);
  a.v = reinterpret_cast<const __nv_bfloat16*>(kv.v);
  a.block_table = kv.block_table;
  a.q = reinterpret_cast<const __nv_bfloat16*>(tq.q);
  a.ancestors = tq.ancestors;
  a.list_blocks = blocks;
  a.list_members = members;
  a.list_counts = counts;
  const size_t parts = size_t(groups) * kv.kv_heads * p.chunks * p.rows_pad;
  a.part_o = static_cast<float*>(workspace);
  a.part_ml = reinterpret_cast<float2*>(a.part_o + parts * D);
  a.kv_heads = kv.kv_heads;
  a.q_heads = tq.q_heads;
  a.nodes = tq.nodes;
  a.prefix_len = tq.prefix_len;
  a.group_size = group_size;
  a.max_blocks = max_blocks;
  a.chunks = p.chunks;
  a.stage_blocks = kVariants[p.variant].nb;
  a.rows = p.rows;
  a.rows_pad = p.rows_pad;
  a.cta_rows = p.cta_rows;
  a.row_splits = p.row_splits;
  a.scale_log2 = tq.scale * 1.4426950408889634f;
  // Read every launch (as SPECULA_SELECT_SCORE), so that a test can run both paths in one process
  // (a captured graph keeps what its capture read).
  const char* whole_env = std::getenv("SPECULA_SPARSE_WHOLE_STAGES");
  a.whole_sparse = !(whole_env && std::strcmp(whole_env, "0") == 0);
  a.kv_pair = p.kv_pair;
  a.pingpong = p.pingpong;
  auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(p.chunks, kv.kv_heads, groups * p.row_splits);
  if (const auto tma_kernel = kVariants[p.variant].tma_kernel) {
    CUtensorMap k_map, v_map;
    if (!encode_kv_map(&k_map, kv.k) || !encode_kv_map(&v_map, kv.v)) {
      if (error) *error = "tree_attention: cuTensorMapEncodeTiled failed for the K/V tensor maps";
      return false;
    }
    const LaunchConfig l(grid, dim3(unsigned(p.threads)), p.smem, s, dim3(1, 1, p.kv_pair ? 2 : 1));
    (void)cudaLaunchKernelEx(&l.config, tma_kernel, a, k_map, v_map);  // errors: cudaGetLastError below
  } else {
    launch_pdl(kVariants[p.variant].kernel, grid, dim3(p.threads), p.smem, s, a);
  }
  const int items = tq.nodes * tq.q_heads;
  const int split = merge_split(p.chunks), merge_rows = kMergeWarps / split;
  launch_pdl(tree_attention_merge_kernel, dim3((items + merge_rows - 1) / merge_rows), dim3(kMergeWarps * 32),
             kMergeSmem, s, a, split, reinterpret_cast<__nv_bfloat16*>(out));
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    if (error) *error = std::string("tree_attention: launch failed: ") + cudaGetErrorString(err);
    return false;
  }
  return true;
}

}  // namespace

void set_tree_attention_kv_multicast(bool on) { g_kv_multicast.store(on); }

bool tree_attention_kv_multicast(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks,
                                 bool sparse) {
  return make_plan(tq, kv_heads, groups, group_size, max_blocks, sparse).kv_pair;
}

void set_tree_attention_ws_pingpong(bool on) { g_ws_pingpong.store(on); }

bool tree_attention_ws_pingpong(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks,
                                bool sparse) {
  return make_plan(tq, kv_heads, groups, group_size, max_blocks, sparse).pingpong;
}

size_t attention_workspace_bytes(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks) {
  // The caller may run either kind of list on this workspace: the larger plan of the two.
  size_t parts = 0;
  for (const bool sparse : {false, true}) {
    const Plan p = make_plan(tq, kv_heads, groups, group_size, max_blocks, sparse);
    parts = std::max(parts, size_t(groups) * kv_heads * p.chunks * p.rows_pad);
  }
  return parts * D * sizeof(float) + parts * sizeof(float2);
}

bool tree_attention_dense(const PagedKv& kv, const TreeQueries& tq, uint16_t* out, void* workspace,
                          size_t workspace_bytes, void* stream, std::string* error) {
  const int max_blocks = (tq.prefix_len + tq.nodes + B - 1) / B;
  return launch(kv, tq, nullptr, nullptr, nullptr, 1, tq.nodes, max_blocks, out, workspace, workspace_bytes, stream,
                error);
}

bool tree_attention_sparse(const PagedKv& kv, const TreeQueries& tq, const BlockLists& lists, uint16_t* out,
                           void* workspace, size_t workspace_bytes, void* stream, std::string* error) {
  if (!lists.blocks || !lists.members || !lists.counts || lists.groups < 1 || lists.group_size < 1 ||
      lists.groups != (tq.nodes + lists.group_size - 1) / lists.group_size) {
    if (error) *error = "tree_attention_sparse: block lists do not match the tree (groups x group_size)";
    return false;
  }
  return launch(kv, tq, lists.blocks, lists.members, lists.counts, lists.groups, lists.group_size, lists.max_blocks,
                out, workspace, workspace_bytes, stream, error);
}

}  // namespace specula::cuda

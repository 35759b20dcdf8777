// Quest block scoring, top-k by radix select, and the per-group block lists the sparse verify
// reads. Three launches: score, select, build lists.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/pdl.cuh"

namespace specula::cuda {
namespace {

constexpr int kScoreBlocks = 32;  // logical blocks per scoring CTA, one per lane
constexpr int kListThreads = 256;
constexpr int kListThreadsWide = 1024;    // when the (group, kv head) lists do not fill the GPU
constexpr int kSelectThreads = 256;       // a CTA per segment when segments fill the GPU
constexpr int kSelectThreadsWide = 1024;  // when they do not (first_query: 8 segments)

struct Shape {
  int nblocks = 0, first_forced = 0, forced = 0, take = 0, stride = 1, selectors = 0, groups = 0, group_size = 0,
      max_blocks = 0;
};

Shape make_shape(const TreeQueries& tq, const SelectParams& sp) {
  Shape s;
  const int B = sp.block_size;
  s.nblocks = (tq.prefix_len + tq.nodes + B - 1) / B;
  s.first_forced = std::max(0, tq.prefix_len / B - sp.local_blocks);
  for (int b = 0; b < s.nblocks; ++b) s.forced += (b < sp.sink_blocks || b >= s.first_forced) ? 1 : 0;
  s.take = std::min(s.nblocks, s.forced + std::max(0, sp.top_k));
  const int gs = std::max(1, std::min(sp.group_size, tq.nodes));
  switch (sp.mode) {
    case QueryMode::kPerQuery:
      s.group_size = 1;
      s.stride = 1;
      break;
    case QueryMode::kFirstQuery:
      s.group_size = tq.nodes;
      s.stride = tq.nodes;
      break;
    case QueryMode::kGroupUnion:
      s.group_size = gs;
      s.stride = 1;
      break;
    case QueryMode::kGroupShared:
      s.group_size = gs;
      s.stride = gs;
      break;
  }
  s.groups = (tq.nodes + s.group_size - 1) / s.group_size;
  s.selectors = (tq.nodes + s.stride - 1) / s.stride;
  const int union_of = sp.mode == QueryMode::kGroupUnion ? s.group_size : 1;
  s.max_blocks = std::min(s.nblocks, s.take * union_of);
  return s;
}

// 16 bytes of bf16 metadata as 8 floats.
__device__ __forceinline__ void unpack16(const uint4& v, float* out) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(w[i] << 16);
    out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

constexpr int kScoreThreads = 256;

// scores[sel][kvh][b] (float). Metadata of the CTA's 32 blocks is staged in shared memory as f32,
// one row of kD + 1 floats per (min|max, block): the odd row stride puts the 32 lanes' reads of
// one dimension in 32 distinct banks. The staging reads 16 bytes a load, all of a thread's loads
// issued before the first store: with 4-byte loads one at a time the kernel was bound by loads in
// flight (58 us a layer for Llama-8B's 34 MB of then-f32 metadata at 64K, ~11 us at copy speed;
// bench/results/cuda_verify_8b_64k_profile_h100_2026-11-24.json). Rows are 16-byte aligned:
// kD * 2 bytes is a multiple of 128.
template <int kD>
__global__ void __launch_bounds__(kScoreThreads)
    quest_score_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ bmin,
                       const __nv_bfloat16* __restrict__ bmax, const int32_t* __restrict__ block_table, int kv_heads,
                       int q_heads, int selectors, int stride, int nblocks, int sink_blocks, int first_forced,
                       float* scores) {
  constexpr int kVec = 8;                // bf16 values per 16-byte load
  constexpr int kRowChunks = kD / kVec;  // loads per (min|max, block) row
  constexpr int kChunks = kScoreBlocks * 2 * kRowChunks;
  constexpr int kPerThread = (kChunks + kScoreThreads - 1) / kScoreThreads;
  __shared__ float meta[2][kScoreBlocks][kD + 1];
  pdl_trigger();
  const int kvh = blockIdx.y, b0 = blockIdx.x * kScoreBlocks, gqa = q_heads / kv_heads;
  uint4 raw[kPerThread];
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int i = threadIdx.x + r * kScoreThreads;
    const int blk = i / (2 * kRowChunks), which = i / kRowChunks % 2, d = i % kRowChunks * kVec;
    raw[r] = make_uint4(0u, 0u, 0u, 0u);
    if (i < kChunks && b0 + blk < nblocks) {
      const size_t phys = static_cast<size_t>(block_table[b0 + blk]);
      raw[r] = __ldg(reinterpret_cast<const uint4*>((which ? bmax : bmin) + (phys * kv_heads + kvh) * kD + d));
    }
  }
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int i = threadIdx.x + r * kScoreThreads;
    if (i >= kChunks) break;
    const int blk = i / (2 * kRowChunks), which = i / kRowChunks % 2, d = i % kRowChunks * kVec;
    float v[kVec];
    unpack16(raw[r], v);
#pragma unroll
    for (int j = 0; j < kVec; ++j) meta[which][blk][d + j] = v[j];
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, b = b0 + lane;
  for (int sel = warp; sel < selectors; sel += blockDim.x / 32) {
    const int node = sel * stride;
    float acc = 0.f;
    for (int h = 0; h < gqa; ++h) {
      const __nv_bfloat16* qr = q + (size_t(node) * q_heads + kvh * gqa + h) * kD;
      for (int w = 0; w < kD / 2; ++w) {
        const float2 qv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(qr + 2 * w));
        const float mnx = meta[0][lane][2 * w], mny = meta[0][lane][2 * w + 1];
        const float mxx = meta[1][lane][2 * w], mxy = meta[1][lane][2 * w + 1];
        acc += fmaxf(qv.x * mnx, qv.x * mxx) + fmaxf(qv.y * mny, qv.y * mxy);
      }
    }
    if (b < nblocks) {
      const bool forced = b < sink_blocks || b >= first_forced;
      scores[(size_t(sel) * kv_heads + kvh) * nblocks + b] = forced ? INFINITY : acc;
    }
  }
}

// Row-per-thread scoring: thread b holds block b's min and max rows (kD / 2
// 32-bit words each, kD / 8 16-byte loads, all issued before the first use) in registers and
// walks every selector, so all of a CTA's warps work where the staged kernel above has one warp a
// selector (first_query: 1 of 8 warps busy, 31 us at 64K for 17 MB, latency-bound; ncu in
// bench/results/ncu_select_breakdown_s10_h100_2026-11-24.txt). Each score is the same sum in the
// same order (h, then dimension pairs) as the staged kernel, so the scores are bit-identical.
constexpr int kRowThreads = 128;
// Past 16 selectors the staged kernel is faster per call (at 64K, 32: 229 against 238-244 us, 64:
// 398 against 429 us in ncu; the rows kernel spills ~100 bytes at 255 registers, 8 warps an SM).
constexpr int kRowsMaxSelectors = 16;

template <int kD>
__global__ void __launch_bounds__(kRowThreads)
    quest_score_rows_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ bmin,
                            const __nv_bfloat16* __restrict__ bmax, const int32_t* __restrict__ block_table,
                            int kv_heads, int q_heads, int selectors, int stride, int nblocks, int sink_blocks,
                            int first_forced, float* scores) {
  constexpr int kLoads = kD / 8;  // 16-byte loads a row (8 bf16)
  pdl_trigger();                  // lets the top-k's launch overlap this kernel; it waits for its completion
  const int kvh = blockIdx.y, b = blockIdx.x * kRowThreads + threadIdx.x, gqa = q_heads / kv_heads;
  if (b >= nblocks) return;
  float* out = scores + size_t(kvh) * nblocks + b;  // + sel * kv_heads * nblocks
  const size_t sel_step = size_t(kv_heads) * nblocks;
  if (b < sink_blocks || b >= first_forced) {
    for (int sel = 0; sel < selectors; ++sel) out[sel * sel_step] = INFINITY;
    return;
  }
  const size_t row = (static_cast<size_t>(block_table[b]) * kv_heads + kvh) * kD;
  uint4 mn[kLoads], mx[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    mn[i] = __ldg(reinterpret_cast<const uint4*>(bmin + row) + i);
    mx[i] = __ldg(reinterpret_cast<const uint4*>(bmax + row) + i);
  }
  for (int sel = 0; sel < selectors; ++sel) {
    const int node = sel * stride;
    float acc = 0.f;
    for (int h = 0; h < gqa; ++h) {
      const auto* qr = reinterpret_cast<const uint4*>(q + (size_t(node) * q_heads + kvh * gqa + h) * kD);
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const uint4 qv = __ldg(qr + i);
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
        const uint32_t nw[4] = {mn[i].x, mn[i].y, mn[i].z, mn[i].w};
        const uint32_t xw[4] = {mx[i].x, mx[i].y, mx[i].z, mx[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // dimensions 8i + 2j (low half) and 8i + 2j + 1 (high half)
          const float qx = __uint_as_float(qw[j] << 16), qy = __uint_as_float(qw[j] & 0xffff0000u);
          const float mnx = __uint_as_float(nw[j] << 16), mny = __uint_as_float(nw[j] & 0xffff0000u);
          const float mxx = __uint_as_float(xw[j] << 16), mxy = __uint_as_float(xw[j] & 0xffff0000u);
          acc += fmaxf(qx * mnx, qx * mxx) + fmaxf(qy * mny, qy * mxy);
        }
      }
    }
    out[sel * sel_step] = acc;
  }
}

// Where every group has one selector (per_query, first_query, group_shared: stride == group size),
// a selector's top-k is its group's list as it stands: ascending ids, every member node in each
// entry. The top-k kernel then writes the lists itself and build_lists is not launched (6.1 us
// and a launch at 64K for first_query, s10 breakdown). blocks == nullptr: write `chosen`.
struct DirectLists {
  int32_t* blocks = nullptr;
  uint64_t* members = nullptr;
  int32_t* counts = nullptr;
  int max_blocks = 0, kv_heads = 0, nodes = 0, group_size = 0;
};

// Order-preserving map of a float to an unsigned key (larger float, larger key); -0 and +0 get
// one key, so they tie (and go by block id) as they do in a float comparison.
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = f == 0.f ? 0u : __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One CTA per (selector, kv head) segment of nblocks scores: the `take` largest, ties to the
// lower block id, written as ascending block ids to chosen[seg * nblocks + 0..take).
// Radix select on the 32-bit keys, 8 bits a pass: each pass histograms the keys that match the
// digits fixed so far and fixes the next digit (where the count from the top reaches `need`),
// so after 4 passes the take-th largest key is known exactly, and how many keys equal to it are
// still needed. A compaction in block order then keeps every larger key and the first `need`
// equal ones. Reads the scores once from memory (the segment lives in shared memory), where the
// segmented radix sort it replaces moved keys and ids through memory on every one of its passes.
__global__ void __launch_bounds__(kSelectThreadsWide)
    top_k_select_kernel(const float* __restrict__ scores, int nblocks, int take, int32_t* __restrict__ chosen,
                        DirectLists direct) {
  extern __shared__ uint32_t keys[];  // [nblocks]
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  __shared__ int warp_gt[kSelectThreadsWide / 32], warp_eq[kSelectThreadsWide / 32];
  pdl_wait();  // the scores
  pdl_trigger();
  const size_t seg = blockIdx.x;
  int32_t* out = direct.blocks ? direct.blocks + seg * direct.max_blocks : chosen + seg * nblocks;
  if (direct.blocks) {
    // Segment = (group, kv head) list: its members are all of the group's nodes, its count `take`.
    const int group = static_cast<int>(seg) / direct.kv_heads, first = group * direct.group_size;
    const int n = min(direct.nodes, first + direct.group_size) - first;
    const unsigned long long bits = (n == 64 ? ~0ull : (1ull << n) - 1ull) << first;
    for (int j = threadIdx.x; j < take; j += blockDim.x) direct.members[seg * direct.max_blocks + j] = bits;
    if (threadIdx.x == 0) direct.counts[seg] = take;
  }
  if (take >= nblocks) {
    for (int b = threadIdx.x; b < nblocks; b += blockDim.x) out[b] = b;
    return;
  }
  for (int b = threadIdx.x; b < nblocks; b += blockDim.x) keys[b] = order_key(scores[seg * nblocks + b]);
  uint32_t prefix = 0, fixed = 0;  // digits fixed so far, and their bit mask
  int need = take;                 // keys still wanted among those matching `prefix`
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int b = threadIdx.x; b < nblocks; b += blockDim.x) {
      const uint32_t k = keys[b];
      if ((k & fixed) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (warp == 0) {
      // Lane l holds digits 255 - 8l .. 248 - 8l (descending); a scan over lanes finds the digit
      // where the count from the top first reaches `need`.
      uint32_t c[8], local = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        c[i] = hist[255 - 8 * lane - i];
        local += c[i];
      }
      uint32_t incl = local;
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      const uint32_t excl = incl - local;
      const unsigned hit = __ballot_sync(0xffffffffu, excl < uint32_t(need) && incl >= uint32_t(need));
      if (lane == __ffs(hit) - 1) {
        uint32_t acc = excl;
        int i = 0;
        while (acc + c[i] < uint32_t(need)) acc += c[i++];
        s_prefix = prefix | (uint32_t(255 - 8 * lane - i) << shift);
        s_need = need - static_cast<int>(acc);
      }
    }
    __syncthreads();
    prefix = s_prefix;
    need = s_need;
    fixed |= 255u << shift;
  }
  // prefix is now the take-th largest key; keep keys above it and the first `need` equal to it.
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int per_warp = ((nblocks + warps - 1) / warps + 31) / 32 * 32;
  const int begin = warp * per_warp, end = min(nblocks, begin + per_warp);
  int gt = 0, eq = 0;
  for (int b0 = begin; b0 < end; b0 += 32) {
    const uint32_t k = b0 + lane < end ? keys[b0 + lane] : 0u;
    gt += __popc(__ballot_sync(0xffffffffu, b0 + lane < end && k > prefix));
    eq += __popc(__ballot_sync(0xffffffffu, b0 + lane < end && k == prefix));
  }
  if (lane == 0) {
    warp_gt[warp] = gt;
    warp_eq[warp] = eq;
  }
  __syncthreads();
  int at = 0, eq_before = 0;  // outputs and equal keys in the warps before this one
  for (int w = 0; w < warp; ++w) {
    at += warp_gt[w] + min(warp_eq[w], max(0, need - eq_before));
    eq_before += warp_eq[w];
  }
  for (int b0 = begin; b0 < end; b0 += 32) {
    const int b = b0 + lane;
    const uint32_t k = b < end ? keys[b] : 0u;
    const unsigned is_eq = __ballot_sync(0xffffffffu, b < end && k == prefix);
    const int eq_rank = eq_before + __popc(is_eq & ((1u << lane) - 1u));
    const bool keep = b < end && (k > prefix || (k == prefix && eq_rank < need));
    const unsigned kept = __ballot_sync(0xffffffffu, keep);
    if (keep) out[at + __popc(kept & ((1u << lane) - 1u))] = b;
    at += __popc(kept);
    eq_before += __popc(is_eq);
  }
}

// One CTA per (group, kv head): OR the member nodes' top-`take` sets into a per-block node mask
// in shared memory, then compact it in block order, each warp a contiguous range of blocks placed
// after the warps before it (bench/results/cuda_verify_8b_64k_profile_h100_2026-11-24.json: 57 us
// a layer at 64K with one warp compacting and every node's ids read apart; 53 us with the warps
// alone, cuda_verify_8b_64k_v2_h100_2026-11-24.json).
__global__ void __launch_bounds__(kListThreadsWide)
    build_lists_kernel(const int32_t* __restrict__ sorted_ids, int kv_heads, int nodes, int nblocks, int take,
                       int stride, int group_size, int max_blocks, int32_t* blocks, uint64_t* members,
                       int32_t* counts) {
  extern __shared__ unsigned long long mask[];  // [nblocks]
  __shared__ int warp_count[kListThreadsWide / 32];
  pdl_wait();  // the chosen ids
  const int group = blockIdx.x, kvh = blockIdx.y;
  for (int b = threadIdx.x; b < nblocks; b += blockDim.x) mask[b] = 0ull;
  __syncthreads();
  // Each distinct selector of the group once, with the bits of all its nodes: first_query's one
  // selector serves the whole tree, so a loop over nodes read its ids 61 times, one L2 round trip
  // after another (53 us a layer in the profile above).
  const int first = group * group_size, last = min(nodes, first + group_size);
  for (int sel = first / stride; sel * stride < last; ++sel) {
    const int a = max(first, sel * stride), b = min(last, (sel + 1) * stride);
    const unsigned long long bits = (b - a == 64 ? ~0ull : (1ull << (b - a)) - 1ull) << a;
    const int32_t* ids = sorted_ids + (size_t(sel) * kv_heads + kvh) * nblocks;
    for (int j = threadIdx.x; j < take; j += blockDim.x) atomicOr(&mask[ids[j]], bits);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int per_warp = ((nblocks + warps - 1) / warps + 31) / 32 * 32;
  const int begin = warp * per_warp, end = min(nblocks, begin + per_warp);
  int mine = 0;
  for (int b0 = begin; b0 < end; b0 += 32) {
    mine += __popc(__ballot_sync(0xffffffffu, b0 + lane < end && mask[b0 + lane] != 0ull));
  }
  if (lane == 0) warp_count[warp] = mine;
  __syncthreads();
  int count = 0, total = 0;  // listed blocks in the warps before this one, and in all
  for (int w = 0; w < warps; ++w) {
    count += w < warp ? warp_count[w] : 0;
    total += warp_count[w];
  }
  const size_t base = (size_t(group) * kv_heads + kvh) * max_blocks;
  for (int b0 = begin; b0 < end; b0 += 32) {
    const int b = b0 + lane;
    const unsigned long long m = b < end ? mask[b] : 0ull;
    const unsigned ballot = __ballot_sync(0xffffffffu, m != 0ull);
    if (m != 0ull) {
      const int at = count + __popc(ballot & ((1u << lane) - 1u));
      if (at < max_blocks) {
        blocks[base + at] = b;
        members[base + at] = m;
      }
    }
    count += __popc(ballot);
  }
  if (threadIdx.x == 0) counts[group * kv_heads + kvh] = min(total, max_blocks);
}

struct Layout {
  size_t n = 0, total = 0;  // scores, then chosen ids: n = selectors * Hk * nblocks each
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

Layout make_layout(int kv_heads, const Shape& s) {
  Layout L;
  L.n = size_t(s.selectors) * kv_heads * s.nblocks;
  L.total = 2 * align256(L.n * 4);
  return L;
}

}  // namespace

const char* query_mode_name(QueryMode mode) {
  switch (mode) {
    case QueryMode::kPerQuery:
      return "per_query";
    case QueryMode::kFirstQuery:
      return "first_query";
    case QueryMode::kGroupUnion:
      return "group_union";
    case QueryMode::kGroupShared:
      return "group_shared";
  }
  return "unknown";
}

int selector_stride(const TreeQueries& tq, const SelectParams& sp) { return make_shape(tq, sp).stride; }

void select_list_shape(const TreeQueries& tq, const SelectParams& sp, int* groups, int* group_size, int* max_blocks) {
  const Shape s = make_shape(tq, sp);
  *groups = s.groups;
  *group_size = s.group_size;
  *max_blocks = s.max_blocks;
}

size_t select_workspace_bytes(const TreeQueries& tq, int kv_heads, const SelectParams& sp) {
  return make_layout(kv_heads, make_shape(tq, sp)).total;
}

bool select_blocks(const PagedKv& kv, const TreeQueries& tq, const SelectParams& sp, BlockLists* lists, void* workspace,
                   size_t workspace_bytes, float* scores_copy, void* stream, std::string* error) {
  auto fail = [&](const std::string& what) {
    if (error) *error = "select_blocks: " + what;
    return false;
  };
  if (tq.nodes < 1 || tq.nodes > kAttnMaxNodes) return fail("nodes must be 1..64");
  if (kv.kv_heads < 1 || tq.q_heads % kv.kv_heads != 0) return fail("q_heads must be a multiple of kv_heads");
  if (!kv.block_min || !kv.block_max || !kv.block_table || !tq.q) return fail("null input pointer");
  if (sp.top_k < 0 || sp.sink_blocks < 0 || sp.local_blocks < 0) return fail("negative top_k/sink/local");
  if (sp.head_dim != 64 && sp.head_dim != 128) return fail("head_dim " + std::to_string(sp.head_dim) + " (64 or 128)");
  if (sp.block_size < 8 || sp.block_size > 128)
    return fail("block size " + std::to_string(sp.block_size) + " (8..128)");
  const Shape s = make_shape(tq, sp);
  const Layout L = make_layout(kv.kv_heads, s);
  if (workspace_bytes < L.total) return fail("workspace too small");
  if (!lists || !lists->blocks || !lists->members || !lists->counts) return fail("null block lists");
  lists->groups = s.groups;
  lists->group_size = s.group_size;
  lists->max_blocks = s.max_blocks;
  const size_t mask_bytes = size_t(s.nblocks) * sizeof(unsigned long long);
  const size_t key_bytes = size_t(s.nblocks) * sizeof(uint32_t);
  int dev = 0, smem_optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (mask_bytes > size_t(smem_optin)) return fail("context too long: " + std::to_string(s.nblocks) + " blocks");

  auto* base = static_cast<unsigned char*>(workspace);
  auto* scores = reinterpret_cast<float*>(base);
  auto* chosen = reinterpret_cast<int32_t*>(base + align256(L.n * 4));
  auto st = static_cast<cudaStream_t>(stream);

  const dim3 score_grid((s.nblocks + kScoreBlocks - 1) / kScoreBlocks, kv.kv_heads);
  const auto* q = reinterpret_cast<const __nv_bfloat16*>(tq.q);
  const auto* bmin = reinterpret_cast<const __nv_bfloat16*>(kv.block_min);
  const auto* bmax = reinterpret_cast<const __nv_bfloat16*>(kv.block_max);
  // SPECULA_SELECT_SCORE=staged keeps every call on the staged kernel (A/B against the rows kernel).
  // Read every call, so that a test can compare the two kernels in one process.
  const char* score_env = std::getenv("SPECULA_SELECT_SCORE");
  const bool force_staged = score_env && std::string(score_env) == "staged";
  if (!force_staged && s.selectors <= kRowsMaxSelectors) {
    const dim3 rows_grid((s.nblocks + kRowThreads - 1) / kRowThreads, kv.kv_heads);
    if (sp.head_dim == 128) {
      quest_score_rows_kernel<128><<<rows_grid, kRowThreads, 0, st>>>(q, bmin, bmax, kv.block_table, kv.kv_heads,
                                                                      tq.q_heads, s.selectors, s.stride, s.nblocks,
                                                                      sp.sink_blocks, s.first_forced, scores);
    } else {
      quest_score_rows_kernel<64><<<rows_grid, kRowThreads, 0, st>>>(q, bmin, bmax, kv.block_table, kv.kv_heads,
                                                                     tq.q_heads, s.selectors, s.stride, s.nblocks,
                                                                     sp.sink_blocks, s.first_forced, scores);
    }
  } else if (sp.head_dim == 128) {
    quest_score_kernel<128><<<score_grid, kScoreThreads, 0, st>>>(q, bmin, bmax, kv.block_table, kv.kv_heads,
                                                                  tq.q_heads, s.selectors, s.stride, s.nblocks,
                                                                  sp.sink_blocks, s.first_forced, scores);
  } else {
    quest_score_kernel<64><<<score_grid, kScoreThreads, 0, st>>>(q, bmin, bmax, kv.block_table, kv.kv_heads, tq.q_heads,
                                                                 s.selectors, s.stride, s.nblocks, sp.sink_blocks,
                                                                 s.first_forced, scores);
  }
  if (scores_copy) cudaMemcpyAsync(scores_copy, scores, L.n * sizeof(float), cudaMemcpyDeviceToDevice, st);
  if (key_bytes > 48 * 1024) {
    cudaFuncSetAttribute(top_k_select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(key_bytes));
  }
  // 8 segments of 256 threads left 124 SMs idle and each warp a long serial walk over 512 keys
  // (14.4 us at 64K, ~24K active cycles a CTA at ~10 cycles an instruction: latency, not atomics).
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int segments = s.selectors * kv.kv_heads;
  const int select_threads = segments < sms ? kSelectThreadsWide : kSelectThreads;
  DirectLists direct;
  if (s.stride == s.group_size) {
    direct = {lists->blocks, lists->members, lists->counts, s.max_blocks, kv.kv_heads, tq.nodes, s.group_size};
  }
  launch_pdl(top_k_select_kernel, dim3(segments), dim3(select_threads), key_bytes, st, scores, s.nblocks, s.take,
             chosen, direct);
  if (mask_bytes > 48 * 1024) {
    cudaFuncSetAttribute(build_lists_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(mask_bytes));
  }
  const int list_threads = s.groups * kv.kv_heads < sms ? kListThreadsWide : kListThreads;
  if (!direct.blocks) {
    launch_pdl(build_lists_kernel, dim3(s.groups, kv.kv_heads), dim3(list_threads), mask_bytes, st, chosen, kv.kv_heads,
               tq.nodes, s.nblocks, s.take, s.stride, s.group_size, s.max_blocks, lists->blocks, lists->members,
               lists->counts);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(std::string("launch failed: ") + cudaGetErrorString(err));
  return true;
}

}  // namespace specula::cuda

// Quest block scoring, top-k (CUB segmented radix sort) and the per-group block lists the sparse
// verify reads. Three launches: score, sort, build lists.
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention.h"

namespace specula::cuda {
namespace {

constexpr int B = kAttnBlockSize;
constexpr int D = kAttnHeadDim;
constexpr int kScoreBlocks = 32;  // logical blocks per scoring CTA, one per lane
constexpr int kMetaRowWords = D / 2 + 1;  // bf16 pairs per smem row, +1 word so lanes hit distinct banks
constexpr int kListThreads = 256;

struct Shape {
  int nblocks = 0, first_forced = 0, forced = 0, take = 0, stride = 1, selectors = 0, groups = 0, group_size = 0,
      max_blocks = 0;
};

Shape make_shape(const TreeQueries& tq, const SelectParams& sp) {
  Shape s;
  s.nblocks = (tq.prefix_len + tq.nodes + B - 1) / B;
  s.first_forced = std::max(0, tq.prefix_len / B - sp.local_blocks);
  for (int b = 0; b < s.nblocks; ++b) s.forced += (b < sp.sink_blocks || b >= s.first_forced) ? 1 : 0;
  s.take = std::min(s.nblocks, s.forced + std::max(0, sp.top_k));
  const int gs = std::max(1, std::min(sp.group_size, tq.nodes));
  switch (sp.mode) {
    case QueryMode::kPerQuery: s.group_size = 1; s.stride = 1; break;
    case QueryMode::kFirstQuery: s.group_size = tq.nodes; s.stride = tq.nodes; break;
    case QueryMode::kGroupUnion: s.group_size = gs; s.stride = 1; break;
    case QueryMode::kGroupShared: s.group_size = gs; s.stride = gs; break;
  }
  s.groups = (tq.nodes + s.group_size - 1) / s.group_size;
  s.selectors = (tq.nodes + s.stride - 1) / s.stride;
  const int union_of = sp.mode == QueryMode::kGroupUnion ? s.group_size : 1;
  s.max_blocks = std::min(s.nblocks, s.take * union_of);
  return s;
}

// scores[sel][kvh][b] (float), ids[sel][kvh][b] = b; offsets[i] = i * nblocks.
__global__ void quest_score_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ bmin,
                                   const __nv_bfloat16* __restrict__ bmax, const int32_t* __restrict__ block_table,
                                   int kv_heads, int q_heads, int selectors, int stride, int nblocks, int sink_blocks,
                                   int first_forced, float* scores, int32_t* ids, int32_t* offsets) {
  __shared__ uint32_t meta[kScoreBlocks][2][kMetaRowWords];
  const int kvh = blockIdx.y, b0 = blockIdx.x * kScoreBlocks, gqa = q_heads / kv_heads;
  for (int i = threadIdx.x; i < kScoreBlocks * 2 * (D / 2); i += blockDim.x) {
    const int blk = i / (2 * (D / 2)), which = i / (D / 2) % 2, w = i % (D / 2);
    uint32_t val = 0;
    if (b0 + blk < nblocks) {
      const size_t phys = static_cast<size_t>(block_table[b0 + blk]);
      const __nv_bfloat16* src = (which ? bmax : bmin) + (phys * kv_heads + kvh) * D + 2 * w;
      val = *reinterpret_cast<const uint32_t*>(src);
    }
    meta[blk][which][w] = val;
  }
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    for (int i = threadIdx.x; i <= selectors * kv_heads; i += blockDim.x) offsets[i] = i * nblocks;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, b = b0 + lane;
  for (int sel = warp; sel < selectors; sel += blockDim.x / 32) {
    const int node = sel * stride;
    float acc = 0.f;
    for (int h = 0; h < gqa; ++h) {
      const __nv_bfloat16* qr = q + (size_t(node) * q_heads + kvh * gqa + h) * D;
      for (int w = 0; w < D / 2; ++w) {
        const float2 qv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(qr + 2 * w));
        const uint32_t mnw = meta[lane][0][w], mxw = meta[lane][1][w];
        const float2 mn = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&mnw));
        const float2 mx = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&mxw));
        acc += fmaxf(qv.x * mn.x, qv.x * mx.x) + fmaxf(qv.y * mn.y, qv.y * mx.y);
      }
    }
    if (b < nblocks) {
      const bool forced = b < sink_blocks || b >= first_forced;
      const size_t at = (size_t(sel) * kv_heads + kvh) * nblocks + b;
      scores[at] = forced ? INFINITY : acc;
      ids[at] = b;
    }
  }
}

// One CTA per (group, kv head): OR the member nodes' top-`take` sets into a per-block node mask
// in shared memory, then compact it in block order.
__global__ void build_lists_kernel(const int32_t* __restrict__ sorted_ids, int kv_heads, int nodes, int nblocks,
                                   int take, int stride, int group_size, int max_blocks, int32_t* blocks,
                                   uint64_t* members, int32_t* counts) {
  extern __shared__ unsigned long long mask[];  // [nblocks]
  const int group = blockIdx.x, kvh = blockIdx.y;
  for (int b = threadIdx.x; b < nblocks; b += blockDim.x) mask[b] = 0ull;
  __syncthreads();
  const int first = group * group_size, last = min(nodes, first + group_size);
  for (int node = first; node < last; ++node) {
    const int32_t* ids = sorted_ids + (size_t(node / stride) * kv_heads + kvh) * nblocks;
    for (int j = threadIdx.x; j < take; j += blockDim.x) atomicOr(&mask[ids[j]], 1ull << node);
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  const size_t base = (size_t(group) * kv_heads + kvh) * max_blocks;
  int count = 0;
  for (int b0 = 0; b0 < nblocks; b0 += 32) {
    const int b = b0 + lane;
    const unsigned long long m = b < nblocks ? mask[b] : 0ull;
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
  if (lane == 0) counts[group * kv_heads + kvh] = min(count, max_blocks);
}

struct Layout {
  size_t n = 0, cub_bytes = 0, total = 0;
};

Layout make_layout(const TreeQueries& tq, int kv_heads, const Shape& s) {
  Layout L;
  L.n = size_t(s.selectors) * kv_heads * s.nblocks;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(nullptr, L.cub_bytes, static_cast<const float*>(nullptr),
                                                      static_cast<float*>(nullptr),
                                                      static_cast<const int32_t*>(nullptr),
                                                      static_cast<int32_t*>(nullptr), static_cast<int>(L.n),
                                                      s.selectors * kv_heads, static_cast<const int32_t*>(nullptr),
                                                      static_cast<const int32_t*>(nullptr) + 1);
  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  L.total = 4 * align(L.n * 4) + align((size_t(s.selectors) * kv_heads + 1) * 4) + align(L.cub_bytes);
  (void)tq;
  return L;
}

}  // namespace

const char* query_mode_name(QueryMode mode) {
  switch (mode) {
    case QueryMode::kPerQuery: return "per_query";
    case QueryMode::kFirstQuery: return "first_query";
    case QueryMode::kGroupUnion: return "group_union";
    case QueryMode::kGroupShared: return "group_shared";
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
  return make_layout(tq, kv_heads, make_shape(tq, sp)).total;
}

bool select_blocks(const PagedKv& kv, const TreeQueries& tq, const SelectParams& sp, BlockLists* lists,
                   void* workspace, size_t workspace_bytes, float* scores_copy, void* stream, std::string* error) {
  auto fail = [&](const std::string& what) {
    if (error) *error = "select_blocks: " + what;
    return false;
  };
  if (tq.nodes < 1 || tq.nodes > kAttnMaxNodes) return fail("nodes must be 1..64");
  if (kv.kv_heads < 1 || tq.q_heads % kv.kv_heads != 0) return fail("q_heads must be a multiple of kv_heads");
  if (!kv.block_min || !kv.block_max || !kv.block_table || !tq.q) return fail("null input pointer");
  if (sp.top_k < 0 || sp.sink_blocks < 0 || sp.local_blocks < 0) return fail("negative top_k/sink/local");
  const Shape s = make_shape(tq, sp);
  const Layout L = make_layout(tq, kv.kv_heads, s);
  if (workspace_bytes < L.total) return fail("workspace too small");
  if (!lists || !lists->blocks || !lists->members || !lists->counts) return fail("null block lists");
  lists->groups = s.groups;
  lists->group_size = s.group_size;
  lists->max_blocks = s.max_blocks;
  const size_t mask_bytes = size_t(s.nblocks) * sizeof(unsigned long long);
  int dev = 0, smem_optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (mask_bytes > size_t(smem_optin)) return fail("context too long: " + std::to_string(s.nblocks) + " blocks");

  auto align = [](size_t x) { return (x + 255) / 256 * 256; };
  auto* base = static_cast<unsigned char*>(workspace);
  auto* keys_in = reinterpret_cast<float*>(base);
  auto* keys_out = reinterpret_cast<float*>(base + align(L.n * 4));
  auto* ids_in = reinterpret_cast<int32_t*>(base + 2 * align(L.n * 4));
  auto* ids_out = reinterpret_cast<int32_t*>(base + 3 * align(L.n * 4));
  auto* offsets = reinterpret_cast<int32_t*>(base + 4 * align(L.n * 4));
  void* cub_temp = base + 4 * align(L.n * 4) + align((size_t(s.selectors) * kv.kv_heads + 1) * 4);
  auto st = static_cast<cudaStream_t>(stream);

  quest_score_kernel<<<dim3((s.nblocks + kScoreBlocks - 1) / kScoreBlocks, kv.kv_heads), 256, 0, st>>>(
      reinterpret_cast<const __nv_bfloat16*>(tq.q), reinterpret_cast<const __nv_bfloat16*>(kv.block_min),
      reinterpret_cast<const __nv_bfloat16*>(kv.block_max), kv.block_table, kv.kv_heads, tq.q_heads, s.selectors,
      s.stride, s.nblocks, sp.sink_blocks, s.first_forced, keys_in, ids_in, offsets);
  if (scores_copy) cudaMemcpyAsync(scores_copy, keys_in, L.n * sizeof(float), cudaMemcpyDeviceToDevice, st);
  size_t cub_bytes = L.cub_bytes;
  cudaError_t err = cub::DeviceSegmentedRadixSort::SortPairsDescending(
      cub_temp, cub_bytes, keys_in, keys_out, ids_in, ids_out, static_cast<int>(L.n), s.selectors * kv.kv_heads,
      offsets, offsets + 1, 0, 32, st);
  if (err != cudaSuccess) return fail(std::string("segmented sort: ") + cudaGetErrorString(err));
  if (mask_bytes > 48 * 1024) {
    cudaFuncSetAttribute(build_lists_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(mask_bytes));
  }
  build_lists_kernel<<<dim3(s.groups, kv.kv_heads), kListThreads, mask_bytes, st>>>(
      ids_out, kv.kv_heads, tq.nodes, s.nblocks, s.take, s.stride, s.group_size, s.max_blocks, lists->blocks,
      lists->members, lists->counts);
  err = cudaGetLastError();
  if (err != cudaSuccess) return fail(std::string("launch failed: ") + cudaGetErrorString(err));
  return true;
}

}  // namespace specula::cuda

#pragma once
// Tree-verify attention over a paged KV cache, dense and block-sparse (Quest scoring), for one
// layer and one sequence. Host API in plain C++: pointers are device pointers, bf16 travels as
// uint16_t bit patterns. All launches go on `stream` (nullptr = default stream); nothing syncs.
//
// Shapes (calm-style; B = block_size = 16 tokens, D = head_dim = 128, Hk = kv heads, Hq = q heads):
//   k, v          [num_blocks][Hk][B][D] bf16   physical blocks, shared by all sequences
//   block_table   [logical_blocks] int32        logical block -> physical block of this sequence
//   block_min/max [num_blocks][Hk][D] bf16      per-block per-head key min / max (Quest metadata)
//   q             [nodes][Hq][D] bf16           one query per tree node and query head
//   ancestors     [nodes] uint64                bit j set iff tree node j is node i or its ancestor
//   out           [nodes][Hq][D] bf16
// Token positions: 0..prefix_len-1 are the committed context (visible to every node); position
// prefix_len + j holds tree node j's own K/V (visible to node i iff ancestors[i] bit j).
#include <cstddef>
#include <cstdint>
#include <string>

namespace specula::cuda {

inline constexpr int kAttnBlockSize = 16;
inline constexpr int kAttnHeadDim = 128;
inline constexpr int kAttnMaxNodes = 64;

struct PagedKv {
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  const uint16_t* block_min = nullptr;  // only block selection reads these
  const uint16_t* block_max = nullptr;
  const int32_t* block_table = nullptr;
  int kv_heads = 8;
};

struct TreeQueries {
  const uint16_t* q = nullptr;
  const uint64_t* ancestors = nullptr;
  int nodes = 0;     // 1..64
  int q_heads = 32;  // multiple of kv_heads; q head h reads kv head h / (q_heads / kv_heads)
  int prefix_len = 0;
  float scale = 0;   // softmax scale (> 0), usually 1/sqrt(D)
};

// Logical blocks each (group, kv head) loads, and which of the group's nodes use each one.
// Group g holds nodes [g * group_size, min(nodes, (g + 1) * group_size)).
//   blocks  [groups][Hk][max_blocks] int32  logical block indices, ascending
//   members [groups][Hk][max_blocks] uint64 bit i set iff node i attends to that block
//   counts  [groups][Hk] int32
struct BlockLists {
  int32_t* blocks = nullptr;
  uint64_t* members = nullptr;
  int32_t* counts = nullptr;
  int groups = 0;
  int group_size = 0;
  int max_blocks = 0;
};

// How the sparse verify chooses blocks for each tree node.
enum class QueryMode {
  kPerQuery,     // every node its own top-k; one group per node
  kFirstQuery,   // node 0's top-k for the whole tree; one group
  kGroupUnion,   // per-node top-k, loaded once per group as the union; each node uses its own subset
  kGroupShared,  // the group's first node's top-k used by every node of the group (approximate)
};
const char* query_mode_name(QueryMode mode);

struct SelectParams {
  QueryMode mode = QueryMode::kPerQuery;
  int group_size = 8;   // for kGroupUnion / kGroupShared
  int top_k = 64;       // blocks chosen by score, on top of the forced ones
  int sink_blocks = 1;  // first blocks, always in
  int local_blocks = 2; // last prefix blocks before the tree, always in (tree blocks are always in)
  // The cache's layout where it differs from PagedKv's (select_blocks only; the attention kernels
  // need 16-token blocks, head_dim 128): block size 8..128, head_dim 64 or 128, block min/max
  // [num_blocks][Hk][head_dim] (the model backend's cache, engine/backend/cuda_session.cpp).
  int block_size = kAttnBlockSize;
  int head_dim = kAttnHeadDim;
};

// Device scratch for one call; sizes come from the *_bytes functions. Callers own the memory.
// Dense: groups = 1, group_size = nodes, max_blocks = ceil((prefix_len + nodes) / 16).
size_t attention_workspace_bytes(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks);
size_t select_workspace_bytes(const TreeQueries& tq, int kv_heads, const SelectParams& sp);
// Groups and max_blocks the lists of select_blocks need.
void select_list_shape(const TreeQueries& tq, const SelectParams& sp, int* groups, int* group_size,
                       int* max_blocks);

// Dense tree verify: every node attends to the whole prefix and its tree ancestors.
bool tree_attention_dense(const PagedKv& kv, const TreeQueries& tq, uint16_t* out, void* workspace,
                          size_t workspace_bytes, void* stream, std::string* error);

// Groups of more than 192 query rows run as two CTAs a chunk (row splits) on the warp-specialized
// tier; by default the two are a thread-block cluster that loads each K/V stage once and
// multicasts it to both, where the device holds every such pair of the grid at once. Off: each
// CTA loads the chunk itself (the second read mostly from L2). Both give the same bits. For A/B
// timing and the test that compares the two; not to be flipped while launches are in flight.
void set_tree_attention_kv_multicast(bool on);
// Whether a call of this shape (sparse: block lists given) runs its row splits as multicast pairs.
bool tree_attention_kv_multicast(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks,
                                 bool sparse);

// The warp-specialized tier's two or three consumer warpgroups a CTA (65..256 query rows a group)
// take turns issuing their tensor-core work, FlashAttention-3's ping-pong, so that one's softmax
// runs while the other's MMAs do. Off by default (it measured slower: their softmaxes already
// overlap, and the turns stall them): each issues as soon as its stage is loaded. Both give the
// same bits. For A/B timing and the test that compares the two, as above.
void set_tree_attention_ws_pingpong(bool on);
// Whether a call of this shape (sparse: block lists given) takes the ping-pong.
bool tree_attention_ws_pingpong(const TreeQueries& tq, int kv_heads, int groups, int group_size, int max_blocks,
                                bool sparse);

// Sparse verify over explicit block lists (made by select_blocks or by the caller).
bool tree_attention_sparse(const PagedKv& kv, const TreeQueries& tq, const BlockLists& lists, uint16_t* out,
                           void* workspace, size_t workspace_bytes, void* stream, std::string* error);

// Quest scoring per (selector node, kv head, logical block):
//   score = sum over the GQA group's q heads h, dims d of max(q[h][d] * max[d], q[h][d] * min[d]);
// forced blocks (sink, local, tree) score +inf; then top-(forced + top_k) per selector (a radix
// select; ties go to the lower block id, as a stable descending sort would) and the per-group
// union with member masks. q is [nodes][Hq][sp.head_dim] bf16. `scores` (optional, may be null) receives
// [selectors][Hk][logical_blocks] float for tests.
bool select_blocks(const PagedKv& kv, const TreeQueries& tq, const SelectParams& sp, BlockLists* lists,
                   void* workspace, size_t workspace_bytes, float* scores, void* stream, std::string* error);

// Nodes whose queries choose blocks under `mode` (node i uses selector i / stride).
int selector_stride(const TreeQueries& tq, const SelectParams& sp);

}  // namespace specula::cuda

#pragma once
// Quest block scoring and top-k block selection over raw buffers (no model, no cache types).
#include <cstdint>
#include <span>
#include <vector>

namespace specula {

// Upper bound of the attention logits a GQA group's queries can reach inside one KV block:
//   Σ_g Σ_i max(q_g,i · max_i, q_g,i · min_i)
// q: (n_queries, head_dim) post-RoPE queries; kmin, kmax: (head_dim), the block's element-wise
// key minimum and maximum. It bounds Σ_g q_g·k from above for every key k in the block.
float quest_bound(const float* q, int64_t n_queries, int64_t head_dim, const float* kmin, const float* kmax);

// The k blocks to read among scores.size(): the first `sink` and last `local` always, then the
// highest scores (ties: the lower block id) until k are chosen. Returns ascending block ids;
// all blocks when k >= scores.size().
std::vector<int32_t> select_blocks(std::span<const float> scores, int64_t k, int64_t sink, int64_t local);

// The same, except that each block taken by score brings its next `successors` blocks along
// while the budget lasts (sink and local first, then by descending score, ties: lower id).
std::vector<int32_t> select_blocks_with_successors(std::span<const float> scores, int64_t k, int64_t sink,
                                                   int64_t local, int64_t successors);

}  // namespace specula

#pragma once
// Scaled dot-product attention of a few query heads that share one KV head (a GQA group)
// over keys/values given as spans of contiguous rows (a KV cache's blocks), each span
// optionally masked row by row.
#include <cstdint>
#include <span>

namespace specula {

struct KvSpan {
  const float* keys = nullptr;    // (n, head_dim)
  const float* values = nullptr;  // (n, head_dim)
  int64_t n = 0;
  const uint8_t* allowed = nullptr;  // (n): 0 = masked out; nullptr = all rows visible
  // Query g reads its mask at allowed + (g / queries_per_mask)·allowed_stride (stride 0: every
  // query shares one mask), so the tokens of a draft tree, and the query heads of a GQA group
  // within each token (queries_per_mask of them, token-major), share one pass over the keys with
  // masks of their own.
  int64_t allowed_stride = 0;
  int64_t queries_per_mask = 1;
};

// q: (n_queries, head_dim); out: (n_queries, head_dim);
// scores: scratch of n_queries × Σ span.n floats. out_g = Σ_j softmax_j(scale · q_g·k_j) v_j.
// A query that sees no row gets zeros. A query's result depends only on its own q, its visible
// rows and their order, never on the other queries of the call (speculative verification relies
// on a verify row equalling a decode step's row bit for bit).
void attention_group(const float* q, int64_t n_queries, int64_t head_dim, std::span<const KvSpan> spans, float scale,
                     float* scores, float* out);

}  // namespace specula
